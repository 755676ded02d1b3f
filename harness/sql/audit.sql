-- fenceproof audit oracle: installed by the harness on a job queue library's own job table, never by
-- the library. Every committed change of the watched table lands in fenceproof_audit.commits, written
-- by a DEFERRED constraint trigger: it fires when the writing transaction commits, so a row here
-- exists if and only if the change committed. `writer` is the session's application_name (the
-- harness gives every process of the audit its own), `committed_at` the database clock at commit.

CREATE SCHEMA IF NOT EXISTS fenceproof_audit;

CREATE TABLE IF NOT EXISTS fenceproof_audit.commits (
  seq           bigserial PRIMARY KEY,
  xid           xid8 NOT NULL DEFAULT pg_current_xact_id(),
  table_name    text NOT NULL,
  op            text NOT NULL,
  writer        text NOT NULL,
  backend_pid   integer NOT NULL,
  committed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  old_row       jsonb,
  new_row       jsonb
);

CREATE OR REPLACE FUNCTION fenceproof_audit.record_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  INSERT INTO fenceproof_audit.commits (table_name, op, writer, backend_pid, old_row, new_row)
  VALUES (TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, TG_OP,
          coalesce(current_setting('application_name', true), ''), pg_backend_pid(),
          CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE to_jsonb(OLD) END,
          CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE to_jsonb(NEW) END);
  RETURN NULL;
END;
$$;

-- Watch one table (a regclass, e.g. 'public.procrastinate_jobs').
CREATE OR REPLACE FUNCTION fenceproof_audit.watch(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('CREATE CONSTRAINT TRIGGER fenceproof_audit_commits AFTER INSERT OR UPDATE OR DELETE ON %s'
                 ' DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fenceproof_audit.record_commit()',
                 p_table);
END;
$$;
