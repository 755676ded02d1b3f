// Package protocol is the lease + fencing + outbox protocol of the spec (§05–§09) on PostgreSQL,
// written with pgx v4 and pgxpool. It is the part a team replaces with its own protocol code: the
// contract kit (package fpkit) and the command handlers only call the functions of this package.
//
// Every write has two spellings, chosen by Store.API: the statements of the spec on the tables
// (the "direct" write path) or one call of a fenced fp_* function of migrations/0002_worker_role.sql
// (the "api" path, all that a member of the fenceproof_worker role may do).
package protocol

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// The error classes of spec §07. Each maps to one outcome of the worker contract.
var (
	ErrLeaseLost = errors.New("lease lost")
	ErrConflict  = errors.New("run revision conflict")

	ErrInvalidState        = errors.New("run is not in the transition's starting status")
	ErrNotFound            = errors.New("no such run")
	ErrBusy                = errors.New("the lease is held by another term and has not expired")
	ErrIntentMismatch      = errors.New("the step is registered with another run, tool or request digest")
	ErrForeignOperation    = errors.New("the operation belongs to another run")
	ErrOperationNotSettled = errors.New("the operation's result is not succeeded")
	ErrOperationNotFound   = errors.New("no such operation")
	ErrActiveRunLive       = errors.New("the task's active run has not ended")
	// ErrRetryBudgetExhausted: the server answered 40001 (or 40P01) to every attempt of the budget.
	ErrRetryBudgetExhausted = errors.New("serialization failures exhausted the retry budget")
)

// RetryBudget is how many times in all one short transaction runs while the server keeps
// answering it with a serialization failure.
const RetryBudget = 5

// UnknownOutcomeError: the write may or may not have committed (its COMMIT got no answer, or a
// synchronous-replication wait was cancelled). The caller must read the state back from the
// primary before its next write, never retry as if nothing committed.
type UnknownOutcomeError struct{ Err error }

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("commit outcome requires read-back: %v", e.Err)
}
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// IsUnknown reports whether err leaves the outcome of a write unknown.
func IsUnknown(err error) bool {
	var u *UnknownOutcomeError
	return errors.As(err, &u)
}

// Lease names one term: the run, this session's owner id and the epoch.
type Lease struct {
	RunID uuid.UUID
	Owner string
	Epoch int64
}

// Store is the database side of one process: its pool, its owner id and its write path.
type Store struct {
	DB    *pgxpool.Pool
	Owner string
	API   bool // true: every protocol write is a call of an fp_* function
}

// Acquire takes the lease of a run when it is free or expired (spec §5.1): epoch + 1, expiry on
// the database clock. It answers the new term and the run's current revision. ErrBusy: another
// term holds it; ErrNotFound: no such run.
func (s *Store) Acquire(ctx context.Context, runID uuid.UUID, ttlMs int64) (Lease, int64, error) {
	if ttlMs <= 0 {
		return Lease{}, 0, fmt.Errorf("ttl_ms must be > 0, got %d", ttlMs)
	}
	l := Lease{RunID: runID, Owner: s.Owner}
	var revision int64
	err := s.autocommit(ctx, func(c *pgxpool.Conn) error {
		var q string
		if s.API {
			q = `SELECT epoch FROM fp_lease_acquire($1::uuid, $2, $3)`
		} else {
			// $1=run_id, $2=owner, $3=ttl_ms
			q = `UPDATE worker_leases
SET owner = $2,
    epoch = epoch + 1,
    expires_at = clock_timestamp() + ($3::bigint * interval '1 millisecond'),
    updated_at = clock_timestamp()
WHERE run_id = $1
  AND (owner IS NULL OR expires_at <= clock_timestamp())
RETURNING epoch`
		}
		err := c.QueryRow(ctx, q, runID, s.Owner, ttlMs).Scan(&l.Epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			// Zero rows: the run does not exist, or its lease is held and not expired.
			var exists bool
			if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worker_leases WHERE run_id = $1)`,
				runID).Scan(&exists); err != nil {
				return err
			}
			if exists {
				return ErrBusy
			}
			return ErrNotFound
		} else if err != nil {
			return err
		}
		return c.QueryRow(ctx, `SELECT revision FROM agent_runs WHERE run_id = $1`, runID).Scan(&revision)
	})
	return l, revision, err
}

// Renew extends the lease by ttl_ms from now on the database clock (spec §5.2). ErrLeaseLost: the
// database refused the owner, the epoch or an expired lease; any other error leaves the renewal
// unconfirmed.
func (s *Store) Renew(ctx context.Context, l Lease, ttlMs int64) error {
	return s.autocommit(ctx, func(c *pgxpool.Conn) error {
		var q string
		if s.API {
			q = `SELECT 1 FROM fp_lease_renew($1::uuid, $2, $3, $4)`
		} else {
			// renew: $1=run_id, $2=owner, $3=epoch, $4=ttl_ms
			q = `UPDATE worker_leases
SET expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond'),
    updated_at = clock_timestamp()
WHERE run_id = $1 AND owner = $2 AND epoch = $3 AND expires_at > clock_timestamp()
RETURNING 1`
		}
		var one int
		err := c.QueryRow(ctx, q, l.RunID, l.Owner, l.Epoch, ttlMs).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrLeaseLost
		}
		return err
	})
}

// Release clears the owner and ends the term now; the epoch is kept (spec §5.2).
func (s *Store) Release(ctx context.Context, l Lease) error {
	return s.autocommit(ctx, func(c *pgxpool.Conn) error {
		var n int64
		if s.API {
			if err := c.QueryRow(ctx, `SELECT fp_lease_release($1::uuid, $2, $3)`,
				l.RunID, l.Owner, l.Epoch).Scan(&n); err != nil {
				return err
			}
		} else {
			// release: do NOT zero epoch
			tag, err := c.Exec(ctx, `UPDATE worker_leases
SET owner = NULL, expires_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE run_id = $1 AND owner = $2 AND epoch = $3`, l.RunID, l.Owner, l.Epoch)
			if err != nil {
				return err
			}
			n = tag.RowsAffected()
		}
		if n == 0 {
			return ErrLeaseLost
		}
		return nil
	})
}

// ReadBack reads the term and the run's revision from the primary, after an unknown outcome
// (spec §07: "read back revision/ledger from primary"). ErrLeaseLost when the term is no longer
// ours or has expired.
func (s *Store) ReadBack(ctx context.Context, l Lease) (int64, error) {
	var owner string
	var epoch, revision int64
	var live bool
	err := s.DB.QueryRow(ctx, `SELECT COALESCE(l.owner, ''), l.epoch, l.expires_at > clock_timestamp(), r.revision
  FROM worker_leases l JOIN agent_runs r USING (run_id) WHERE l.run_id = $1`, l.RunID).
		Scan(&owner, &epoch, &live, &revision)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	if owner != l.Owner || epoch != l.Epoch || !live {
		return revision, ErrLeaseLost
	}
	return revision, nil
}

// CancelCauseFunc cancels a context with a cause (context.CancelCauseFunc of Go 1.20, here for
// Go 1.19: WithCancelCause and Cause below).
type CancelCauseFunc func(cause error)

type causeKey struct{}

type causeCtx struct {
	context.Context
	mu    sync.Mutex
	cause error
}

func (c *causeCtx) Value(key interface{}) interface{} {
	if key == (causeKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// WithCancelCause is context.WithCancelCause for Go 1.19: the first cause given wins.
func WithCancelCause(parent context.Context) (context.Context, CancelCauseFunc) {
	ctx, cancel := context.WithCancel(parent)
	c := &causeCtx{Context: ctx}
	return c, func(cause error) {
		if cause == nil {
			cause = context.Canceled
		}
		c.mu.Lock()
		if c.cause == nil {
			c.cause = cause
		}
		c.mu.Unlock()
		cancel()
	}
}

// Cause is the cause a context of WithCancelCause was cancelled with (nil while it is not).
func Cause(ctx context.Context) error {
	c, ok := ctx.Value(causeKey{}).(*causeCtx)
	if !ok {
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// Heartbeat renews every interval, each renewal under its own timeout; the first renewal that is
// not confirmed cancels the execution context (spec §07). Cancellation only reduces later work:
// fencing in the database rejects a stale commit.
func Heartbeat(ctx context.Context, cancel CancelCauseFunc,
	interval, timeout time.Duration, renew func(context.Context) error) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			callCtx, stop := context.WithTimeout(ctx, timeout)
			err := renew(callCtx)
			stop()
			if err != nil {
				cancel(fmt.Errorf("lease renewal unconfirmed: %w", err))
				return
			}
		}
	}
}
