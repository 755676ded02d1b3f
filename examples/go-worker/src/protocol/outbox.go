package protocol

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Operation is one row of the side-effect ledger as the dispatcher and reconciler see it.
type Operation struct {
	OperationID   string
	Tool          string
	Digest        string
	Request       []byte // the registered body, JSON
	DispatchOwner string
	Revision      int64
}

// Claim takes up to limit prepared operations of live runs for this dispatcher with a finite
// deadline (spec §9.2). The transaction ends before any remote call.
func (s *Store) Claim(ctx context.Context, claimTTLms, limit int64) ([]Operation, error) {
	var q string
	if s.API {
		q = `SELECT operation_id, tool_name, request_digest, request_body::text, revision FROM fp_claim($1, $2, $3)`
	} else {
		// $1=dispatcher_owner, $2=claim_ttl_ms, $3=limit
		q = `WITH candidate AS (
  SELECT o.operation_id
  FROM tool_operations o
  JOIN agent_runs r ON r.run_id = o.run_id
  WHERE o.status = 'prepared'
    AND r.status IN ('pending','running')
  ORDER BY o.updated_at
  FOR UPDATE OF o SKIP LOCKED
  LIMIT $3
)
UPDATE tool_operations o
SET status = 'dispatching', dispatch_owner = $1,
    dispatch_until = clock_timestamp() + ($2::bigint * interval '1 millisecond'),
    revision = revision + 1, updated_at = clock_timestamp()
FROM candidate c
WHERE o.operation_id = c.operation_id
RETURNING o.operation_id, o.tool_name, o.request_digest, o.request_body::text, o.revision`
	}
	rows, err := s.DB.Query(ctx, q, s.Owner, claimTTLms, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ops []Operation
	for rows.Next() {
		var op Operation
		var body string
		if err := rows.Scan(&op.OperationID, &op.Tool, &op.Digest, &body, &op.Revision); err != nil {
			return nil, err
		}
		op.Request, op.DispatchOwner = []byte(body), s.Owner
		ops = append(ops, op)
	}
	return ops, rows.Err()
}

// ErrClaimMoved: a ledger write under a claim or a read revision updated nothing (the reconciler
// already flipped it, it was cancelled, or the claim is stale). Never to be ignored (spec §9.3).
var ErrClaimMoved = errors.New("the ledger row moved on: the claim or the revision read is no longer current")

// RecordResult writes the verified result of this dispatcher's own claim: status succeeded or
// failed_final, only while owner, ledger revision and request digest match (spec §9.3).
func (s *Store) RecordResult(ctx context.Context, op Operation, status, remoteID string, result []byte) error {
	var rid interface{}
	if status == "succeeded" {
		rid = remoteID
	}
	var q string
	if s.API {
		q = `SELECT revision FROM fp_record_result($1, $2, $3, $4, $5, $6, $7::jsonb)`
	} else {
		// $1=operation_id, $2=dispatch_owner, $3=expected_revision, $4=digest, $5=status,
		// $6=remote_id, $7=result_json
		q = `UPDATE tool_operations
SET status = $5, remote_id = $6, result = $7::jsonb,
    dispatch_until = NULL, revision = revision + 1, updated_at = clock_timestamp()
WHERE operation_id = $1
  AND status = 'dispatching'
  AND dispatch_owner = $2
  AND revision = $3
  AND request_digest = $4
  AND $5 IN ('succeeded', 'failed_final')
RETURNING revision`
	}
	return s.ledgerWrite(ctx, q, op.OperationID, s.Owner, op.Revision, op.Digest, status, rid, string(result))
}

// MarkUnknownOwn: this dispatcher's own call has an unknown outcome; keep the evidence and never
// go back to prepared (spec §9.2).
func (s *Store) MarkUnknownOwn(ctx context.Context, op Operation, evidence string) error {
	var q string
	if s.API {
		q = `SELECT revision FROM fp_mark_unknown_own($1, $2, $3, $4)`
	} else {
		q = `UPDATE tool_operations
SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,
    result = jsonb_build_object('unknown_because', $4::text, 'claimed_by', $2::text),
    revision = revision + 1, updated_at = clock_timestamp()
WHERE operation_id = $1 AND status = 'dispatching' AND dispatch_owner = $2 AND revision = $3
RETURNING revision`
	}
	return s.ledgerWrite(ctx, q, op.OperationID, s.Owner, op.Revision, evidence)
}

// ExpiredClaims lists the claims whose deadline passed on the database clock, as seen now.
func (s *Store) ExpiredClaims(ctx context.Context) ([]Operation, error) {
	return s.ops(ctx, `SELECT operation_id, tool_name, request_digest, request_body::text, dispatch_owner, revision
  FROM tool_operations WHERE status = 'dispatching' AND dispatch_until <= clock_timestamp()`)
}

// MarkExpiredUnknown moves an expired claim to unknown, exactly as it was seen: the original
// dispatch owner and ledger revision (spec §9.2).
func (s *Store) MarkExpiredUnknown(ctx context.Context, op Operation) error {
	if s.API {
		return s.autocommit(ctx, func(c *pgxpool.Conn) error {
			var n int64
			if err := c.QueryRow(ctx, `SELECT fp_mark_expired_unknown($1, $2, $3)`,
				op.OperationID, op.DispatchOwner, op.Revision).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return ErrClaimMoved
			}
			return nil
		})
	}
	var q string
	{
		// $1=operation_id, $2=dispatch_owner, $3=expected_revision
		q = `UPDATE tool_operations
SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,
    result = jsonb_build_object('unknown_because', 'claim expired', 'claimed_by', $2::text),
    revision = revision + 1, updated_at = clock_timestamp()
WHERE operation_id = $1
  AND status = 'dispatching'
  AND dispatch_owner = $2
  AND revision = $3
  AND dispatch_until <= clock_timestamp()
RETURNING 1`
	}
	return s.ledgerWrite(ctx, q, op.OperationID, op.DispatchOwner, op.Revision)
}

// Unknowns lists the operations whose outcome is unknown, oldest first, and the age in seconds of
// the oldest one on the database clock.
func (s *Store) Unknowns(ctx context.Context) ([]Operation, float64, error) {
	var age *float64
	if err := s.DB.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp() - min(updated_at))::float8
  FROM tool_operations WHERE status = 'unknown'`).Scan(&age); err != nil {
		return nil, 0, err
	}
	ops, err := s.ops(ctx, `SELECT operation_id, tool_name, request_digest, request_body::text, '', revision
  FROM tool_operations WHERE status = 'unknown' ORDER BY updated_at`)
	if age == nil {
		return ops, 0, err
	}
	return ops, *age, err
}

// Converge settles an unknown operation on the remote fact, at the revision it was read (spec §9.3).
func (s *Store) Converge(ctx context.Context, op Operation, status, remoteID string, result []byte) error {
	var rid interface{}
	if status == "succeeded" {
		rid = remoteID
	}
	var q string
	if s.API {
		q = `SELECT revision FROM fp_converge($1, $2, $3, $4, $5::jsonb)`
	} else {
		q = `UPDATE tool_operations
SET status = $3, remote_id = $4, result = $5::jsonb, revision = revision + 1, updated_at = clock_timestamp()
WHERE operation_id = $1 AND status = 'unknown' AND revision = $2 AND $3 IN ('succeeded', 'failed_final')
RETURNING revision`
	}
	return s.ledgerWrite(ctx, q, op.OperationID, op.Revision, status, rid, string(result))
}

// ledgerWrite runs one conditional ledger write; zero rows is ErrClaimMoved.
func (s *Store) ledgerWrite(ctx context.Context, q string, args ...interface{}) error {
	return s.autocommit(ctx, func(c *pgxpool.Conn) error {
		var n int64
		err := c.QueryRow(ctx, q, args...).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrClaimMoved
		}
		return err
	})
}

func (s *Store) ops(ctx context.Context, q string) ([]Operation, error) {
	rows, err := s.DB.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ops []Operation
	for rows.Next() {
		var op Operation
		var body string
		var owner *string
		if err := rows.Scan(&op.OperationID, &op.Tool, &op.Digest, &body, &owner, &op.Revision); err != nil {
			return nil, err
		}
		op.Request = []byte(body)
		if owner != nil {
			op.DispatchOwner = *owner
		}
		ops = append(ops, op)
	}
	return ops, rows.Err()
}

// CreateRun is the control plane's new run (spec §04): in one transaction the task (it may exist),
// locked; refused while its active run is live; a new pending run, its lease row (no owner, epoch
// 0) and the task's active_run_id. Plain SQL on the tables: there is no fp_* function for it.
func (s *Store) CreateRun(ctx context.Context, taskID string) (uuid.UUID, error) {
	runID := uuid.New()
	tx, err := s.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return runID, err
	}
	defer tx.Rollback(context.Background())
	if _, err = tx.Exec(ctx, `INSERT INTO agent_tasks (task_id) VALUES ($1) ON CONFLICT (task_id) DO NOTHING`,
		taskID); err != nil {
		return runID, err
	}
	var active *string
	if err = tx.QueryRow(ctx, `SELECT active_run_id::text FROM agent_tasks WHERE task_id = $1 FOR UPDATE`,
		taskID).Scan(&active); err != nil {
		return runID, err
	}
	if active != nil {
		var status string
		if err = tx.QueryRow(ctx, `SELECT status FROM agent_runs WHERE run_id = $1::uuid`, *active).Scan(&status); err != nil {
			return runID, err
		}
		if status != "succeeded" && status != "failed" && status != "cancelled" {
			return runID, fmt.Errorf("%w: task %s has the %s run %s", ErrActiveRunLive, taskID, status, *active)
		}
	}
	if _, err = tx.Exec(ctx, `INSERT INTO agent_runs (run_id, task_id, status, checkpoint)
  VALUES ($1, $2, 'pending', '{}'::jsonb)`, runID, taskID); err != nil {
		return runID, err
	}
	if _, err = tx.Exec(ctx, `INSERT INTO worker_leases (run_id) VALUES ($1)`, runID); err != nil {
		return runID, err
	}
	if _, err = tx.Exec(ctx, `UPDATE agent_tasks SET active_run_id = $1, updated_at = clock_timestamp()
  WHERE task_id = $2`, runID, taskID); err != nil {
		return runID, err
	}
	return runID, commit(ctx, tx)
}

// Cancel is the user cancel of spec §07 and §09: the run from pending/running to cancelled
// (revision + 1) and its still prepared operations to cancelled, in one transaction. Operations
// already dispatching or unknown keep their status. It answers the run's new revision.
func (s *Store) Cancel(ctx context.Context, runID uuid.UUID) (int64, error) {
	tx, err := s.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	var revision int64
	err = tx.QueryRow(ctx, `UPDATE agent_runs SET status = 'cancelled', revision = revision + 1,
  updated_at = clock_timestamp()
  WHERE run_id = $1 AND status IN ('pending', 'running') RETURNING revision`, runID).Scan(&revision)
	if errors.Is(err, pgx.ErrNoRows) {
		var status string
		err = tx.QueryRow(ctx, `SELECT status FROM agent_runs WHERE run_id = $1`, runID).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, ErrNotFound
		}
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: the run is %s", ErrInvalidState, status)
	}
	if err != nil {
		return 0, err
	}
	if _, err = tx.Exec(ctx, `UPDATE tool_operations SET status = 'cancelled', revision = revision + 1,
  updated_at = clock_timestamp() WHERE run_id = $1 AND status = 'prepared'`, runID); err != nil {
		return 0, err
	}
	return revision, commit(ctx, tx)
}
