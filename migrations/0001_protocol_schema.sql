-- fenceproof: the protocol's schema (spec section 04).
-- Four tables: the logical task, the run instance, the lease of a run, and the side-effect ledger.
-- Works on PostgreSQL 15 and newer. All safety decisions are taken on the single writable primary
-- at READ COMMITTED; SQLSTATE 40001 means "retry the whole short transaction".

CREATE TABLE agent_tasks (
  task_id       text PRIMARY KEY,
  active_run_id uuid,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE agent_runs (
  run_id      uuid PRIMARY KEY,
  task_id     text NOT NULL REFERENCES agent_tasks(task_id),
  status      text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
  revision    bigint NOT NULL DEFAULT 0 CHECK (revision >= 0),
  checkpoint  jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX agent_runs_task_created_idx ON agent_runs (task_id, created_at DESC);

CREATE TABLE worker_leases (
  run_id      uuid PRIMARY KEY REFERENCES agent_runs(run_id),
  owner       text,
  epoch       bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
  expires_at  timestamptz NOT NULL DEFAULT 'epoch',
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE tool_operations (
  operation_id    text PRIMARY KEY,
  run_id          uuid NOT NULL REFERENCES agent_runs(run_id),
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
  updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (run_id, step_id, effect_version)
);
CREATE INDEX tool_operations_reconcile_idx ON tool_operations (status, dispatch_until, updated_at);
