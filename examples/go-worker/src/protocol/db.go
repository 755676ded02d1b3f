package protocol

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Open makes the pool of one process: application_name = owner on every session (the harness's
// oracle tells writers apart by it), a bounded connect time, and each connection checked before
// use so a session the server dropped (a restart, a failover) is replaced, not used for a write.
// The password, when the server needs one, comes from PGPASSWORD (pgx reads it).
func Open(ctx context.Context, url, owner string, connectTimeout time.Duration, api bool) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = owner
	cfg.ConnConfig.ConnectTimeout = connectTimeout
	cfg.ConnConfig.OnNotice = notices.record
	cfg.MaxConns = 32
	cfg.MinConns = 0
	cfg.LazyConnect = true
	cfg.BeforeAcquire = func(ctx context.Context, c *pgx.Conn) bool {
		pctx, stop := context.WithTimeout(ctx, connectTimeout)
		defer stop()
		return c.Ping(pctx) == nil
	}
	pool, err := pgxpool.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Store{DB: pool, Owner: owner, API: api}, nil
}

// The synchronous-replication WARNING: PostgreSQL answers a COMMIT whose wait for the standby was
// cancelled with success and this notice, although the commit is only local. Counted per session.
type noticeBook struct {
	mu    sync.Mutex
	count map[*pgconn.PgConn]int
}

var notices = &noticeBook{count: map[*pgconn.PgConn]int{}}

func (b *noticeBook) record(c *pgconn.PgConn, n *pgconn.Notice) {
	if strings.Contains(n.Message, "synchronous replication") {
		b.mu.Lock()
		b.count[c]++
		b.mu.Unlock()
	}
}

func (b *noticeBook) seen(c *pgconn.PgConn) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count[c]
}

// durable turns a commit that was only local into an unknown outcome.
func durable(c *pgconn.PgConn, before int) error {
	if notices.seen(c) > before {
		return &UnknownOutcomeError{Err: errors.New("committed locally, the synchronous replication wait was cancelled")}
	}
	return nil
}

// autocommit runs single-statement writes on one session and checks their durability.
func (s *Store) autocommit(ctx context.Context, f func(c *pgxpool.Conn) error) error {
	c, err := s.DB.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	before := notices.seen(c.Conn().PgConn())
	if err := f(c); err != nil {
		return err
	}
	return durable(c.Conn().PgConn(), before)
}

// commit ends a protected transaction: an error the server did not answer leaves the outcome
// unknown; a refusal it answered (a PgError) is a plain failure, nothing committed.
func commit(ctx context.Context, tx pgx.Tx) error {
	pc := tx.Conn().PgConn()
	before := notices.seen(pc)
	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) {
			return err
		}
		return &UnknownOutcomeError{Err: err}
	}
	return durable(pc, before)
}

// FaultPoint is a hook run at the named points of a protected transaction (after_begin,
// after_lease_validated, before_commit); the contract kit uses it for the harness's barriers.
type FaultPoint func(ctx context.Context, tx pgx.Tx, point string) error

type faultKey struct{}

// WithFaultPoint attaches a fault-point hook to the context of one write.
func WithFaultPoint(ctx context.Context, f FaultPoint) context.Context {
	return context.WithValue(ctx, faultKey{}, f)
}

func point(ctx context.Context, tx pgx.Tx, name string) error {
	if f, ok := ctx.Value(faultKey{}).(FaultPoint); ok && f != nil {
		return f(ctx, tx, name)
	}
	return nil
}

// SQLState is the SQLSTATE of a server error, "" for anything else.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
