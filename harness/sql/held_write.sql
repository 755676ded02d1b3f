-- fenceproof audit: hold one writer's statements on a library's table inside the database. A
-- BEFORE … FOR EACH STATEMENT trigger fires before the statement reads or locks a single row; when
-- the session's application_name is armed in fenceproof_audit.held_writers and the client's
-- statement (current_query(): the library's own call) matches the armed pattern, it waits for a shared
-- advisory lock the harness holds exclusively. So the held statement has locked nothing of the
-- table yet (another writer's statements go on), and when the harness lets it go, READ COMMITTED
-- re-checks its WHERE on the newest version of every row it then touches. Installed by the harness
-- (after fenceproof_audit exists), never by the library; disarmed, it does nothing.

CREATE TABLE IF NOT EXISTS fenceproof_audit.held_writers (
  app      text PRIMARY KEY,
  key      bigint NOT NULL,
  -- Only a statement sent as a top-level query matching this (case-insensitive regex) is held.
  pattern  text NOT NULL DEFAULT ''
);

CREATE OR REPLACE FUNCTION fenceproof_audit.hold_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE v_key bigint; v_pattern text;
BEGIN
  SELECT h.key, h.pattern INTO v_key, v_pattern FROM fenceproof_audit.held_writers h
   WHERE h.app = coalesce(current_setting('application_name', true), '');
  IF v_key IS NOT NULL AND coalesce(current_query(), '') ~* v_pattern THEN
    PERFORM pg_advisory_xact_lock_shared(v_key);
  END IF;
  RETURN NULL;
END;
$$;

-- Hold the armed writers' statements on one table (a regclass).
CREATE OR REPLACE FUNCTION fenceproof_audit.hold_writes_on(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('CREATE TRIGGER fenceproof_audit_hold BEFORE INSERT OR UPDATE OR DELETE ON %s'
                 ' FOR EACH STATEMENT EXECUTE FUNCTION fenceproof_audit.hold_write()', p_table);
END;
$$;
