// Command fenceproof-go-worker is a fenceproof worker in Go: the contract kit (package fpkit) on
// the outside, the spec's protocol (package protocol) on the inside, and this file between them:
// one handler per command, the session's lease and revision, and the mapping of the protocol's
// errors to the contract's outcome words.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"fpkit"
	"protocol"

	"github.com/google/uuid"
)

// errStopped cancels an execution on purpose (release, a new acquire): no event for it.
var errStopped = errors.New("heartbeat stopped by the worker")

type worker struct {
	kit     *fpkit.Kit
	store   *protocol.Store
	secrets *fpkit.SecretStore
	tools   *fpkit.Tools

	mu       sync.Mutex
	lease    *protocol.Lease
	ttlMs    int64
	revision *int64
	unknown  bool                     // a write's outcome is unknown: read back before the next one
	stop     protocol.CancelCauseFunc // ends the current execution (its heartbeat)
	exec     context.Context          // the current execution; done once cancelled
}

func main() {
	flags := fpkit.ParseFlags(os.Args[1:])
	kit, err := fpkit.New(flags)
	if err != nil {
		fmt.Fprintln(os.Stderr, "events file:", err)
		os.Exit(2)
	}
	connect := time.Duration(flags.AcquireTimeoutMs) * time.Millisecond
	store, err := protocol.Open(context.Background(), flags.DatabaseURL, flags.Owner, connect, flags.WritePath == "api")
	if err != nil {
		fmt.Fprintln(os.Stderr, "database url:", err)
		os.Exit(2)
	}
	secrets, err := fpkit.OpenSecrets(flags.SecretsDir)
	if err != nil {
		kit.Logf("secrets dir: %v", err)
	}
	w := &worker{kit: kit, store: store, secrets: secrets}
	if flags.ToolsAddr != "" {
		w.tools = &fpkit.Tools{Addr: flags.ToolsAddr}
	}
	kit.SetHandler(w)
	kit.Emit("ready", 0, "ok", fmt.Sprintf("pid %d", os.Getpid()), nil)
	if flags.Script {
		done := w.script()
		outcome := "ok"
		if !done {
			outcome = "stopped"
		}
		kit.Emit("script_end", 0, outcome, "scripted task ended", nil)
		if !done {
			os.Exit(4)
		}
		os.Exit(0)
	}
	kit.Loop(os.Stdin)
}

// Position is the lease and revision the events report.
func (w *worker) Position() fpkit.Position {
	w.mu.Lock()
	defer w.mu.Unlock()
	var p fpkit.Position
	if w.lease != nil {
		run, epoch := w.lease.RunID.String(), w.lease.Epoch
		p.RunID, p.Epoch = &run, &epoch
	}
	if w.revision != nil {
		r := *w.revision
		p.Revision = &r
	}
	return p
}

// Handle runs one command.
func (w *worker) Handle(c *fpkit.Command) (interface{}, error) {
	ctx := context.Background()
	switch c.Cmd {
	case "acquire":
		// The takeover is one statement: the harness may hold it right before it.
		if err := c.Faults.Outside(ctx, w.store.DB, "before_takeover_write"); err != nil {
			return nil, outcome("acquire", err)
		}
		return nil, w.acquire(ctx, c.RunID, c.TTLms, c.HeartbeatMs, c.RenewTimeoutMs)
	case "start":
		_, _, err := w.transition(ctx, "start", "pending", "running", nil, c.ExpectedRevision, c.Faults, "", nil)
		return nil, err
	case "save":
		if len(c.Checkpoint) == 0 {
			return nil, fpkit.Refuse("bad_command", "save needs a checkpoint")
		}
		_, _, err := w.transition(ctx, "save", "running", "running", c.Checkpoint, c.ExpectedRevision, c.Faults, "", nil)
		return nil, err
	case "succeed":
		_, _, err := w.transition(ctx, "succeed", "running", "succeeded", nil, c.ExpectedRevision, c.Faults, "", nil)
		return nil, err
	case "fail":
		_, _, err := w.transition(ctx, "fail", "running", "failed", nil, c.ExpectedRevision, c.Faults, "", nil)
		return nil, err
	case "plan":
		return w.plan(ctx, c)
	case "advance":
		cp, _ := json.Marshal(map[string]string{"done": c.OperationID})
		rev, _, err := w.transition(ctx, "advance", "running", "running", cp, c.ExpectedRevision, nil, c.OperationID, nil)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"revision": rev}, nil
	case "dispatch":
		return w.dispatch(ctx, c)
	case "reconcile":
		return w.reconcile(ctx, c)
	case "metrics":
		return map[string]string{"text": w.kit.Metrics.Text()}, nil
	case "create_run":
		run, err := w.store.CreateRun(ctx, c.TaskID)
		if err != nil {
			return nil, outcome("create_run", err)
		}
		return map[string]string{"run_id": run.String()}, nil
	case "cancel":
		run, err := uuid.Parse(c.RunID)
		if err != nil {
			return nil, fpkit.Refuse("not_found", "run %q is not a uuid", c.RunID)
		}
		rev, err := w.store.Cancel(ctx, run)
		if err != nil {
			return nil, outcome("cancel", err)
		}
		return map[string]int64{"revision": rev}, nil
	case "renew":
		return nil, w.renew(ctx)
	case "release":
		return nil, w.release(ctx)
	case "exit":
		return nil, nil
	}
	return nil, fpkit.Refuse("bad_command", "unknown command %q", c.Cmd)
}

// outcome maps a protocol error to the contract's outcome word.
func outcome(what string, err error) error {
	var r *fpkit.Refused
	switch {
	case err == nil:
		return nil
	case errors.As(err, &r):
		return err
	case protocol.IsUnknown(err):
		return fpkit.Refuse("outcome_unknown", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrLeaseLost):
		return fpkit.Refuse("lease_lost", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrConflict):
		return fpkit.Refuse("conflict", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrInvalidState):
		return fpkit.Refuse("invalid_state", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrNotFound):
		return fpkit.Refuse("not_found", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrBusy):
		return fpkit.Refuse("busy", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrIntentMismatch):
		return fpkit.Refuse("intent_mismatch", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrForeignOperation):
		return fpkit.Refuse("foreign_operation", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrOperationNotSettled):
		return fpkit.Refuse("operation_not_settled", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrOperationNotFound):
		return fpkit.Refuse("operation_not_found", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrActiveRunLive):
		return fpkit.Refuse("active_run_live", "%s: %v", what, err)
	case errors.Is(err, protocol.ErrRetryBudgetExhausted):
		return fpkit.Refuse("retry_budget_exhausted", "%s: %v", what, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fpkit.Refuse("timeout", "%s: %v", what, err)
	}
	// Refused by the server (permission denied, ...) or never reached it: nothing committed.
	return fpkit.Refuse("db_error", "%s: %v", what, err)
}

// held is the lease of this session.
func (w *worker) held() (protocol.Lease, int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lease == nil {
		return protocol.Lease{}, 0, fpkit.Refuse("lease_lost", "no lease held")
	}
	return *w.lease, w.ttlMs, nil
}

// ---------------------------------------------------------------------------------------------
// The lease.

func (w *worker) acquire(ctx context.Context, run string, ttlMs, heartbeatMs, renewTimeoutMs int64) error {
	runID, err := uuid.Parse(run)
	if err != nil {
		w.kit.Metrics.Inc("lease_acquire_total", "outcome", "missing")
		return fpkit.Refuse("not_found", "run %q is not a uuid", run)
	}
	if heartbeatMs <= 0 || renewTimeoutMs <= 0 {
		return fpkit.Refuse("bad_command", "heartbeat_ms and renew_timeout_ms must be > 0")
	}
	l, revision, err := w.store.Acquire(ctx, runID, ttlMs)
	switch {
	case errors.Is(err, protocol.ErrBusy):
		w.kit.Metrics.Inc("lease_acquire_total", "outcome", "busy")
		return outcome("acquire", err)
	case errors.Is(err, protocol.ErrNotFound):
		w.kit.Metrics.Inc("lease_acquire_total", "outcome", "missing")
		return outcome("acquire", err)
	case protocol.IsUnknown(err):
		w.kit.Metrics.Inc("lease_acquire_total", "outcome", "db_error")
		return outcome("acquire", err)
	case err != nil:
		w.kit.Metrics.Inc("lease_acquire_total", "outcome", "db_error")
		return fpkit.Refuse("db_error", "acquire: %v", err)
	}
	w.kit.Metrics.Inc("lease_acquire_total", "outcome", "success")

	// One lease per session: the previous lease's heartbeat stops and that lease is left to expire.
	exec, stop := protocol.WithCancelCause(context.Background())
	w.mu.Lock()
	if w.stop != nil {
		w.stop(errStopped)
	}
	w.lease, w.ttlMs, w.revision, w.unknown = &l, ttlMs, &revision, false
	w.stop, w.exec = stop, exec
	w.mu.Unlock()

	renew := func(ctx context.Context) error {
		err := w.store.Renew(ctx, l, ttlMs)
		if err == nil {
			w.kit.Metrics.Inc("lease_renew_total", "outcome", "success")
		}
		return err
	}
	go protocol.Heartbeat(exec, stop, time.Duration(heartbeatMs)*time.Millisecond,
		time.Duration(renewTimeoutMs)*time.Millisecond, renew)
	go w.watch(exec)
	return nil
}

// watch reports the end of an execution the heartbeat cancelled.
func (w *worker) watch(exec context.Context) {
	<-exec.Done()
	cause := protocol.Cause(exec)
	if errors.Is(cause, errStopped) {
		return
	}
	if errors.Is(cause, protocol.ErrLeaseLost) {
		w.kit.Metrics.Inc("lease_renew_total", "outcome", "lost")
		w.kit.Emit("heartbeat_lost", 0, "lease_lost", "the database refused the renewal", nil)
	} else {
		w.kit.Metrics.Inc("lease_renew_total", "outcome", "unknown")
		w.kit.Emit("heartbeat_unconfirmed", 0, "outcome_unknown", fmt.Sprint(cause), nil)
	}
	w.kit.Emit("execution_cancelled", 0, "ok", "", nil)
}

// cancelled reports whether the current execution was cancelled by its heartbeat.
func (w *worker) cancelled() bool {
	w.mu.Lock()
	exec := w.exec
	w.mu.Unlock()
	if exec == nil {
		return false
	}
	return exec.Err() != nil && !errors.Is(protocol.Cause(exec), errStopped)
}

func (w *worker) renew(ctx context.Context) error {
	l, ttlMs, err := w.held()
	if err != nil {
		return err
	}
	err = w.store.Renew(ctx, l, ttlMs)
	switch {
	case err == nil:
		w.kit.Metrics.Inc("lease_renew_total", "outcome", "success")
		return nil
	case errors.Is(err, protocol.ErrLeaseLost):
		w.kit.Metrics.Inc("lease_renew_total", "outcome", "lost")
		return outcome("renew", err)
	case protocol.IsUnknown(err) || protocol.SQLState(err) == "":
		w.kit.Metrics.Inc("lease_renew_total", "outcome", "unknown")
		return fpkit.Refuse("outcome_unknown", "renewal: %v", err)
	}
	return outcome("renew", err)
}

func (w *worker) release(ctx context.Context) error {
	l, _, err := w.held()
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.stop != nil {
		w.stop(errStopped)
	}
	w.mu.Unlock()
	return outcome("release", w.store.Release(ctx, l))
}

// ---------------------------------------------------------------------------------------------
// Protected writes.

// transition runs one protected transition under the session's lease: it reads the state back
// first when an earlier outcome was unknown, names the last known revision when the command named
// none, counts refusals and remembers the new revision.
func (w *worker) transition(ctx context.Context, what, from, to string, checkpoint []byte, expected *int64,
	faults *fpkit.Faults, requireOp string, intent *protocol.Intent) (int64, string, error) {
	l, _, err := w.held()
	if err != nil {
		return 0, "", err
	}
	w.mu.Lock()
	unknown := w.unknown
	w.mu.Unlock()
	if unknown {
		rev, err := w.store.ReadBack(ctx, l)
		if err != nil {
			return 0, "", outcome(what+": read back after an unknown outcome", err)
		}
		w.mu.Lock()
		w.revision, w.unknown = &rev, false
		w.mu.Unlock()
	}
	if expected == nil {
		w.mu.Lock()
		var e int64
		if w.revision != nil {
			e = *w.revision
		}
		w.mu.Unlock()
		expected = &e
	}
	if faults != nil {
		ctx = protocol.WithFaultPoint(ctx, faults.InTx)
	}
	rev, registration, err := w.store.Transition(ctx, l, *expected, from, to, checkpoint, requireOp, intent)
	if err != nil {
		switch {
		case protocol.IsUnknown(err):
			w.mu.Lock()
			w.unknown = true
			w.mu.Unlock()
		case errors.Is(err, protocol.ErrLeaseLost):
			w.kit.Metrics.Inc("protected_write_rejected_total", "reason", "lease")
		case errors.Is(err, protocol.ErrInvalidState):
			w.kit.Metrics.Inc("protected_write_rejected_total", "reason", "state")
		case errors.Is(err, protocol.ErrConflict):
			w.kit.Metrics.Inc("protected_write_rejected_total", "reason", "revision")
		}
		return 0, "", outcome(what, err)
	}
	w.mu.Lock()
	if w.revision == nil || rev > *w.revision {
		w.revision = &rev
	}
	w.mu.Unlock()
	return rev, registration, nil
}

// ---------------------------------------------------------------------------------------------
// Scripted mode: one whole task alone; once cancelled (or refused) it stops without any write.

func (w *worker) script() bool {
	f := w.kit.Flags
	cmds := []*fpkit.Command{{Cmd: "acquire", RunID: f.RunID, TTLms: f.TTLms, HeartbeatMs: f.HeartbeatMs,
		RenewTimeoutMs: f.RenewTimeoutMs}, {Cmd: "start"}}
	for i := int64(1); i <= f.Steps; i++ {
		cp, _ := json.Marshal(map[string]int64{"step": i, "of": f.Steps})
		cmds = append(cmds, &fpkit.Command{Cmd: "save", Checkpoint: cp})
	}
	cmds = append(cmds, &fpkit.Command{Cmd: "succeed"}, &fpkit.Command{Cmd: "release"})
	for i, c := range cmds {
		if w.cancelled() {
			return false
		}
		c.ID = int64(i + 1)
		if !w.kit.Answer(c) {
			return false
		}
		if c.Cmd == "save" && f.PaceMs > 0 {
			w.mu.Lock()
			exec := w.exec
			w.mu.Unlock()
			select {
			case <-exec.Done():
				return false
			case <-time.After(time.Duration(f.PaceMs) * time.Millisecond):
			}
		}
	}
	return true
}
