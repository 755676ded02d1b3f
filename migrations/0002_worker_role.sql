-- fenceproof: the database permission boundary (spec section 12).
--
-- Workers, dispatchers and reconcilers run as members of the role `fenceproof_worker`. That role can
-- read the protocol's tables but cannot INSERT, UPDATE, DELETE or lock their rows: the only way it
-- can change state is through the fp_* functions below. Each function is a complete, fenced write
-- of the protocol (owner + epoch under a row lock, revision compare-and-set, claim owner + ledger
-- revision + digest), so a worker that skips a check in its own code still cannot write around it.
-- The functions run as their owner (SECURITY DEFINER) with the search_path they were created with
-- (the protocol's schema, then pg_temp last), and PUBLIC may not execute them.
-- They are PL/pgSQL, not LANGUAGE sql: a SECURITY DEFINER sql function is never inlined, so its
-- body would be parsed and planned on every call, and planned without the parameters' values;
-- PL/pgSQL caches each statement's plan per session (measured by `fenceproof bench`).
-- Control-plane writes (creating runs, cancelling) stay with the schema owner.

-- Creating the role needs CREATEROLE. Without it (an application role in someone's database) the
-- functions are still installed and fenced, but no role boundary exists until an administrator
-- creates `fenceproof_worker` and re-runs the grants at the end of this file.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenceproof_worker') THEN
    BEGIN
      CREATE ROLE fenceproof_worker NOLOGIN;
    EXCEPTION
      WHEN insufficient_privilege THEN
        RAISE WARNING 'fenceproof: no CREATEROLE; role fenceproof_worker not created, so no worker role boundary';
      -- Another session created it after the check (two first runs at once): it exists, as wanted.
      -- While that session has not committed, this CREATE waits for it and then fails on the
      -- unique index of role names (unique_violation), or on the role itself (duplicate_object).
      WHEN unique_violation OR duplicate_object THEN
        NULL;
    END;
  END IF;
END
$$;

REVOKE ALL ON agent_tasks, agent_runs, worker_leases, tool_operations FROM PUBLIC;

-- The search_path every function below keeps (`SET search_path FROM CURRENT`): the protocol's
-- schema, then pg_temp *last*. Left out, pg_temp is searched first, and a caller's
-- `CREATE TEMP TABLE worker_leases` stands in for the real one inside a SECURITY DEFINER function:
-- the worker role forges its own live lease and fp_run_transition commits for it (PostgreSQL's
-- documented pitfall; `fenceproof writers` reports it as definer-temp-first). Set for the session,
-- not the transaction, so the migration keeps it however it is applied (psql with or without -1).
DO $$ BEGIN PERFORM set_config('search_path', format('%I, pg_temp', current_schema()), false); END $$;

-- Lease: acquire a free or expired lease (epoch + 1) of a run that can still be worked on: a
-- succeeded, failed or cancelled run is final (a retry is a new run), so its lease is never taken
-- again. No row: no such run, a live lease, or a final run.
CREATE FUNCTION fp_lease_acquire(p_run uuid, p_owner text, p_ttl_ms bigint)
RETURNS TABLE (epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE worker_leases l
     SET owner = p_owner,
         epoch = l.epoch + 1,
         expires_at = clock_timestamp() + (p_ttl_ms * interval '1 millisecond'),
         updated_at = clock_timestamp()
   WHERE l.run_id = p_run
     AND (l.owner IS NULL OR l.expires_at <= clock_timestamp())
     AND EXISTS (SELECT 1 FROM agent_runs r WHERE r.run_id = l.run_id AND r.status IN ('pending', 'running'))
  RETURNING l.epoch, l.expires_at;
END
$$;

-- Lease: renew, fenced by owner and epoch, only before expiry. No row: the lease is lost.
CREATE FUNCTION fp_lease_renew(p_run uuid, p_owner text, p_epoch bigint, p_ttl_ms bigint)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE worker_leases l
     SET expires_at = clock_timestamp() + (p_ttl_ms * interval '1 millisecond'),
         updated_at = clock_timestamp()
   WHERE l.run_id = p_run AND l.owner = p_owner AND l.epoch = p_epoch AND l.expires_at > clock_timestamp()
  RETURNING l.expires_at;
END
$$;

-- Lease: renew many leases of one owner in one statement, each fenced by its own epoch. One row
-- per lease renewed; a run missing from the answer has lost its lease.
--
-- (PL/pgSQL, like fp_claim, so the statement is planned for the actual batch, not a generic guess.)
CREATE FUNCTION fp_lease_renew_many(p_owner text, p_runs uuid[], p_epochs bigint[], p_ttl_ms bigint)
RETURNS TABLE (run_id uuid, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE worker_leases l
     SET expires_at = clock_timestamp() + (p_ttl_ms * interval '1 millisecond'),
         updated_at = clock_timestamp()
    FROM unnest(p_runs, p_epochs) AS b(run_id, epoch)
   WHERE l.run_id = b.run_id AND l.owner = p_owner AND l.epoch = b.epoch AND l.expires_at > clock_timestamp()
  RETURNING l.run_id, l.expires_at;
END
$$;

-- Lease: release; the epoch is kept. Answers 1 when released, 0 when this owner and epoch no
-- longer hold the lease.
CREATE FUNCTION fp_lease_release(p_run uuid, p_owner text, p_epoch bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  n bigint;
BEGIN
  WITH released AS (
    UPDATE worker_leases l
       SET owner = NULL, expires_at = clock_timestamp(), updated_at = clock_timestamp()
     WHERE l.run_id = p_run AND l.owner = p_owner AND l.epoch = p_epoch
    RETURNING 1
  )
  SELECT count(*) FROM released INTO n;
  RETURN n;
END
$$;

-- The protected transition: refuse a (from, to) pair the state table does not give a worker
-- (outcome forbidden_transition, before anything is locked), lock the lease row, validate owner +
-- epoch + expiry on the database clock, optionally require a verified result of the run's own
-- operation, compare-and-set the revision and status, and optionally register a side-effect
-- intent — all in the caller's transaction. Rejections before any write come back as an outcome
-- (`revision` is the run's current one on conflict and invalid_state, `detail` the run's status on
-- invalid_state, the operation's run or status on foreign_operation and operation_not_settled, and
-- `new` or `already_registered` on an ok with an intent); an intent mismatch after the run update
-- raises SQLSTATE FP001 so nothing of the call can be committed. A NULL p_checkpoint keeps the
-- checkpoint; p_require_op is the operation whose succeeded result an `advance` needs.
CREATE FUNCTION fp_run_transition(
  p_run uuid, p_owner text, p_epoch bigint, p_expected bigint, p_from text, p_to text, p_checkpoint jsonb,
  p_require_op text,
  p_op text, p_step text, p_version integer, p_tool text, p_digest text, p_body jsonb)
RETURNS TABLE (outcome text, revision bigint, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_owner text; v_epoch bigint; v_live boolean;
  v_op_run uuid; v_op_status text; v_op_tool text; v_op_digest text;
  v_status text; v_revision bigint;
BEGIN
  -- The state table: a worker starts a pending run, saves a running one, and ends a running one as
  -- succeeded or failed. Cancelling belongs to the control plane; a final run never moves again.
  IF coalesce(p_from, '') NOT IN ('pending', 'running')
     OR coalesce(p_to, '') NOT IN ('running', 'succeeded', 'failed')
     OR (p_from = 'pending' AND p_to <> 'running') THEN
    RETURN QUERY SELECT 'forbidden_transition'::text, NULL::bigint, format('%s -> %s', p_from, p_to); RETURN;
  END IF;

  SELECT l.owner, l.epoch, l.expires_at > clock_timestamp() INTO v_owner, v_epoch, v_live
    FROM worker_leases l WHERE l.run_id = p_run FOR UPDATE;
  IF v_owner IS DISTINCT FROM p_owner OR v_epoch IS DISTINCT FROM p_epoch OR v_live IS NOT TRUE THEN
    RETURN QUERY SELECT 'lease_lost'::text, NULL::bigint, NULL::text; RETURN;
  END IF;

  IF p_require_op IS NOT NULL THEN
    SELECT o.run_id, o.status INTO v_op_run, v_op_status
      FROM tool_operations o WHERE o.operation_id = p_require_op FOR SHARE;
    IF NOT FOUND THEN
      RETURN QUERY SELECT 'operation_not_found'::text, NULL::bigint, NULL::text; RETURN;
    ELSIF v_op_run <> p_run THEN
      RETURN QUERY SELECT 'foreign_operation'::text, NULL::bigint, v_op_run::text; RETURN;
    ELSIF v_op_status <> 'succeeded' THEN
      RETURN QUERY SELECT 'operation_not_settled'::text, NULL::bigint, v_op_status; RETURN;
    END IF;
  END IF;

  UPDATE agent_runs r
     SET checkpoint = COALESCE(p_checkpoint, r.checkpoint), status = p_to,
         revision = r.revision + 1, updated_at = clock_timestamp()
   WHERE r.run_id = p_run AND r.revision = p_expected AND r.status = p_from
  RETURNING r.revision INTO v_revision;
  IF NOT FOUND THEN
    SELECT r.status, r.revision INTO v_status, v_revision FROM agent_runs r WHERE r.run_id = p_run;
    IF NOT FOUND THEN
      RETURN QUERY SELECT 'run_not_found'::text, NULL::bigint, NULL::text;
    ELSIF v_status <> p_from THEN
      RETURN QUERY SELECT 'invalid_state'::text, v_revision, v_status;
    ELSE
      RETURN QUERY SELECT 'conflict'::text, v_revision, NULL::text;
    END IF;
    RETURN;
  END IF;

  IF p_op IS NULL THEN
    RETURN QUERY SELECT 'ok'::text, v_revision, NULL::text; RETURN;
  END IF;
  BEGIN
    INSERT INTO tool_operations
        (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status)
    VALUES (p_op, p_run, p_step, p_version, p_tool, p_digest, p_body, 'prepared')
    ON CONFLICT (operation_id) DO NOTHING;
  EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION USING ERRCODE = 'FP001',
      MESSAGE = format('(%s, %s, v%s) is already planned under another operation_id', p_run, p_step, p_version);
  END;
  IF FOUND THEN
    RETURN QUERY SELECT 'ok'::text, v_revision, 'new'::text; RETURN;
  END IF;
  SELECT o.run_id, o.tool_name, o.request_digest INTO v_op_run, v_op_tool, v_op_digest
    FROM tool_operations o WHERE o.operation_id = p_op;
  IF v_op_run = p_run AND v_op_tool = p_tool AND v_op_digest = p_digest THEN
    RETURN QUERY SELECT 'ok'::text, v_revision, 'already_registered'::text; RETURN;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'FP001',
    MESSAGE = format('registered as run %s, tool %s, digest %s; now run %s, tool %s, digest %s',
                     v_op_run, v_op_tool, v_op_digest, p_run, p_tool, p_digest);
END
$$;

-- Dispatcher: claim prepared operations of live runs, SKIP LOCKED, with a finite deadline. One
-- row per operation claimed (none: nothing to claim); `revision` is the claim's ledger revision.
--
-- Shaped for one cached generic plan (measured by `fenceproof bench`): with the candidates in a
-- CTE joined back, a plan made without knowing p_limit assumes 1000 candidates and hash-joins a
-- sequential scan of the whole ledger, so PostgreSQL re-plans on every call instead; with
-- `= ANY(ARRAY(...))` the generic plan walks the partial index and the primary key, and is kept.
CREATE FUNCTION fp_claim(p_owner text, p_ttl_ms bigint, p_limit bigint)
RETURNS TABLE (operation_id text, run_id uuid, tool_name text, request_digest text, request_body jsonb,
               dispatch_owner text, revision bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE tool_operations o
     SET status = 'dispatching', dispatch_owner = p_owner,
         dispatch_until = clock_timestamp() + (p_ttl_ms * interval '1 millisecond'),
         revision = o.revision + 1, updated_at = clock_timestamp()
   WHERE o.operation_id = ANY (ARRAY(
           SELECT c.operation_id
             FROM tool_operations c
             JOIN agent_runs r ON r.run_id = c.run_id
            WHERE c.status = 'prepared' AND r.status IN ('pending', 'running')
            ORDER BY c.updated_at
              FOR UPDATE OF c SKIP LOCKED
            LIMIT p_limit))
  RETURNING o.operation_id, o.run_id, o.tool_name, o.request_digest, o.request_body, o.dispatch_owner, o.revision;
END
$$;

-- Dispatcher: write the verified result of its own claim (owner + ledger revision + digest);
-- p_status is succeeded or failed_final. No row: the claim moved on, or the status is another word.
CREATE FUNCTION fp_record_result(p_op text, p_owner text, p_revision bigint, p_digest text, p_status text,
                                 p_remote_id text, p_result jsonb)
RETURNS TABLE (revision bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE tool_operations o
     SET status = p_status, remote_id = p_remote_id, result = p_result,
         dispatch_until = NULL, revision = o.revision + 1, updated_at = clock_timestamp()
   WHERE o.operation_id = p_op AND o.status = 'dispatching' AND o.dispatch_owner = p_owner
     AND o.revision = p_revision AND o.request_digest = p_digest
     AND p_status IN ('succeeded', 'failed_final')
  RETURNING o.revision;
END
$$;

-- Dispatcher: its own claim saw an unknown outcome; keep the evidence, never back to prepared.
-- Only a claim still its own (dispatching, this owner, the revision it claimed), expired or not:
-- no clock condition, as for the result write. No row: the claim moved on.
CREATE FUNCTION fp_mark_unknown_own(p_op text, p_owner text, p_revision bigint, p_evidence text)
RETURNS TABLE (revision bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE tool_operations o
     SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,
         result = jsonb_build_object('unknown_because', p_evidence, 'claimed_by', p_owner),
         revision = o.revision + 1, updated_at = clock_timestamp()
   WHERE o.operation_id = p_op AND o.status = 'dispatching' AND o.dispatch_owner = p_owner AND o.revision = p_revision
  RETURNING o.revision;
END
$$;

-- Reconciler: an expired claim, exactly as it was seen, moves to unknown. Answers 1 when moved,
-- 0 when the claim is no longer as it was read (owner, revision) or has not expired.
CREATE FUNCTION fp_mark_expired_unknown(p_op text, p_owner text, p_revision bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  n bigint;
BEGIN
  WITH moved AS (
    UPDATE tool_operations o
       SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,
           result = jsonb_build_object('unknown_because', 'claim expired', 'claimed_by', p_owner),
           revision = o.revision + 1, updated_at = clock_timestamp()
     WHERE o.operation_id = p_op AND o.status = 'dispatching' AND o.dispatch_owner = p_owner
       AND o.revision = p_revision AND o.dispatch_until <= clock_timestamp()
    RETURNING 1
  )
  SELECT count(*) FROM moved INTO n;
  RETURN n;
END
$$;

-- Reconciler: converge an unknown operation to the remote fact (succeeded or failed_final), at
-- the revision it was read. No row: it moved on since, or the status is another word.
CREATE FUNCTION fp_converge(p_op text, p_revision bigint, p_status text, p_remote_id text, p_result jsonb)
RETURNS TABLE (revision bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE tool_operations o
     SET status = p_status, remote_id = p_remote_id, result = p_result,
         revision = o.revision + 1, updated_at = clock_timestamp()
   WHERE o.operation_id = p_op AND o.status = 'unknown' AND o.revision = p_revision
     AND p_status IN ('succeeded', 'failed_final')
  RETURNING o.revision;
END
$$;

DO $$
DECLARE
  f text;
  boundary boolean := EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenceproof_worker');
BEGIN
  IF boundary THEN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO fenceproof_worker', current_schema());
    GRANT SELECT ON agent_tasks, agent_runs, worker_leases, tool_operations TO fenceproof_worker;
  END IF;
  FOREACH f IN ARRAY ARRAY[
    'fp_lease_acquire(uuid, text, bigint)',
    'fp_lease_renew(uuid, text, bigint, bigint)',
    'fp_lease_renew_many(text, uuid[], bigint[], bigint)',
    'fp_lease_release(uuid, text, bigint)',
    'fp_run_transition(uuid, text, bigint, bigint, text, text, jsonb, text, text, text, integer, text, text, jsonb)',
    'fp_claim(text, bigint, bigint)',
    'fp_record_result(text, text, bigint, text, text, text, jsonb)',
    'fp_mark_unknown_own(text, text, bigint, text)',
    'fp_mark_expired_unknown(text, text, bigint)',
    'fp_converge(text, bigint, text, text, jsonb)'
  ] LOOP
    EXECUTE 'REVOKE ALL ON FUNCTION ' || f || ' FROM PUBLIC';
    IF boundary THEN
      EXECUTE 'GRANT EXECUTE ON FUNCTION ' || f || ' TO fenceproof_worker';
    END IF;
  END LOOP;
END
$$;
