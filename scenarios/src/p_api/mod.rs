//! Experiments P-api-lease, P-api-commit, P-api-ledger — the fenced functions probed at each rule's
//! boundary. A rogue process with the worker role (`fenceproof_worker_login`) calls the `fp_*`
//! functions of migration 0002 directly, with forged owners, stale epochs, wrong revisions, wrong
//! digests, illegal statuses, neighbouring rows that must not be touched, and statements held (by an
//! advisory lock the harness owns) across the very expiry they check. Each probe names the rule
//! of the catalogue it judges, and is judged from the database, never from the caller: the set of
//! protocol rows that changed must be exactly the set the rule allows, and the global invariants
//! run over the oracle at the end.
//!
//! The worker binary is not involved: these rows test the database side of the protocol (the
//! functions a deployment installs), which every worker on the permission boundary relies on.

pub mod clock;
pub mod commit;
pub mod forbidden;
pub mod lease;
pub mod ledger;
pub mod team;

use std::collections::{BTreeMap, BTreeSet};

use fenceproof_harness::check::Check;
use fenceproof_harness::{wait, HarnessError};
use serde_json::Value;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::ctx::{Ctx, CONTROL, STEP, WORKER_LOGIN_EXISTS};

/// The advisory key the harness holds to keep a probe's statement waiting before its function runs.
const HOLD_KEY: i64 = 0x7061_7069; // "papi"

/// What a probed call answered: its rows as JSON, or the SQLSTATE and message of its error.
pub type Answer = Result<Vec<Value>, (String, String)>;

/// A probe session: the experiment's context plus the worker login's URL.
pub struct Prober<'a> {
    pub ctx: &'a mut Ctx,
    login: String,
}

/// `SELECT to_jsonb(x) FROM func(args) x`; with `held`, the call is made after the `held` CTE
/// of [`Prober::probe_held`] (`FROM held, LATERAL func(...)`).
pub fn q(func: &str, args: &[String], held: bool) -> String {
    let from = if held { "held, LATERAL " } else { "" };
    format!("SELECT to_jsonb(x) FROM {from}{func}({}) x", args.join(", "))
}

/// Quote a text literal.
pub fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A uuid literal.
pub fn uuid(u: Uuid) -> String {
    format!("'{u}'::uuid")
}

/// The rows of the protocol tables, keyed `run:<id>`, `lease:<id>`, `op:<id>`.
pub async fn rows(pool: &sqlx::PgPool) -> Result<BTreeMap<String, Value>, HarnessError> {
    let all: Vec<(String, Value)> = sqlx::query_as(
        "SELECT 'run:' || run_id, to_jsonb(r) FROM agent_runs r
         UNION ALL SELECT 'lease:' || run_id, to_jsonb(l) FROM worker_leases l
         UNION ALL SELECT 'op:' || operation_id, to_jsonb(o) FROM tool_operations o",
    )
    .fetch_all(pool)
    .await?;
    Ok(all.into_iter().collect())
}

fn changed(before: &BTreeMap<String, Value>, after: &BTreeMap<String, Value>) -> BTreeSet<String> {
    before.keys().chain(after.keys()).filter(|k| before.get(*k) != after.get(*k)).cloned().collect()
}

/// A short rendering of an answer for evidence.
pub fn show(a: &Answer) -> String {
    match a {
        Ok(rows) => {
            let s = serde_json::to_string(rows).unwrap_or_default();
            if s.len() > 200 {
                format!("{}…", &s[..200])
            } else {
                s
            }
        }
        Err((code, msg)) => format!("error {code}: {msg}"),
    }
}

/// Whether the call returned no row, or only zero counts / empty results.
pub fn refused(a: &Answer) -> bool {
    match a {
        Ok(rows) => rows.iter().all(|r| r.is_null() || r.as_i64() == Some(0)),
        Err(_) => true,
    }
}

/// The `outcome` of an fp_run_transition answer.
pub fn outcome(a: &Answer) -> String {
    match a {
        Ok(rows) => rows.first().and_then(|r| r["outcome"].as_str()).unwrap_or("(no row)").to_string(),
        Err((code, _)) => format!("error {code}"),
    }
}

impl<'a> Prober<'a> {
    /// `None` (after recording a failed check) when the backend offers no worker login.
    pub fn new(ctx: &'a mut Ctx) -> Option<Prober<'a>> {
        match ctx.worker_login.clone() {
            Some(login) => Some(Prober { ctx, login }),
            None => {
                ctx.check(Check::fail(
                    WORKER_LOGIN_EXISTS,
                    "this backend gives the harness no worker login (an external database); run P-api on a cluster the harness starts",
                ));
                None
            }
        }
    }

    /// A prober logged in at `login` (a URL), whatever the context's worker login is.
    pub fn with_login(ctx: &'a mut Ctx, login: String) -> Prober<'a> {
        Prober { ctx, login }
    }

    async fn connect(&self, owner: &str) -> Result<PgConnection, HarnessError> {
        self.connect_with(owner, None).await
    }

    async fn connect_with(&self, owner: &str, lock_timeout: Option<&str>) -> Result<PgConnection, HarnessError> {
        let mut opts: sqlx::postgres::PgConnectOptions = self.login.parse()?;
        if let Some(t) = lock_timeout {
            opts = opts.options([("lock_timeout", t)]);
        }
        Ok(PgConnection::connect_with(&opts.application_name(owner)).await?)
    }

    /// Run `sql` as the worker login with application_name `owner` (the identity a worker shows).
    pub async fn call(&self, owner: &str, sql: &str) -> Result<Answer, HarnessError> {
        self.call_with(owner, sql, None).await
    }

    async fn call_with(&self, owner: &str, sql: &str, lock_timeout: Option<&str>) -> Result<Answer, HarnessError> {
        let mut c = self.connect_with(owner, lock_timeout).await?;
        let r = wait::within("a probed call", STEP, async {
            Ok(sqlx::query_scalar::<_, Value>(sql).fetch_all(&mut c).await)
        })
        .await?;
        let _ = c.close().await;
        Ok(answer(r))
    }

    /// A probe: call `sql` as `owner`, and require that exactly the rows `may_change` changed and
    /// that `ok` holds for the answer.
    pub async fn probe(
        &mut self,
        rule: &str,
        what: &str,
        owner: &str,
        sql: &str,
        ok: impl Fn(&Answer) -> bool,
        may_change: &[String],
    ) -> Result<(), HarnessError> {
        self.probe_with(rule, what, owner, sql, None, ok, may_change).await
    }

    /// As [`Prober::probe`], with the call's lock_timeout at 3 s: a call that would wait on a row
    /// lock instead fails with SQLSTATE 55P03, and the probe sees that as its answer.
    pub async fn probe_with_lock_timeout(
        &mut self,
        rule: &str,
        what: &str,
        owner: &str,
        sql: &str,
        ok: impl Fn(&Answer) -> bool,
        may_change: &[String],
    ) -> Result<(), HarnessError> {
        self.probe_with(rule, what, owner, sql, Some("3s"), ok, may_change).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn probe_with(
        &mut self,
        rule: &str,
        what: &str,
        owner: &str,
        sql: &str,
        lock_timeout: Option<&str>,
        ok: impl Fn(&Answer) -> bool,
        may_change: &[String],
    ) -> Result<(), HarnessError> {
        let before = rows(&self.ctx.pool).await?;
        let a = self.call_with(owner, sql, lock_timeout).await?;
        self.judge(rule, what, &before, &a, ok, may_change).await
    }

    async fn judge(
        &mut self,
        rule: &str,
        what: &str,
        before: &BTreeMap<String, Value>,
        a: &Answer,
        ok: impl Fn(&Answer) -> bool,
        may_change: &[String],
    ) -> Result<(), HarnessError> {
        let after = rows(&self.ctx.pool).await?;
        let moved = changed(before, &after);
        let want: BTreeSet<String> = may_change.iter().cloned().collect();
        let good = ok(a) && moved == want;
        self.ctx.timeline.record(
            "harness",
            "probe",
            rule,
            serde_json::json!({"what": what, "answer": show(a), "changed": moved, "allowed": want}),
        );
        self.ctx.check(Check::expect(
            crate::tags::tagged(rule, what),
            good,
            format!("answered {}; rows changed {:?}, allowed {:?}", show(a), moved, want),
        ));
        Ok(())
    }

    /// A probe whose statement starts, then waits on an advisory lock the harness holds until the
    /// database clock has passed `moment` (an SQL timestamp expression, e.g. a lease's expiry), and
    /// only then runs its function: the function's own clock check must use the time it runs, not
    /// the time its statement or transaction began. `sql` must use `{held}` once inside a text
    /// argument (it becomes '' once the lock is granted) and select from `held`. `None` when the
    /// probe was inconclusive: its statement began after `moment` (a loaded machine); the caller
    /// retries with a longer lease.
    #[allow(clippy::too_many_arguments)]
    pub async fn probe_held(
        &mut self,
        rule: &str,
        what: &str,
        owner: &str,
        sql: &str,
        moment: &str,
        ok: impl Fn(&Answer) -> bool,
        may_change: &[String],
    ) -> Result<Option<Answer>, HarnessError> {
        let hold_key = self.ctx.lock_key(HOLD_KEY);
        let sql = format!(
            "WITH held AS MATERIALIZED (SELECT left(pg_advisory_xact_lock_shared({hold_key})::text, 0) AS v) {}",
            sql.replace("{held}", "held.v")
        );
        let mut harness = PgConnection::connect_with(
            &self.ctx.db_url.parse::<sqlx::postgres::PgConnectOptions>()?.application_name(CONTROL),
        )
        .await?;
        sqlx::query("SELECT pg_advisory_lock($1)").bind(hold_key).execute(&mut harness).await?;
        let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut harness).await?;
        let before = rows(&self.ctx.pool).await?;
        let mut conn = self.connect(owner).await?;
        let call = tokio::spawn(async move {
            let r = sqlx::query_scalar::<_, Value>(&sql).fetch_all(&mut conn).await;
            let _ = conn.close().await;
            r
        });
        let pool = self.ctx.pool.clone();
        let owner_name = owner.to_string();
        let started_before: Result<bool, HarnessError> = async {
            // The statement is seen waiting on the harness's lock (pg_blocking_pids) ...
            let started: bool = wait::until("the probe to wait on the harness's advisory lock", STEP, || {
                let (pool, owner_name) = (pool.clone(), owner_name.clone());
                async move {
                    Ok(sqlx::query_scalar::<_, bool>(&format!(
                        "SELECT coalesce(query_start < ({moment}), false) FROM pg_stat_activity
                          WHERE application_name = $1 AND $2 = ANY(pg_blocking_pids(pid))"
                    ))
                    .bind(&owner_name)
                    .bind(holder)
                    .fetch_optional(&pool)
                    .await?)
                }
            })
            .await?;
            // ... and the database clock passes the moment while it waits.
            wait::until("the probed moment on the database clock", STEP, || {
                let pool = pool.clone();
                async move {
                    Ok(sqlx::query_scalar::<_, bool>(&format!("SELECT coalesce(clock_timestamp() > ({moment}), true)"))
                        .fetch_one(&pool)
                        .await?
                        .then_some(()))
                }
            })
            .await?;
            Ok(started)
        }
        .await;
        sqlx::query("SELECT pg_advisory_unlock($1)").bind(hold_key).execute(&mut harness).await?;
        let _ = harness.close().await;
        let r = match tokio::time::timeout(STEP, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(HarnessError::Other(format!("probe task: {e}"))),
            Err(_) => return Err(HarnessError::Timeout { what: "a held probe".into(), after_ms: STEP.as_millis() }),
        };
        let a = answer(r);
        if !started_before? {
            self.ctx.timeline.record("harness", "probe_inconclusive", rule, serde_json::json!({"what": what}));
            return Ok(None);
        }
        self.judge(rule, what, &before, &a, ok, may_change).await?;
        Ok(Some(a))
    }

    /// Wait until `cond` (boolean SQL) holds on the database clock.
    pub async fn until(&self, what: &str, cond: &str) -> Result<(), HarnessError> {
        let pool = self.ctx.pool.clone();
        wait::until(what, STEP, || {
            let pool = pool.clone();
            async move { Ok(sqlx::query_scalar::<_, bool>(&format!("SELECT {cond}")).fetch_one(&pool).await?.then_some(())) }
        })
        .await
    }

    /// The harness's own control-plane statement (setup), run as the schema owner.
    pub async fn admin(&self, sql: &str) -> Result<(), HarnessError> {
        sqlx::raw_sql(sql).execute(&self.ctx.pool).await?;
        Ok(())
    }

    /// A fresh run (task, run, lease in one transaction, by the protocol's control plane).
    pub async fn new_run(&self, task: &str) -> Result<Uuid, HarnessError> {
        fenceproof_protocol::runs::create_run(&self.ctx.pool, task, serde_json::json!({}))
            .await
            .map_err(|e| HarnessError::Other(format!("create_run: {e}")))
    }

    /// The global invariants over everything the oracle saw.
    pub async fn finish(self) -> Result<(), HarnessError> {
        let probes = self.ctx.checks.len();
        let failed = self.ctx.checks.iter().filter(|c| !c.passed()).count();
        let rules: BTreeSet<&str> = self.ctx.checks.iter().filter_map(|c| crate::tags::tag_of(&c.name)).collect();
        let note = format!("{probes} probes of {} rules, {failed} broken", rules.len());
        self.ctx.note(note);
        // The probes register intents with token digests on purpose: the fp_* functions cannot
        // canonicalize a body, so the digest is the calling worker's duty, judged in the other rows.
        self.ctx.invariants.skip.push(fenceproof_harness::check::intents::DIGESTS_CANONICAL);
        Ok(())
    }
}

fn answer(r: Result<Vec<Value>, sqlx::Error>) -> Answer {
    match r {
        Ok(v) => Ok(v),
        Err(sqlx::Error::Database(db)) => {
            Err((db.code().map(|c| c.to_string()).unwrap_or_default(), db.message().to_string()))
        }
        Err(e) => Err(("client".into(), e.to_string())),
    }
}

/// Keys for the changed-row sets.
pub fn run_key(r: Uuid) -> String {
    format!("run:{r}")
}
pub fn lease_key(r: Uuid) -> String {
    format!("lease:{r}")
}
pub fn op_key(o: &str) -> String {
    format!("op:{o}")
}

/// A short lease for probes that straddle expiry; long enough that a held statement starts before
/// it runs out on a loaded machine, short enough to keep the rows quick.
pub const SHORT_TTL_MS: i64 = 700;

/// A lease that stays live for the whole experiment.
pub const LONG_TTL_MS: i64 = 120_000;

/// Owner ids: rogue sessions show whatever identity they like; these are the ones probes use.
pub fn owner(tag: &str) -> String {
    format!("probe-{tag}-{}", &Uuid::new_v4().simple().to_string()[..6])
}
