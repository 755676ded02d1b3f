-- fenceproof oracle: installed by the harness, never by the code under test.
--
-- Every committed change of agent_runs, worker_leases and tool_operations lands in fenceproof_oracle.commits, written
-- by a DEFERRED constraint trigger: it fires when the writing transaction commits, so a row here exists
-- if and only if the change committed, and `lease_at_commit` is the run's lease row as the writing
-- transaction saw it at that moment. `writer` is the session's application_name (a worker's owner id);
-- `login` is the role the session logged in as (a SECURITY DEFINER function does not change it).
-- `began_at` is the writing transaction's start: every clock reading its statements made lies
-- between it and `committed_at`.

CREATE SCHEMA fenceproof_oracle;

CREATE TABLE fenceproof_oracle.commits (
  seq              bigserial PRIMARY KEY,
  xid              xid8 NOT NULL DEFAULT pg_current_xact_id(),
  table_name       text NOT NULL,
  op               text NOT NULL,
  writer           text NOT NULL,
  login            text NOT NULL DEFAULT session_user,
  backend_pid      integer NOT NULL,
  committed_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  began_at         timestamptz NOT NULL DEFAULT transaction_timestamp(),
  run_id           uuid,
  old_row          jsonb,
  new_row          jsonb,
  lease_at_commit  jsonb,
  lease_live_at_commit boolean
);

CREATE FUNCTION fenceproof_oracle.record_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_run uuid;
  v_lease jsonb;
  v_live boolean;
BEGIN
  IF TG_OP = 'DELETE' THEN
    v_run := OLD.run_id;
  ELSE
    v_run := NEW.run_id;
  END IF;
  SELECT to_jsonb(l), l.expires_at > clock_timestamp()
    INTO v_lease, v_live
    FROM public.worker_leases l WHERE l.run_id = v_run;
  INSERT INTO fenceproof_oracle.commits
    (table_name, op, writer, backend_pid, run_id, old_row, new_row, lease_at_commit, lease_live_at_commit)
  VALUES
    (TG_TABLE_NAME, TG_OP, coalesce(current_setting('application_name', true), ''), pg_backend_pid(), v_run,
     CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE to_jsonb(OLD) END,
     CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE to_jsonb(NEW) END,
     v_lease, v_live);
  RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER fenceproof_oracle_runs
  AFTER INSERT OR UPDATE OR DELETE ON public.agent_runs
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION fenceproof_oracle.record_commit();

CREATE CONSTRAINT TRIGGER fenceproof_oracle_leases
  AFTER INSERT OR UPDATE OR DELETE ON public.worker_leases
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION fenceproof_oracle.record_commit();

CREATE CONSTRAINT TRIGGER fenceproof_oracle_operations
  AFTER INSERT OR UPDATE OR DELETE ON public.tool_operations
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION fenceproof_oracle.record_commit();

-- Serialization failures on demand: while fenceproof_oracle.serialization_faults names a writer
-- (an application_name) and a table, that writer's row writes of the table are answered by the
-- server itself with SQLSTATE 40001, the first `failures` of them; the transaction is aborted as a
-- real serialization failure aborts it. Every write the armed writer attempts takes a number from
-- serialization_attempts, which a rollback does not return: the count of attempts survives the
-- aborted transactions, so the harness can count how often the worker tried.
CREATE TABLE fenceproof_oracle.serialization_faults (
  writer      text NOT NULL,
  table_name  text NOT NULL,
  failures    bigint NOT NULL CHECK (failures >= 0),
  PRIMARY KEY (writer, table_name)
);

CREATE SEQUENCE fenceproof_oracle.serialization_attempts;

CREATE FUNCTION fenceproof_oracle.serialization_fault() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_failures bigint;
BEGIN
  SELECT f.failures INTO v_failures FROM fenceproof_oracle.serialization_faults f
   WHERE f.writer = coalesce(current_setting('application_name', true), '') AND f.table_name = TG_TABLE_NAME;
  IF FOUND AND nextval('fenceproof_oracle.serialization_attempts') <= v_failures THEN
    RAISE EXCEPTION 'could not serialize access (injected by fenceproof)' USING ERRCODE = '40001';
  END IF;
  RETURN NEW;
END;
$$;

CREATE TRIGGER fenceproof_oracle_serialization_runs
  BEFORE UPDATE ON public.agent_runs
  FOR EACH ROW EXECUTE FUNCTION fenceproof_oracle.serialization_fault();
