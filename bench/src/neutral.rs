//! Driver-neutral capacity: every database-side workload as a pgbench custom script calling the
//! same `fp_*` function with the same arguments as the reference worker, beside its raw script
//! (the same rows, no fencing) and, for the protected commit, the physical reference: the two row
//! writes the commit needs (the lease row lock and the run update) in one statement with no checks.
//! pgbench is C over libpq: its rates are the database's, not our client's, and they are what the
//! sizing answer is computed from.
//!
//! Ids are drawn inside the scripts: lease g (1..N) is run `md5('bench-l-' || g)::uuid` of owner
//! `bench-w<g mod W>` at epoch 1 (as `workloads::leases_up_to` made it), so a renewal names its
//! leases with no lookup; each pgbench client commits to its own run, read from the small
//! `bench_commit_ids` table (`:client_id`), on every side of the commit's ratios alike.

use sqlx::PgPool;

/// One neutral script: its group (`neutral-renewal` …), name, SQL, units per transaction, and
/// whether it runs as the worker login (ours) or the owner (raw).
pub struct Script {
    pub group: &'static str,
    pub name: String,
    pub sql: String,
    pub units_per_tx: u64,
    pub as_worker: bool,
    /// Run a fixed number of transactions per client instead of for a duration (a claim drains
    /// its backlog; a drained backlog would be measured as free no-op claims).
    pub transactions_per_client: Option<u64>,
    /// The script names the run's expected revision as `:rev` and carries the revision its call
    /// answered into the next transaction (`\gset`), as a worker carries the revision of its last
    /// write: the commit runs are set back to revision 0 before the phase and pgbench starts every
    /// client with `rev=0`. A call that did not commit answers no revision, and pgbench's next
    /// transaction then fails (an empty bigint), so a refused call cannot pass for a commit.
    pub carries_revision: bool,
}

/// What [`Script::carries_revision`] scripts need before they run: every commit run at revision 0.
pub const RESET_REVISIONS: &str =
    "UPDATE agent_runs SET revision = 0 WHERE run_id IN (SELECT run_id FROM bench_commit_ids)";

/// Fill the commit runs' lookup table, one run per pgbench client.
pub async fn prepare_ids(admin: &PgPool, commit_runs: &[uuid::Uuid]) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS bench_commit_ids;
         CREATE TABLE bench_commit_ids (client int PRIMARY KEY, run_id uuid NOT NULL, owner text NOT NULL);
         DO $$ BEGIN
           IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenceproof_worker') THEN
             GRANT SELECT ON bench_commit_ids TO fenceproof_worker;
           END IF;
         END $$;",
    )
    .execute(admin)
    .await?;
    for (i, run) in commit_runs.iter().enumerate() {
        sqlx::query("INSERT INTO bench_commit_ids VALUES ($1, $2, $3)")
            .bind(i as i32)
            .bind(run)
            .bind(format!("bench-c{i}"))
            .execute(admin)
            .await?;
    }
    sqlx::query("ANALYZE bench_commit_ids").execute(admin).await?;
    // The protected commit's cost, taken apart: the same two writes as fp_run_transition, as two
    // statements inside a function called exactly as it is (PL/pgSQL, SECURITY DEFINER, its own
    // search_path, the same arguments), with no checks. The physical statement against this call is
    // the price of the role boundary (workers only call functions, spec section 12); this call
    // against fp_run_transition is the price of the checks themselves.
    sqlx::raw_sql(
        r#"DROP FUNCTION IF EXISTS bench_call_two_writes(uuid, text, bigint, bigint, text, text, jsonb);
CREATE FUNCTION bench_call_two_writes(
  p_run uuid, p_owner text, p_epoch bigint, p_expected bigint, p_from text, p_to text, p_checkpoint jsonb)
RETURNS TABLE (outcome text, revision bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
  v_owner text; v_revision bigint;
BEGIN
  SELECT l.owner INTO v_owner FROM worker_leases l WHERE l.run_id = p_run FOR UPDATE;
  UPDATE agent_runs r
     SET checkpoint = COALESCE(p_checkpoint, r.checkpoint), status = p_to,
         revision = r.revision + 1, updated_at = clock_timestamp()
   WHERE r.run_id = p_run
  RETURNING r.revision INTO v_revision;
  RETURN QUERY SELECT 'ok'::text, v_revision;
END
$$;
REVOKE ALL ON FUNCTION bench_call_two_writes(uuid, text, bigint, bigint, text, text, jsonb) FROM PUBLIC;
DO $g$ BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenceproof_worker') THEN
    GRANT EXECUTE ON FUNCTION bench_call_two_writes(uuid, text, bigint, bigint, text, text, jsonb) TO fenceproof_worker;
  END IF;
END $g$;"#,
    )
    .execute(admin)
    .await?;
    Ok(())
}

const TTL_MS: u64 = 600_000;
const RAW_RENEW_SET: &str =
    "SET expires_at = clock_timestamp() + interval '10 minutes', updated_at = clock_timestamp()";
const CHECKPOINT: &str = r#"'{"step": 1}'::jsonb"#;

/// The renewal scripts: per lease, and batched (`k` leases of one owner per statement), over `n`
/// leases owned by `workers` owners.
pub fn renewal(n: u64, workers: usize, k: usize) -> Vec<Script> {
    let w = workers.max(1) as u64;
    let per_owner = n / w;
    let k = (k as u64).min(per_owner.saturating_sub(1)).max(1);
    // The leases g = w + W*j, j = s .. s+k-1, all of owner bench-w<w> and all <= n; each client
    // renews the leases of one owner (client mod W), as a worker renews its own, like our driver.
    let pick =
        format!("\\set w :client_id % {w}\n\\set s random(1, {last_s})\n", last_s = per_owner.saturating_sub(k).max(1));
    let batch = format!("SELECT md5('bench-l-' || (:w + {w} * j))::uuid FROM generate_series(:s, :s + {k} - 1) j");
    let lease = "md5('bench-l-' || :g)::uuid";
    vec![
        Script {
            group: "neutral-renewal",
            name: "pgbench: fp_lease_renew per lease".into(),
            sql: format!(
                "\\set g random(1, {n})\nSELECT fp_lease_renew({lease}, 'bench-w' || (:g % {w}), 1, {TTL_MS});\n"
            ),
            units_per_tx: 1,
            as_worker: true,
            transactions_per_client: None,
            carries_revision: false,
        },
        Script {
            group: "neutral-renewal",
            name: "pgbench raw: UPDATE worker_leases by primary key".into(),
            sql: format!(
                "\\set g random(1, {n})\nUPDATE worker_leases {RAW_RENEW_SET} WHERE run_id = {lease};\n"
            ),
            units_per_tx: 1,
            as_worker: false,
            transactions_per_client: None,
            carries_revision: false,
        },
        Script {
            group: "neutral-renewal-batched",
            name: format!("pgbench: fp_lease_renew_many, batch of {k}"),
            sql: format!(
                "{pick}SELECT count(*) FROM fp_lease_renew_many('bench-w' || :w, ARRAY({batch}), array_fill(1::bigint, ARRAY[{k}]), {TTL_MS});\n"
            ),
            units_per_tx: k,
            as_worker: true,
            transactions_per_client: None,
            carries_revision: false,
        },
        Script {
            group: "neutral-renewal-batched",
            name: format!("pgbench raw: UPDATE … WHERE run_id = ANY(batch of {k})"),
            sql: format!("{pick}UPDATE worker_leases {RAW_RENEW_SET} WHERE run_id = ANY(ARRAY({batch}));\n"),
            units_per_tx: k,
            as_worker: false,
            transactions_per_client: None,
            carries_revision: false,
        },
    ]
}

/// The protected commit (a checkpoint save through `fp_run_transition`), the same two writes in a
/// function called the same way with no checks, the physical reference (lease row lock + run
/// update, no checks, one statement) and the raw single-row UPDATE; each pgbench client writes its
/// own run. The two calls name the expected revision the previous call answered (`:rev`, carried
/// by `\gset`), as a worker does: no script reads the revision before it writes, so the physical
/// reference and the protected commit do the same reads and writes but for the checks.
pub fn commit() -> Vec<Script> {
    let mine = "FROM bench_commit_ids b WHERE b.client = :client_id";
    vec![
        Script {
            group: "neutral-commit",
            name: "pgbench: protected transition (fp_run_transition)".into(),
            sql: format!(
                "SELECT t.revision AS rev FROM bench_commit_ids b,
  LATERAL fp_run_transition(b.run_id, b.owner, 1, :rev, 'running', 'running', {CHECKPOINT},
                            NULL, NULL, NULL, NULL, NULL, NULL, NULL) t
 WHERE b.client = :client_id AND t.outcome = 'ok'
\\gset\n"
            ),
            units_per_tx: 1,
            as_worker: true,
            transactions_per_client: None,
            carries_revision: true,
        },
        Script {
            group: "neutral-commit",
            name: "pgbench call: the same two writes in a SECURITY DEFINER PL/pgSQL call, no checks".into(),
            sql: format!(
                "SELECT t.revision AS rev FROM bench_commit_ids b,
  LATERAL bench_call_two_writes(b.run_id, b.owner, 1, :rev, 'running', 'running', {CHECKPOINT}) t
 WHERE b.client = :client_id
\\gset\n"
            ),
            units_per_tx: 1,
            as_worker: true,
            transactions_per_client: None,
            carries_revision: true,
        },
        Script {
            group: "neutral-commit",
            name: "pgbench physical: lease row lock + run UPDATE, no checks".into(),
            sql: format!(
                "WITH l AS (SELECT l.run_id FROM worker_leases l, bench_commit_ids b
                      WHERE b.client = :client_id AND l.run_id = b.run_id FOR UPDATE OF l)
UPDATE agent_runs r SET checkpoint = {CHECKPOINT}, revision = r.revision + 1, updated_at = clock_timestamp()
  FROM l WHERE r.run_id = l.run_id;\n"
            ),
            units_per_tx: 1,
            as_worker: false,
            transactions_per_client: None,
            carries_revision: false,
        },
        Script {
            group: "neutral-commit",
            name: "pgbench raw: UPDATE agent_runs by primary key".into(),
            sql: format!(
                "UPDATE agent_runs r SET checkpoint = {CHECKPOINT}, revision = r.revision + 1, updated_at = clock_timestamp()
  {mine} AND r.run_id = b.run_id;\n"
            ),
            units_per_tx: 1,
            as_worker: false,
            transactions_per_client: None,
            carries_revision: false,
        },
    ]
}

/// The claim, `k` per statement, ours and bare, each draining half of a `size` backlog.
pub fn claim(k: i64, size: u64, clients: usize) -> Vec<Script> {
    let per_client = (size / 2 / (k.max(1) as u64 * clients.max(1) as u64)).max(1);
    vec![
        Script {
            group: "neutral-claim",
            name: format!("pgbench: fp_claim, {k} per claim"),
            sql: format!("SELECT count(*) FROM fp_claim('bench-d' || :client_id, {TTL_MS}, {k});\n"),
            units_per_tx: k as u64,
            as_worker: true,
            transactions_per_client: Some(per_client),
            carries_revision: false,
        },
        Script {
            group: "neutral-claim",
            name: format!("pgbench raw: bare FOR UPDATE SKIP LOCKED, {k} per claim"),
            sql: format!(
                "WITH c AS (SELECT operation_id FROM tool_operations WHERE status = 'prepared'
             ORDER BY updated_at LIMIT {k} FOR UPDATE SKIP LOCKED)
UPDATE tool_operations o SET status = 'dispatching', dispatch_owner = 'bench-d' || :client_id
  FROM c WHERE o.operation_id = c.operation_id;\n"
            ),
            units_per_tx: k as u64,
            as_worker: false,
            transactions_per_client: Some(per_client),
            carries_revision: false,
        },
    ]
}
