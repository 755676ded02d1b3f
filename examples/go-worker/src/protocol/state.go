package protocol

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// SaveCheckpoint is the protected state commit of spec §06 (the direct write path): lock the lease
// row, validate owner + epoch + expiry on the database clock, then compare-and-set the run's
// revision, all in one short READ COMMITTED transaction. Nothing slow may run inside it.
func SaveCheckpoint(ctx context.Context, db *pgxpool.Pool,
	l Lease, expectedRevision int64, checkpoint []byte,
) (int64, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	if err = point(ctx, tx, "after_begin"); err != nil {
		return 0, err
	}

	var runID uuid.UUID
	if err = tx.QueryRow(ctx,
		`SELECT run_id FROM worker_leases WHERE run_id=$1 FOR UPDATE`,
		l.RunID).Scan(&runID); errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrLeaseLost
	} else if err != nil {
		return 0, err
	}

	var valid bool
	err = tx.QueryRow(ctx,
		`SELECT COALESCE(owner=$2 AND epoch=$3 AND expires_at>clock_timestamp(), false)
     FROM worker_leases WHERE run_id=$1`,
		l.RunID, l.Owner, l.Epoch).Scan(&valid)
	if err != nil {
		return 0, err
	}
	if !valid {
		return 0, ErrLeaseLost
	}
	if err = point(ctx, tx, "after_lease_validated"); err != nil {
		return 0, err
	}

	var revision int64
	err = tx.QueryRow(ctx,
		`UPDATE agent_runs
     SET checkpoint=$3::jsonb, revision=revision+1, updated_at=clock_timestamp()
     WHERE run_id=$1 AND revision=$2 AND status='running'
     RETURNING revision`,
		l.RunID, expectedRevision, string(checkpoint)).Scan(&revision)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, casMiss(ctx, tx, l.RunID, "running")
	}
	if err != nil {
		return 0, err
	}
	if err = point(ctx, tx, "before_commit"); err != nil {
		return 0, err
	}
	if err = commit(ctx, tx); err != nil {
		return 0, fmt.Errorf("commit outcome requires read-back: %w", err)
	}
	return revision, nil
}

// casMiss tells why a revision compare-and-set updated nothing: ErrConflict when the run is in the
// expected status at another revision, ErrInvalidState when it is in another status.
func casMiss(ctx context.Context, tx pgx.Tx, runID uuid.UUID, from string) error {
	var status string
	err := tx.QueryRow(ctx, `SELECT status FROM agent_runs WHERE run_id=$1`, runID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if status != from {
		return fmt.Errorf("%w: the run is %s", ErrInvalidState, status)
	}
	return ErrConflict
}

// Intent is one business side effect registered with the checkpoint that plans it (spec §08).
type Intent struct {
	OperationID   string
	StepID        string
	EffectVersion int64
	Tool          string
	Digest        string // lowercase hex SHA-256 of the RFC 8785 text of Request
	Request       []byte // the registered body (secrets already replaced by references)
}

// Transition is one protected state transition of spec §07 (start, succeed, fail, plan, advance):
// the same lock + validate + revision CAS as SaveCheckpoint, moving the run from one status to
// another, optionally requiring a succeeded result of one of the run's own operations (advance) and
// optionally registering an intent in the same transaction (plan, spec §9.1). It answers the new
// revision and, for a plan, "new" or "already_registered".
//
// A serialization failure (40001) or a deadlock (40P01) means the transaction did not commit: it is
// run again from its start, at most RetryBudget times in all (spec §07).
func (s *Store) Transition(ctx context.Context, l Lease, expected int64, from, to string,
	checkpoint []byte, requireOp string, intent *Intent) (int64, string, error) {
	for n := 1; ; n++ {
		rev, registration, err := s.transitionOnce(ctx, l, expected, from, to, checkpoint, requireOp, intent)
		if state := SQLState(err); state != "40001" && state != "40P01" {
			return rev, registration, err
		}
		if n >= RetryBudget {
			return 0, "", fmt.Errorf("%w: %d attempts: %v", ErrRetryBudgetExhausted, n, err)
		}
	}
}

// transitionOnce is one run of Transition's short transaction.
func (s *Store) transitionOnce(ctx context.Context, l Lease, expected int64, from, to string,
	checkpoint []byte, requireOp string, intent *Intent) (int64, string, error) {
	if s.API {
		return s.transitionAPI(ctx, l, expected, from, to, checkpoint, requireOp, intent)
	}
	if from == "running" && to == "running" && requireOp == "" && intent == nil {
		rev, err := SaveCheckpoint(ctx, s.DB, l, expected, checkpoint)
		return rev, "", err
	}
	tx, err := s.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, "", err
	}
	defer tx.Rollback(context.Background())
	if err = point(ctx, tx, "after_begin"); err != nil {
		return 0, "", err
	}
	var runID uuid.UUID
	if err = tx.QueryRow(ctx, `SELECT run_id FROM worker_leases WHERE run_id=$1 FOR UPDATE`,
		l.RunID).Scan(&runID); errors.Is(err, pgx.ErrNoRows) {
		return 0, "", ErrLeaseLost
	} else if err != nil {
		return 0, "", err
	}
	var valid bool
	if err = tx.QueryRow(ctx, `SELECT COALESCE(owner=$2 AND epoch=$3 AND expires_at>clock_timestamp(), false)
     FROM worker_leases WHERE run_id=$1`, l.RunID, l.Owner, l.Epoch).Scan(&valid); err != nil {
		return 0, "", err
	}
	if !valid {
		return 0, "", ErrLeaseLost
	}
	if err = point(ctx, tx, "after_lease_validated"); err != nil {
		return 0, "", err
	}
	if requireOp != "" {
		// Advance only on a verified result of the run's own operation (spec §9.3).
		var opRun, opStatus string
		err = tx.QueryRow(ctx, `SELECT run_id::text, status FROM tool_operations WHERE operation_id=$1 FOR SHARE`,
			requireOp).Scan(&opRun, &opStatus)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return 0, "", ErrOperationNotFound
		case err != nil:
			return 0, "", err
		case opRun != l.RunID.String():
			return 0, "", fmt.Errorf("%w: run %s", ErrForeignOperation, opRun)
		case opStatus != "succeeded":
			return 0, "", fmt.Errorf("%w: it is %s", ErrOperationNotSettled, opStatus)
		}
	}
	var cp interface{}
	if checkpoint != nil {
		cp = string(checkpoint)
	}
	var revision int64
	err = tx.QueryRow(ctx, `UPDATE agent_runs
     SET checkpoint=COALESCE($3::jsonb, checkpoint), status=$5, revision=revision+1, updated_at=clock_timestamp()
     WHERE run_id=$1 AND revision=$2 AND status=$4
     RETURNING revision`, l.RunID, expected, cp, from, to).Scan(&revision)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", casMiss(ctx, tx, l.RunID, from)
	}
	if err != nil {
		return 0, "", err
	}
	registration := ""
	if intent != nil {
		if registration, err = register(ctx, tx, l.RunID, intent); err != nil {
			return 0, "", err
		}
	}
	if err = point(ctx, tx, "before_commit"); err != nil {
		return 0, "", err
	}
	if err = commit(ctx, tx); err != nil {
		return 0, "", fmt.Errorf("commit outcome requires read-back: %w", err)
	}
	return revision, registration, nil
}

// register inserts the intent as prepared; on a primary-key conflict the registered run, tool and
// digest must match exactly (the same intent), anything else is a bug or corruption (spec §08).
func register(ctx context.Context, tx pgx.Tx, runID uuid.UUID, in *Intent) (string, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO tool_operations
    (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status)
  VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, 'prepared')
  ON CONFLICT (operation_id) DO NOTHING`,
		in.OperationID, runID, in.StepID, in.EffectVersion, in.Tool, in.Digest, string(in.Request))
	if SQLState(err) == "23505" { // (run_id, step_id, effect_version) planned under another id
		return "", fmt.Errorf("%w: %v", ErrIntentMismatch, err)
	}
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 1 {
		return "new", nil
	}
	var run, tool, digest string
	if err := tx.QueryRow(ctx, `SELECT run_id::text, tool_name, request_digest FROM tool_operations
  WHERE operation_id=$1`, in.OperationID).Scan(&run, &tool, &digest); err != nil {
		return "", err
	}
	if run != runID.String() || tool != in.Tool || digest != in.Digest {
		return "", fmt.Errorf("%w: registered as run %s, tool %s, digest %s", ErrIntentMismatch, run, tool, digest)
	}
	return "already_registered", nil
}

// transitionAPI is the same transaction as one call of fp_run_transition, which locks and validates
// the lease, checks a required result, compares and sets the revision and registers the intent.
// The explicit transaction lets the fault points hold it before and after the call.
func (s *Store) transitionAPI(ctx context.Context, l Lease, expected int64, from, to string,
	checkpoint []byte, requireOp string, in *Intent) (int64, string, error) {
	tx, err := s.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, "", err
	}
	defer tx.Rollback(context.Background())
	if err = point(ctx, tx, "after_begin"); err != nil {
		return 0, "", err
	}
	args := []interface{}{l.RunID, l.Owner, l.Epoch, expected, from, to, nil, nil,
		nil, nil, nil, nil, nil, nil}
	if checkpoint != nil {
		args[6] = string(checkpoint)
	}
	if requireOp != "" {
		args[7] = requireOp
	}
	if in != nil {
		args[8], args[9], args[10], args[11], args[12], args[13] =
			in.OperationID, in.StepID, in.EffectVersion, in.Tool, in.Digest, string(in.Request)
	}
	var outcome string
	var revision *int64
	var detail *string
	err = tx.QueryRow(ctx, `SELECT outcome, revision, detail FROM fp_run_transition($1::uuid, $2, $3, $4, $5, $6,
  $7::jsonb, $8, $9, $10, $11, $12, $13, $14::jsonb)`, args...).Scan(&outcome, &revision, &detail)
	if SQLState(err) == "FP001" {
		return 0, "", fmt.Errorf("%w: %v", ErrIntentMismatch, err)
	}
	if err != nil {
		return 0, "", err
	}
	d := ""
	if detail != nil {
		d = *detail
	}
	switch outcome {
	case "ok":
	case "lease_lost":
		return 0, "", ErrLeaseLost
	case "conflict":
		return 0, "", ErrConflict
	case "invalid_state":
		return 0, "", fmt.Errorf("%w: the run is %s", ErrInvalidState, d)
	case "run_not_found":
		return 0, "", ErrNotFound
	case "operation_not_found":
		return 0, "", ErrOperationNotFound
	case "foreign_operation":
		return 0, "", fmt.Errorf("%w: run %s", ErrForeignOperation, d)
	case "operation_not_settled":
		return 0, "", fmt.Errorf("%w: it is %s", ErrOperationNotSettled, d)
	default:
		return 0, "", fmt.Errorf("fp_run_transition answered %q", outcome)
	}
	if err = point(ctx, tx, "after_lease_validated"); err != nil {
		return 0, "", err
	}
	if err = point(ctx, tx, "before_commit"); err != nil {
		return 0, "", err
	}
	if err = commit(ctx, tx); err != nil {
		return 0, "", fmt.Errorf("commit outcome requires read-back: %w", err)
	}
	return *revision, d, nil
}
