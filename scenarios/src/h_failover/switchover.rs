//! H-patroni-switchover: a controlled switchover through Patroni's REST API (`POST /switchover`)
//! while worker A, connected to the leader, keeps saving checkpoints. Patroni stops the leader
//! cleanly (its replica receives everything first) and promotes the candidate, so its promise for
//! a switchover is that nothing acknowledged is lost, in either mode. The row judges that, the time
//! from the request to a writable new leader, and that the old leader acknowledged no save after
//! the new one took writes.
//!
//! It runs on the harness's own cluster (etcd + two nodes), or, with a contract naming a team's
//! Patroni (`failover.rest`) and `--database-url`, on the team's cluster: then nothing is started,
//! stopped or signalled, only the REST API and the row's schemas in the team's database are used
//! (the CLI refuses to run it without `--yes-fail-over-this-cluster`). Opt-in.

use std::time::{Duration, Instant};

use fenceproof_harness::check::Check;
use fenceproof_harness::contract::ReplicationMode;
use fenceproof_harness::db::patroni::rest::{self, Member, Plan, RestCluster};
use fenceproof_harness::db::{databases, patroni::takes_a_write};
use fenceproof_harness::record::oracle;
use fenceproof_harness::{wait, HarnessError};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::watch;

use super::pair::{Pair, Servers};
use super::partition::{acknowledged_after, keep_saving, Save, NO_SPLIT_BRAIN};
use super::{losses, snapshot, start_task, Snapshot};
use crate::ctx::{Ctx, CONTROL};
use crate::experiment::{Checks, Experiment, Judges, Need};

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "H-patroni-switchover",
    title: "Failover under Patroni: a controlled switchover through its REST API while a worker writes to the leader",
    section: "11 H; 10",
    needs: &[Need::PatroniSwitchover],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks (beside the split-brain one it shares with the partition row).
pub const SWITCHED: &str = "Patroni's REST switchover made the candidate the writable leader";
pub const NOTHING_LOST: &str = "a controlled switchover loses nothing acknowledged (Patroni's promise, either mode)";

/// Bound on the candidate becoming a writable leader after Patroni answered.
const WRITABLE: Duration = Duration::from_secs(60);

/// Where the row runs: the plan (who is demoted, who promoted), the harness's own cluster (stopped
/// and judged at the end) or none (a team's), the row's database URL on the leader, and in a
/// team's database the row's schema.
struct Target {
    plan: Plan,
    own: Option<Servers>,
    leader_url: String,
    schema: Option<String>,
}

impl Target {
    /// A pool on the row's database on `member`, and the schema of the oracle there.
    async fn pool_on(&self, ctx: &Ctx, member: &Member) -> Result<(PgPool, String), HarnessError> {
        match &self.schema {
            None => {
                let url = rest::url_on(&self.leader_url, &member.host, member.port);
                Ok((databases::pool(&url, CONTROL, 2).await?, oracle::DEFAULT_SCHEMA.to_string()))
            }
            Some(schema) => {
                let base = ctx.db_url.split("?options").next().unwrap_or(&ctx.db_url);
                let url = rest::url_on(base, &member.host, member.port);
                Ok((databases::pool_in(&url, schema, CONTROL, 2).await?, ctx.oracle_schema.clone()))
            }
        }
    }
}

/// The team's cluster when the contract names its REST API, else a cluster of the harness's own
/// (the contract's Patroni mode, else asynchronous).
async fn target(ctx: &Ctx) -> Result<Target, HarnessError> {
    if let Some(urls) = ctx.contract.as_ref().and_then(|c| c.patroni_rest()) {
        let plan = RestCluster::from_urls(&urls).map_err(HarnessError::Other)?.plan().await?;
        let leader_url = rest::url_on(&ctx.db_url, &plan.leader.host, plan.leader.port);
        let schema = ctx.oracle_schema.strip_suffix("_o").unwrap_or(&ctx.oracle_schema).to_string();
        return Ok(Target { plan, own: None, leader_url, schema: Some(schema) });
    }
    let mode = ctx
        .contract
        .as_ref()
        .filter(|c| c.patroni().is_some())
        .and_then(|c| c.replication_mode())
        .unwrap_or(ReplicationMode::Async);
    let contract = super::patroni::contract_for(ctx, mode);
    let settings = contract.patroni().expect("a Patroni contract");
    let servers = super::patroni::start(ctx, settings, mode).await?;
    let Pair::Patroni(m) = &servers.pair else { unreachable!("the Patroni pair") };
    let plan = m.rest().plan().await?;
    Ok(Target { plan, leader_url: servers.url.clone(), own: Some(servers), schema: None })
}

/// `POST /switchover`, then (bounded) until the candidate is Patroni's leader and takes a write on
/// the row's database. Returns Patroni's answer.
async fn switch(plan: &Plan, candidate_url: &str) -> Result<rest::Response, HarnessError> {
    let answer = rest::switchover(plan).await?;
    if answer.status != 200 {
        return Err(HarnessError::Other(format!(
            "Patroni refused the switchover: HTTP {}: {}",
            answer.status,
            answer.body.trim()
        )));
    }
    wait::until("the candidate to be Patroni's writable leader", WRITABLE, || async {
        Ok((rest::is_primary(&plan.candidate).await && takes_a_write(candidate_url).await).then_some(()))
    })
    .await?;
    Ok(answer)
}

async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let mut t = target(ctx).await?;
    ctx.timeline.record("harness", "plan", "patroni", json!({ "switchover": t.plan }));
    let config = fenceproof_harness::db::patroni::http::get_at(&t.plan.leader.api, "/config").await;
    let config: serde_json::Value =
        config.ok().and_then(|r| serde_json::from_str(&r.body).ok()).unwrap_or(serde_json::Value::Null);
    let tools = ctx.spawn_tools().await?;
    let mut task = start_task(ctx, &t.leader_url, &tools).await?;
    let (p_pool, _) = t.pool_on(ctx, &t.plan.leader).await?;
    let before = snapshot(&p_pool, task.run_id).await?;
    p_pool.close().await;
    let candidate_url = rest::url_on(&t.leader_url, &t.plan.candidate.host, t.plan.candidate.port);
    let t0 = Instant::now();
    ctx.timeline.record(
        "harness",
        "switchover",
        "patroni",
        json!({"leader": t.plan.leader.name, "candidate": t.plan.candidate.name}),
    );
    let (tx, rx) = watch::channel(None::<Duration>);
    let (saves, switched) = tokio::join!(keep_saving(&mut task.a, rx, t0), async {
        let r = switch(&t.plan, &candidate_url).await;
        let _ = tx.send(Some(t0.elapsed()));
        r.map(|a| (a, t0.elapsed()))
    });
    let (answer, writable_at) = switched?;
    follow_the_leader(&t);
    ctx.timeline.record(
        "harness",
        "observed",
        "patroni",
        json!({"new_leader": t.plan.candidate.name, "switchover_to_writable_ms": writable_at.as_millis()}),
    );
    let (n_pool, oracle_schema) = t.pool_on(ctx, &t.plan.candidate).await?;
    let after = snapshot(&n_pool, task.run_id).await?;
    let on_new: Option<i64> = sqlx::query_scalar("SELECT (checkpoint->>'n')::bigint FROM agent_runs WHERE run_id = $1")
        .bind(task.run_id)
        .fetch_one(&n_pool)
        .await?;
    let verdict = judge(ctx, &before, &after, (&saves, on_new), (&answer, writable_at));
    let rows = oracle::commits_in(&n_pool, &oracle_schema).await?;
    std::fs::write(ctx.dir.join("oracle.json"), serde_json::to_string_pretty(&rows).expect("json"))?;
    ctx.invariants.control.push(task.cp.owner.clone());
    let record = json!({
        "cluster": if t.own.is_some() { "the harness's own" } else { "the team's (failover.rest)" },
        "contract": ctx.contract, "patroni_config": config, "plan": t.plan, "patroni_answer": {"status": answer.status, "body": answer.body.trim()},
        "switchover_to_writable_s": writable_at.as_secs_f64(), "before": before, "after_on_new_leader": after,
        "checkpoint_n_on_new_leader": on_new, "verdict": verdict,
        "saves": saves.iter().map(|s| json!({"n": s.n, "at_s": s.at.as_secs_f64(), "acknowledged": s.ok, "outcome": s.outcome})).collect::<Vec<_>>(),
    });
    std::fs::write(ctx.dir.join("switchover.json"), serde_json::to_string_pretty(&record).expect("json"))?;
    for w in [&mut task.a, &mut task.b, &mut task.d, &mut task.cp] {
        w.kill().await?;
    }
    finish(ctx, &mut t, &n_pool).await;
    n_pool.close().await;
    Ok(())
}

/// The verdicts: the switchover happened, nothing acknowledged was lost, and the old leader
/// acknowledged no save after the new one took writes. Returns what it found, for the evidence.
fn judge(
    ctx: &mut Ctx,
    before: &Snapshot,
    after: &Snapshot,
    (saves, on_new): (&[Save], Option<i64>),
    (answer, writable_at): (&rest::Response, Duration),
) -> serde_json::Value {
    ctx.check(Check::expect(
        SWITCHED,
        answer.status == 200,
        format!(
            "HTTP {} {}; writable {:.1} s after the request",
            answer.status,
            answer.body.trim(),
            writable_at.as_secs_f64()
        ),
    ));
    let last_acked = saves.iter().filter(|s| s.ok).map(|s| s.n).max();
    let mut lost = losses(before, after);
    if let Some(n) = last_acked.filter(|n| on_new.is_none_or(|m| m < *n as i64)) {
        lost.push(format!("save {n} acknowledged, the new leader has checkpoint {}", opt(on_new)));
    }
    ctx.check(Check::expect(
        NOTHING_LOST,
        lost.is_empty(),
        format!(
            "lost: {lost:?}; last save acknowledged: {}, the new leader's checkpoint: {}",
            opt(last_acked.map(|n| n as i64)),
            opt(on_new)
        ),
    ));
    let late = acknowledged_after(saves, writable_at);
    let tried_after = saves.iter().filter(|s| s.at > writable_at).count();
    ctx.check(Check::expect(
        NO_SPLIT_BRAIN,
        late.is_empty() && tried_after > 0,
        format!("{tried_after} save(s) sent to the old leader after the new one took writes, acknowledged: {late:?}"),
    ));
    ctx.note(format!(
        "Patroni switchover: the candidate took writes {:.1} s after the request; {} of {} saves acknowledged (the last: {}), {} lost; {} sent to the old leader after the switch, {} acknowledged",
        writable_at.as_secs_f64(),
        saves.iter().filter(|s| s.ok).count(),
        saves.len(),
        opt(last_acked.map(|n| n as i64)),
        if lost.is_empty() { "none".to_string() } else { lost.len().to_string() },
        tried_after,
        late.len()
    ));
    json!({"lost": lost, "last_acknowledged_save": last_acked, "saves_after_switch": tried_after, "acknowledged_after_switch_s": late})
}

fn opt(n: Option<i64>) -> String {
    n.map_or_else(|| "none".into(), |n| n.to_string())
}

/// In a team's database, what the run drops at its end or on Ctrl-C (the row's schemas, the
/// worker role it may have made) goes to the new leader from now on: the old one is read-only.
fn follow_the_leader(t: &Target) {
    if t.schema.is_none() {
        return;
    }
    let (old, new) = (&t.plan.leader, &t.plan.candidate);
    let at_old = [format!("@{}:{}/", old.host, old.port), format!("://{}:{}/", old.host, old.port)];
    fenceproof_harness::db::external::retarget(|u| {
        at_old.iter().any(|a| u.contains(a.as_str())).then(|| rest::url_on(u, &new.host, new.port))
    });
}

/// The row's schemas go from the team's database (on its new leader); the harness's own cluster is
/// stopped and judged.
async fn finish(ctx: &mut Ctx, t: &mut Target, n_pool: &PgPool) {
    if let Some(schema) = &t.schema {
        for sch in [schema.clone(), format!("{schema}_o")] {
            if sqlx::query(&format!("DROP SCHEMA IF EXISTS {sch} CASCADE")).execute(n_pool).await.is_ok() {
                fenceproof_harness::db::external::forget(&sch);
            }
        }
    }
    if let Some(servers) = &mut t.own {
        for p in [&servers.p_pool, &servers.s_pool, &servers.p_admin] {
            p.close().await;
        }
        super::patroni::stop_and_judge(ctx, &mut servers.pair);
    }
}
