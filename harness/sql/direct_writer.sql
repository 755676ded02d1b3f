-- fenceproof: the table privileges of a worker that writes on its own statements
-- (`verify --write-path direct`; docs/worker-protocol.md, "The direct path's privileges").
--
-- A worker, dispatcher or reconciler on the direct path runs the spec's statements itself (§05's
-- lease UPDATEs, §06's lock-then-validate-then-CAS, §09's claim, unknown and result UPDATEs). It
-- needs exactly these privileges, and the harness gives its direct login nothing more: it cannot
-- create or delete tasks, runs or leases (the control plane's), cannot rewrite a run's or an
-- operation's identity columns, and cannot delete ledger rows. What it writes inside them is what
-- the oracle judges. The grants are column-level, so a team can copy them as they are.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenceproof_direct_writer') THEN
    BEGIN
      CREATE ROLE fenceproof_direct_writer NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL; -- another session created it first
    END;
  END IF;
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO fenceproof_direct_writer', current_schema());
END
$$;

GRANT SELECT ON agent_tasks, agent_runs, worker_leases, tool_operations TO fenceproof_direct_writer;
-- §05: acquire, renew, release (and the row lock of §06's protected transaction).
GRANT UPDATE (owner, epoch, expires_at, updated_at) ON worker_leases TO fenceproof_direct_writer;
-- §06/§07: the revision compare-and-set with the checkpoint and the status.
GRANT UPDATE (checkpoint, status, revision, updated_at) ON agent_runs TO fenceproof_direct_writer;
-- §09.1: the intent, registered in the protected transaction.
GRANT INSERT (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status)
  ON tool_operations TO fenceproof_direct_writer;
-- §09.2/§09.3: claim, unknown, result, convergence.
GRANT UPDATE (status, dispatch_owner, dispatch_until, remote_id, result, revision, updated_at)
  ON tool_operations TO fenceproof_direct_writer;
