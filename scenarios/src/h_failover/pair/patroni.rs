//! H under Patroni: the harness starts etcd and two Patroni nodes of its own, runs H's story
//! through the leader Patroni's REST API names, cuts replication (the leader's walsender
//! SIGSTOPped), then the leader crashes (its Patroni and its PostgreSQL SIGKILLed) and Patroni,
//! not the harness, promotes the replica. The verdict is against two promises: the contract's
//! claim (`acknowledged_epochs_survive_failover`) and Patroni's own documented bound for its mode
//! (asynchronous: the promoted replica lagged at most `maximum_lag_on_failover` bytes;
//! synchronous: nothing that returned success is lost). It reports the WAL lost, the time from the
//! crash to a writable new leader, and that nothing of the cluster survives its teardown.
//!
//! Opt-in (a bootstrap and a failover of Patroni's take about 40 s): the rows run only when named.

use std::time::{Duration, Instant};

use fenceproof_harness::check::Check;
use fenceproof_harness::contract::{Contract, FailoverTable, Manager, PatroniSettings, ReplicationMode};
use fenceproof_harness::db::patroni::{processes_in, PatroniCluster};
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::record::oracle;
use fenceproof_harness::{wait, HarnessError};
use serde_json::{json, Value};
use sqlx::PgPool;

use super::{self as pair, wait_standby, Fence, Pair, Servers};
use crate::ctx::{Ctx, CONTROL, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};

/// The lagging crash rows' titles, one per replication mode.
pub const TITLE_ASYNC: &str =
    "Failover under Patroni with etcd, asynchronous: the leader crashes while replication lags";
pub const TITLE_SYNC: &str = "Failover under Patroni with etcd, synchronous: the leader crashes while replication lags";

/// Its registration: what it needs and what it judges.
pub const ASYNC: Experiment = Experiment {
    id: "H-patroni-async",
    title: TITLE_ASYNC,
    section: "11 H; 10",
    needs: &[Need::Patroni(ReplicationMode::Async)],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c, ReplicationMode::Async)),
};

/// Its registration: what it needs and what it judges.
pub const SYNC: Experiment = Experiment {
    id: "H-patroni-sync",
    title: TITLE_SYNC,
    section: "11 H; 10",
    needs: &[Need::Patroni(ReplicationMode::Sync)],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c, ReplicationMode::Sync)),
};

/// The titles of the crash rows without lag, one per replication mode.
pub const CRASH_TITLE_ASYNC: &str =
    "Failover under Patroni with etcd, asynchronous: the leader crashes with no replication lag";
pub const CRASH_TITLE_SYNC: &str =
    "Failover under Patroni with etcd, synchronous: the leader crashes with no replication lag";

/// Its registration: the leader crashes once the replica replayed everything (asynchronous mode).
pub const CRASH_ASYNC: Experiment = Experiment {
    id: "H-patroni-crash",
    title: CRASH_TITLE_ASYNC,
    section: "11 H; 10",
    needs: &[Need::Patroni(ReplicationMode::Async)],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run_crash(c, ReplicationMode::Async)),
};

/// Its registration: the same in synchronous mode.
pub const CRASH_SYNC: Experiment = Experiment {
    id: "H-patroni-crash-sync",
    title: CRASH_TITLE_SYNC,
    section: "11 H; 10",
    needs: &[Need::Patroni(ReplicationMode::Sync)],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run_crash(c, ReplicationMode::Sync)),
};

/// The names of its own checks (beside H's).
pub const PATRONI_ASYNC_BOUND: &str =
    "Patroni's bound (asynchronous mode): the WAL lost is within maximum_lag_on_failover";
pub const PATRONI_SYNC_BOUND: &str = "Patroni's bound (synchronous mode): nothing that returned success is lost";
pub const NOTHING_LEFT: &str = "the Patroni cluster leaves no process behind (etcd, Patroni, PostgreSQL)";

/// Bound on Patroni's failover beyond its `ttl`.
const FAILOVER_SLACK: Duration = Duration::from_secs(40);

async fn run(ctx: &mut Ctx, mode: ReplicationMode) -> Result<(), HarnessError> {
    let contract = contract_for(ctx, mode);
    crate::h_failover::run_with(ctx, contract, mode, crate::h_failover::Lag::Cut).await
}

async fn run_crash(ctx: &mut Ctx, mode: ReplicationMode) -> Result<(), HarnessError> {
    let contract = contract_for(ctx, mode);
    crate::h_failover::run_with(ctx, contract, mode, crate::h_failover::Lag::None).await
}

/// The session's contract when it puts this mode under Patroni, else Patroni's defaults for the
/// mode with the claim that holds there (no loss claimed under asynchronous mode).
pub fn contract_for(ctx: &Ctx, mode: ReplicationMode) -> Contract {
    match &ctx.contract {
        Some(c) if c.replication_mode() == Some(mode) && c.patroni().is_some() => (**c).clone(),
        _ => {
            let mut c =
                if mode == ReplicationMode::Sync { Contract::default_sync() } else { Contract::default_async() };
            c.failover = Some(FailoverTable { manager: Manager::Patroni, ..FailoverTable::default() });
            c
        }
    }
}

/// The cluster H runs on, and what the story needs to remember of it.
pub struct Managed {
    cluster: PatroniCluster,
    settings: PatroniSettings,
    old_leader: usize,
    crashed_at: Option<Instant>,
    took: Option<Duration>,
}

/// Start the cluster (bootstrap bounded), wait for the replica to stream (and be synchronous in
/// sync mode), and make H's database on the leader.
pub(in crate::h_failover) async fn start(
    ctx: &Ctx,
    settings: PatroniSettings,
    mode: ReplicationMode,
) -> Result<Servers, HarnessError> {
    let bin = ctx.pg_bin.clone().ok_or_else(|| {
        HarnessError::Other("the Patroni rows start PostgreSQL from local binaries (--pg-bin); none found".into())
    })?;
    let t = Instant::now();
    let cluster = PatroniCluster::start(&bin, &settings, &ctx.dir).await?;
    let leader = cluster.leader;
    ctx.timeline.record(
        "harness",
        "pair_started",
        "patroni",
        json!({"scope": cluster.scope, "leader": cluster.nodes[leader].name, "bootstrap_ms": t.elapsed().as_millis(), "mode": mode.as_str()}),
    );
    let m = Managed { cluster, settings, old_leader: leader, crashed_at: None, took: None };
    let admin = databases::pool(&m.cluster.url_for("postgres"), "fenceproof-harness", 2).await?;
    wait_standby(&admin, m.replica_name(), "the replica to stream", "state = 'streaming'").await?;
    if settings.synchronous_mode {
        wait_standby(&admin, m.replica_name(), "Patroni to make the replica synchronous", "sync_state = 'sync'")
            .await?;
        // Patroni promotes only the standby its etcd record names synchronous, which it writes a
        // loop later, once the standby confirmed the change's WAL: a lag injected before that
        // leaves no promotable standby (the crashed leader is then never replaced).
        m.cluster.wait_role(1 - leader, "sync_standby", STEP).await?;
    }
    let actual = format!("{}; {}", settings.mode_line(), pair::settings(&admin).await?);
    databases::create_template(&m.cluster).await?;
    let url = databases::create_from_template(&m.cluster, "h").await?;
    let p_pool = databases::pool(&url, CONTROL, 4).await?;
    let s_pool = databases::pool(&m.cluster.url_of(1 - leader, "postgres"), CONTROL, 2).await?;
    Ok(Servers { pair: Pair::Patroni(Box::new(m)), url, p_pool, s_pool, p_admin: admin, actual })
}

impl Managed {
    /// The cluster as its REST API shows it.
    pub(in crate::h_failover) fn rest(&self) -> fenceproof_harness::db::patroni::rest::RestCluster {
        self.cluster.rest()
    }

    /// The replica's name (its `application_name` on the leader).
    pub fn replica_name(&self) -> &str {
        &self.cluster.nodes[1 - self.old_leader].name
    }

    /// Cut the leader off etcd (its proxy drops every connection and refuses new ones); its
    /// PostgreSQL and the workers connected to it go on.
    pub(in crate::h_failover) fn partition_leader(&self, ctx: &Ctx) {
        self.cluster.nodes[self.old_leader].proxy.cut();
        ctx.timeline.record(
            "harness",
            "partition",
            "patroni leader",
            json!({"node": self.cluster.nodes[self.old_leader].name, "from": "etcd"}),
        );
    }

    /// When Patroni made the replica a leader that takes writes, as the harness saw it.
    pub(in crate::h_failover) fn promoted_after(&self) -> Option<Duration> {
        self.took
    }

    /// The leader crashes; bounded wait until every process it had is gone.
    pub(in crate::h_failover) async fn crash_leader(&mut self, ctx: &Ctx) -> Result<Fence, HarnessError> {
        let killed = self.cluster.crash(self.old_leader);
        self.crashed_at = Some(Instant::now());
        let killed: Vec<i32> = killed.iter().map(|p| p.as_raw()).collect();
        ctx.timeline.record(
            "harness",
            "crash",
            "patroni leader",
            json!({"node": self.cluster.nodes[self.old_leader].name, "killed": killed}),
        );
        let dead = |p: &i32| {
            fenceproof_harness::procs::signals::proc_state(nix::unistd::Pid::from_raw(*p)).is_none_or(|s| s == 'Z')
        };
        let gone = wait::until("the crashed leader's processes to die", STEP, || {
            let all_dead = killed.iter().all(dead);
            async move { Ok(all_dead.then_some(())) }
        })
        .await
        .is_ok();
        Ok(Fence::Crashed { gone, killed })
    }

    /// Patroni promotes the replica: wait (bounded by `ttl` + slack) until it takes writes.
    pub(in crate::h_failover) async fn await_promotion(&mut self, ctx: &Ctx) -> Result<(PgPool, String), HarnessError> {
        let new = 1 - self.old_leader;
        if self.crashed_at.is_none() {
            self.crashed_at = Some(Instant::now());
        }
        let bound = Duration::from_secs(self.settings.ttl.into()) + FAILOVER_SLACK;
        self.cluster.wait_writable(new, bound).await?;
        self.took = self.crashed_at.map(|t| t.elapsed());
        ctx.timeline.record("harness", "observed", "patroni", json!({"new_leader": self.cluster.nodes[new].name, "crash_to_writable_ms": self.took.map(|d| d.as_millis())}));
        Ok((databases::pool(&self.cluster.url_of(new, "h"), CONTROL, 2).await?, oracle::DEFAULT_SCHEMA.to_string()))
    }
}

/// Under Patroni, the WAL positions just before the crash: the leader's, and what the replica
/// received.
pub(in crate::h_failover) async fn positions(servers: &Servers) -> Result<Option<(String, String)>, HarnessError> {
    if !matches!(servers.pair, Pair::Patroni(_)) {
        return Ok(None);
    }
    let leader: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(&servers.p_admin).await?;
    let replica: String = sqlx::query_scalar("SELECT coalesce(pg_last_wal_receive_lsn(), '0/0')::text")
        .fetch_one(&servers.s_pool)
        .await?;
    Ok(Some((leader, replica)))
}

/// Under Patroni, the verdict against Patroni's own bound for its mode; what it measured.
pub(in crate::h_failover) async fn judge(
    ctx: &mut Ctx,
    pair: &Pair,
    n_pool: &PgPool,
    positions: Option<(String, String)>,
    lost: &[String],
) -> Result<Value, HarnessError> {
    let (Pair::Patroni(m), Some((leader, replica))) = (pair, positions) else { return Ok(Value::Null) };
    let lost_bytes: i64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint")
        .bind(&leader)
        .bind(&replica)
        .fetch_one(n_pool)
        .await?;
    let s = &m.settings;
    let took = m.took.map(|d| d.as_secs_f64());
    if s.synchronous_mode {
        ctx.check(Check::expect(PATRONI_SYNC_BOUND, lost.is_empty(), format!("lost: {lost:?}; {}", s.mode_line())));
    } else {
        ctx.check(Check::expect(
            PATRONI_ASYNC_BOUND,
            u64::try_from(lost_bytes).is_ok_and(|b| b <= s.maximum_lag_on_failover),
            format!("{lost_bytes} bytes of WAL lost (leader at {leader}, replica had {replica}); maximum_lag_on_failover = {}", s.maximum_lag_on_failover),
        ));
    }
    ctx.note(format!(
        "Patroni ({}): the leader crashed, the replica was a writable leader {} s later; {lost_bytes} bytes of WAL it had not received were lost; the old leader is dead, so it accepted nothing after the promotion",
        if s.synchronous_mode { "synchronous mode" } else { "asynchronous mode" },
        took.map(|t| format!("{t:.1}")).unwrap_or_else(|| "?".into())
    ));
    Ok(json!({
        "manager": "patroni", "settings": s, "scope": m.cluster.scope, "old_leader": m.cluster.nodes[m.old_leader].name,
        "new_leader": m.cluster.nodes[1 - m.old_leader].name, "crash_to_writable_s": took,
        "leader_lsn_at_crash": leader, "replica_received_lsn": replica, "wal_bytes_lost": lost_bytes,
        "old_leader_wrote_after_promotion": false,
    }))
}

/// Under Patroni: stop the cluster and check that nothing of it is left.
pub(in crate::h_failover) fn stop_and_judge(ctx: &mut Ctx, pair: &mut Pair) {
    let Pair::Patroni(m) = pair else { return };
    let root = m.cluster.root().to_path_buf();
    m.cluster.stop();
    let left = processes_in(&root);
    ctx.check(Check::expect(
        NOTHING_LEFT,
        left.is_empty() && !root.exists(),
        format!("{} process(es) left in {}: {left:?}", left.len(), root.display()),
    ));
}
