-- A team's own schema for the protocol (spec §04), as a team would write it: the protocol's tables
-- and columns, plus what a real deployment adds — a tenant key on every table, extra NOT NULL
-- columns with defaults, constraints and triggers of its own, and functions of its own. fenceproof
-- applies this instead of its migrations when a contract names it (examples/team-schema.toml,
-- `database.migrations`), checks that the protocol's columns exist, installs its oracle beside it,
-- and runs the matrix with the worker on its own statements (`verify --write-path direct`).
-- The tables live in the public schema (the oracle's triggers attach to public.*).

CREATE TABLE agent_tasks (
  task_id       text PRIMARY KEY,
  tenant_id     text NOT NULL DEFAULT 'tenant1',
  active_run_id uuid,
  labels        jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE agent_runs (
  run_id      uuid PRIMARY KEY,
  task_id     text NOT NULL REFERENCES agent_tasks(task_id),
  tenant_id   text NOT NULL DEFAULT 'tenant1',
  status      text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
  revision    bigint NOT NULL DEFAULT 0 CHECK (revision >= 0),
  checkpoint  jsonb NOT NULL DEFAULT '{}'::jsonb,
  priority    integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9),
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX agent_runs_task_created_idx ON agent_runs(task_id, created_at DESC);
CREATE INDEX agent_runs_tenant_status_idx ON agent_runs(tenant_id, status);

CREATE TABLE worker_leases (
  run_id      uuid PRIMARY KEY REFERENCES agent_runs(run_id),
  tenant_id   text NOT NULL DEFAULT 'tenant1',
  owner       text,
  epoch       bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
  expires_at  timestamptz NOT NULL DEFAULT 'epoch',
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE tool_operations (
  operation_id    text PRIMARY KEY,
  run_id          uuid NOT NULL REFERENCES agent_runs(run_id),
  tenant_id       text NOT NULL DEFAULT 'tenant1',
  step_id         text NOT NULL,
  effect_version  integer NOT NULL CHECK (effect_version > 0),
  tool_name       text NOT NULL,
  request_digest  text NOT NULL,
  request_body    jsonb NOT NULL,
  status          text NOT NULL CHECK (status IN ('prepared', 'dispatching', 'unknown', 'succeeded', 'failed_final', 'cancelled')),
  dispatch_owner  text,
  dispatch_until  timestamptz,
  remote_id       text,
  result          jsonb,
  revision        bigint NOT NULL DEFAULT 0,
  cost_cents      integer NOT NULL DEFAULT 0,
  updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (run_id, step_id, effect_version)
);
CREATE INDEX tool_operations_reconcile_idx ON tool_operations(status, dispatch_until, updated_at);

-- The team's own guard (spec §07): a terminal run never moves again, whoever writes.
CREATE FUNCTION team_runs_terminal_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status IN ('succeeded', 'failed', 'cancelled') AND NEW.status IS DISTINCT FROM OLD.status THEN
    RAISE EXCEPTION 'run % is %, a terminal status', OLD.run_id, OLD.status USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER team_runs_terminal_final BEFORE UPDATE OF status ON agent_runs
  FOR EACH ROW EXECUTE FUNCTION team_runs_terminal_final();

-- The team's own history of run status changes, kept by a trigger that writes a table the worker
-- cannot write itself (SECURITY DEFINER, with a fixed search_path, pg_temp last).
CREATE TABLE team_run_history (
  id          bigserial PRIMARY KEY,
  run_id      uuid NOT NULL,
  tenant_id   text NOT NULL,
  from_status text,
  to_status   text NOT NULL,
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION team_record_run_status() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
    INSERT INTO public.team_run_history (run_id, tenant_id, from_status, to_status)
    VALUES (NEW.run_id, NEW.tenant_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status);
  END IF;
  RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION team_record_run_status() FROM PUBLIC;
CREATE TRIGGER team_record_run_status AFTER INSERT OR UPDATE ON agent_runs
  FOR EACH ROW EXECUTE FUNCTION team_record_run_status();

-- A reporting function of the team's own (read-only).
CREATE FUNCTION team_live_runs(p_tenant text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT count(*) FROM agent_runs WHERE tenant_id = p_tenant AND status IN ('pending', 'running')
$$;

-- The team's own lease functions (spec §05), in its own argument order. The contract maps them
-- (examples/team-schema.toml, [database.functions]) and P-api-team probes them. SECURITY INVOKER:
-- they run with the caller's own column privileges, so executing them grants nothing.
CREATE FUNCTION team_acquire_lease(p_run uuid, p_owner text, p_ttl_ms bigint)
RETURNS TABLE (epoch bigint, expires_at timestamptz) LANGUAGE sql AS $$
  UPDATE worker_leases l
     SET owner = p_owner, epoch = l.epoch + 1, updated_at = clock_timestamp(),
         expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
   WHERE l.run_id = p_run AND (l.owner IS NULL OR l.expires_at <= clock_timestamp())
     AND EXISTS (SELECT 1 FROM agent_runs r WHERE r.run_id = l.run_id AND r.status IN ('pending', 'running'))
  RETURNING l.epoch, l.expires_at
$$;

CREATE FUNCTION team_renew_lease(p_owner text, p_run uuid, p_epoch bigint, p_ttl_ms bigint)
RETURNS TABLE (expires_at timestamptz) LANGUAGE sql AS $$
  UPDATE worker_leases l
     SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond', updated_at = clock_timestamp()
   WHERE l.run_id = p_run AND l.owner = p_owner AND l.epoch = p_epoch AND l.expires_at > clock_timestamp()
  RETURNING l.expires_at
$$;

-- Release keeps the epoch: the next owner takes epoch + 1.
CREATE FUNCTION team_release_lease(p_run uuid, p_owner text, p_epoch bigint)
RETURNS SETOF uuid LANGUAGE sql AS $$
  UPDATE worker_leases l SET owner = NULL, expires_at = clock_timestamp(), updated_at = clock_timestamp()
   WHERE l.run_id = p_run AND l.owner = p_owner AND l.epoch = p_epoch
  RETURNING l.run_id
$$;

REVOKE ALL ON agent_tasks, agent_runs, worker_leases, tool_operations, team_run_history FROM PUBLIC;
