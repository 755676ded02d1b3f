//! Experiment H — failover, judged against the deployment contract (spec sections 10 and 11).
//!
//! The harness builds its own primary + streaming standby (async, or with the standby named in
//! `synchronous_standby_names`) with the session's backend: two native clusters, or two containers
//! on a private Docker network. It runs a task to a known state, then cuts replication so the
//! standby stops receiving WAL: natively it SIGSTOPs the primary's walsender; with containers it
//! disconnects the primary from the replication network, a real cut in which the WAL still in
//! flight is never delivered. While replication is cut:
//! - async: the old owner releases, a new owner takes over (epoch + 1), plans a step, and the
//!   dispatcher really creates its remote resource and records `succeeded` — all acknowledged by
//!   the primary, none of it on the standby;
//! - sync: the owner's release waits for the standby (`SyncRep`); the harness cancels that wait,
//!   and PostgreSQL answers success with "committed locally, might not have been replicated" — the
//!   protocol must report it as outcome unknown, never success.
//!
//! Then the old primary is fenced (its whole process tree SIGKILLed, or `docker kill`), the
//! standby promoted, and
//! epoch, revision, ledger statuses and the tools' high-water are compared before and after. The
//! verdict is whether the outcome matches the contract: a contract that promises no acknowledged
//! loss fails when anything acknowledged is gone, naming the replication setting that allowed it.

use std::collections::BTreeMap;
use std::time::Duration;

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::contract::{Contract, Failover, ReplicationMode};
use fenceproof_harness::db::container::ContainerDb;
use fenceproof_harness::db::docker::PrivateNetwork;
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::procs::signals;
use fenceproof_harness::record::{ledger, oracle};
use fenceproof_harness::{wait, HarnessError};
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::ctx::{data, outcome, require_ok, Ctx, CONTROL, STEP};

pub const TITLE: &str = "Failover: controlled promote, judged against the deployment contract";

const STANDBY: &str = "standby1";
/// Bound on one failover hook.
const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// What the database says at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Snapshot {
    epoch: i64,
    owner: Option<String>,
    revision: i64,
    status: String,
    /// operation_id -> status
    operations: BTreeMap<String, String>,
}

async fn snapshot(pool: &PgPool, run_id: Uuid) -> Result<Snapshot, HarnessError> {
    let (epoch, owner): (i64, Option<String>) =
        sqlx::query_as("SELECT epoch, owner FROM worker_leases WHERE run_id = $1").bind(run_id).fetch_one(pool).await?;
    let (revision, status): (i64, String) = sqlx::query_as("SELECT revision, status FROM agent_runs WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(pool)
        .await?;
    let ops: Vec<(String, String)> =
        sqlx::query_as("SELECT operation_id, status FROM tool_operations WHERE run_id = $1")
            .bind(run_id)
            .fetch_all(pool)
            .await?;
    Ok(Snapshot { epoch, owner, revision, status, operations: ops.into_iter().collect() })
}

/// Differences that mean an acknowledged state is gone.
fn losses(acked: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut lost = Vec::new();
    if after.epoch < acked.epoch {
        lost.push(format!("epoch {} -> {}", acked.epoch, after.epoch));
    }
    if after.revision < acked.revision {
        lost.push(format!("revision {} -> {}", acked.revision, after.revision));
    }
    for (op, st) in &acked.operations {
        match after.operations.get(op) {
            Some(now) if now == st => {}
            Some(now) => lost.push(format!("operation …{} {st} -> {now}", short(op))),
            None => lost.push(format!("operation …{} {st} -> missing", short(op))),
        }
    }
    lost
}

fn short(op: &str) -> &str {
    op.rsplit_once('/').map(|(a, _)| a.rsplit_once('/').map(|(_, s)| s).unwrap_or(a)).unwrap_or(op)
}

async fn settings(pool: &PgPool) -> Result<String, HarnessError> {
    let (ssn, sc): (String, String) =
        sqlx::query_as("SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')")
            .fetch_one(pool)
            .await?;
    Ok(format!("synchronous_standby_names = '{ssn}', synchronous_commit = {sc}"))
}

async fn wait_caught_up(primary: &PgPool, standby: &PgPool) -> Result<(), HarnessError> {
    let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(primary).await?;
    wait::until("the standby to replay the primary's WAL", STEP, || {
        let lsn = lsn.clone();
        async move {
            let done: bool = sqlx::query_scalar("SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)")
                .bind(&lsn)
                .fetch_one(standby)
                .await?;
            Ok(done.then_some(()))
        }
    })
    .await
}

/// The two servers of the experiment: built by the harness (native clusters, or containers on a
/// private network), or the team's own, driven by hooks.
enum Pair {
    Native {
        primary: NativeCluster,
        standby: NativeCluster,
    },
    /// Field order is drop order: both containers are removed before their network.
    Container {
        primary: Box<ContainerDb>,
        standby: Box<ContainerDb>,
        net: PrivateNetwork,
    },
    External {
        hooks: Failover,
        primary_url: String,
        schema: String,
    },
}

impl Pair {
    /// The primary and the standby, when the harness built them.
    fn servers(&self) -> Option<(&dyn Backend, &dyn Backend)> {
        match self {
            Pair::Native { primary, standby } => Some((primary, standby)),
            Pair::Container { primary, standby, .. } => Some((primary.as_ref(), standby.as_ref())),
            Pair::External { .. } => None,
        }
    }

    /// Run one of the contract's hooks with the URLs in its environment, bounded, logged.
    async fn hook(ctx: &Ctx, name: &str, cmd: &str, primary_url: &str, standby_url: &str) -> Result<(), HarnessError> {
        ctx.timeline.record("harness", "hook", name, json!({ "command": cmd }));
        let child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("FENCEPROOF_PRIMARY_URL", primary_url)
            .env("FENCEPROOF_STANDBY_URL", standby_url)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(HOOK_TIMEOUT, child).await.map_err(|_| HarnessError::Timeout {
            what: format!("failover.{name}"),
            after_ms: HOOK_TIMEOUT.as_millis(),
        })??;
        let log = format!(
            "$ {cmd}\n{}{}exit: {}\n",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            out.status
        );
        let path = ctx.dir.join("hooks.log");
        let mut all = std::fs::read_to_string(&path).unwrap_or_default();
        all.push_str(&log);
        std::fs::write(&path, all)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(HarnessError::Other(format!("failover.{name} failed ({}); see {}", out.status, path.display())))
        }
    }
}

pub async fn run(ctx: &mut Ctx, mode: ReplicationMode) -> Result<(), HarnessError> {
    let contract = match &ctx.contract {
        Some(c) if c.replication.mode == mode => (**c).clone(),
        _ if mode == ReplicationMode::Sync => Contract::default_sync(),
        _ => Contract::default_async(),
    };
    let claim = contract.replication.acknowledged_epochs_survive_failover;

    // The pair, and on it: an admin pool (primary), the experiment's URL and pool (primary), and a
    // pool to watch the standby replay.
    let mut admin_pool = None;
    let (mut pair, url, p_pool, s_pool, actual) = match contract.failover.clone() {
        Some(hooks) => {
            let schema = ctx.oracle_schema.strip_suffix("_o").unwrap_or(&ctx.oracle_schema).to_string();
            let s_pool = databases::pool(&hooks.standby_url, CONTROL, 2).await?;
            let actual = settings(&ctx.pool).await?;
            let primary_url = ctx.db_url.split("?options").next().unwrap_or(&ctx.db_url).to_string();
            (Pair::External { hooks, primary_url, schema }, ctx.db_url.clone(), ctx.pool.clone(), s_pool, actual)
        }
        None => {
            let settings_c =
                vec![("synchronous_commit".to_string(), contract.replication.synchronous_commit.as_str().to_string())];
            let pair = match (&ctx.container_image, ctx.pg_bin.clone()) {
                (Some(image), _) => {
                    let primary = ContainerDb::start_with(image, &ctx.dir.join("primary.log"), settings_c.clone()).await?;
                    let net = PrivateNetwork::create("h").await?;
                    let standby = ContainerDb::start_standby(
                        &primary,
                        &net,
                        STANDBY,
                        &ctx.dir.join("standby.log"),
                        settings_c,
                    )
                    .await?;
                    ctx.timeline.record(
                        "harness",
                        "pair_started",
                        "database",
                        json!({"primary": primary.id, "standby": standby.id, "network": net.name, "mode": mode.as_str()}),
                    );
                    Pair::Container { primary: Box::new(primary), standby: Box::new(standby), net }
                }
                (None, Some(bin)) => {
                    let primary = NativeCluster::start_with(bin, &ctx.dir.join("primary.log"), settings_c).await?;
                    let standby = NativeCluster::start_standby(&primary, STANDBY, &ctx.dir.join("standby.log")).await?;
                    ctx.timeline.record(
                        "harness",
                        "pair_started",
                        "database",
                        json!({"primary": primary.port(), "standby": standby.port(), "mode": mode.as_str()}),
                    );
                    Pair::Native { primary, standby }
                }
                (None, None) => {
                    return Err(HarnessError::Other(
                        "experiment H builds its own primary + standby and needs local PostgreSQL binaries (--pg-bin) or the container backend".into(),
                    ))
                }
            };
            let (primary, standby) = pair.servers().expect("a pair the harness built");
            let admin = databases::pool(&primary.url_for("postgres"), "fenceproof-harness", 2).await?;
            wait::until("the standby to stream", STEP, || {
                let p = admin.clone();
                async move {
                    let n: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'",
                    )
                    .bind(STANDBY)
                    .fetch_one(&p)
                    .await?;
                    Ok((n == 1).then_some(()))
                }
            })
            .await?;
            if mode == ReplicationMode::Sync {
                sqlx::query(&format!("ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'"))
                    .execute(&admin)
                    .await?;
                sqlx::query("SELECT pg_reload_conf()").execute(&admin).await?;
                wait::until("the standby to become synchronous", STEP, || {
                    let p = admin.clone();
                    async move {
                        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND sync_state = 'sync'").bind(STANDBY).fetch_one(&p).await?;
                        Ok((n == 1).then_some(()))
                    }
                })
                .await?;
            }
            let actual = settings(&admin).await?;
            databases::create_template(primary).await?;
            let url = databases::create_from_template(primary, "h").await?;
            let p_pool = databases::pool(&url, CONTROL, 4).await?;
            let s_pool = databases::pool(&standby.url_for("postgres"), CONTROL, 2).await?;
            admin_pool = Some(admin);
            (pair, url, p_pool, s_pool, actual)
        }
    };
    let ssn_empty = actual.contains("synchronous_standby_names = ''");
    let p_admin = admin_pool.unwrap_or_else(|| p_pool.clone());

    // A task in a known, replicated state: A owns it, one step planned and really executed.
    let tools = ctx.spawn_tools().await?;
    // Workers give up on a dead server quickly (the fenced primary never comes back).
    let fast = || vec!["--acquire-timeout-ms".to_string(), "1500".to_string()];
    let args = || [fast(), vec!["--tools-addr".to_string(), tools.addr.to_string()]].concat();
    let mut cp = ctx
        .spawn_worker_at("cp", &format!("control-plane-{}", &Uuid::new_v4().simple().to_string()[..8]), &url, fast())
        .await?;
    let created = cp.request(json!({"cmd": "create_run", "task_id": "task-h"}), STEP).await?;
    require_ok(&created, "create_run")?;
    let run_id: Uuid = data(&created)["run_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HarnessError::Other("no run_id".into()))?;
    let mut a = ctx
        .spawn_worker_at("a", &format!("worker-a-{}", &Uuid::new_v4().simple().to_string()[..8]), &url, fast())
        .await?;
    let mut b = ctx
        .spawn_worker_at("b", &format!("worker-b-{}", &Uuid::new_v4().simple().to_string()[..8]), &url, fast())
        .await?;
    let mut d = ctx
        .spawn_worker_at("d", &format!("worker-d-{}", &Uuid::new_v4().simple().to_string()[..8]), &url, args())
        .await?;
    let acquire =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 30_000, "renew_timeout_ms": 5000});
    require_ok(&a.request(acquire.clone(), STEP).await?, "A acquire")?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    require_ok(
        &a.request(json!({"cmd": "plan", "step_id": "s1", "tool": "idem", "request": {"n": 1}}), STEP).await?,
        "A plan",
    )?;
    require_ok(&d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000}), STEP).await?, "dispatch")?;
    wait_caught_up(&p_pool, &s_pool).await?;
    let before = snapshot(&p_pool, run_id).await?;
    let high_before = ledger::entries(&tools.ledger)?.iter().filter(|e| e["kind"] == "created").count();

    // Fault: the standby stops receiving WAL (native: the primary's walsender is SIGSTOPped).
    let mut walsender = None;
    let fault = match &pair {
        Pair::Native { .. } => {
            let pid: i32 = sqlx::query_scalar("SELECT pid FROM pg_stat_replication WHERE application_name = $1")
                .bind(STANDBY)
                .fetch_one(&p_admin)
                .await?;
            signals::send(signals::Pid::from_raw(pid), signals::Signal::SIGSTOP)?;
            ctx.timeline.record("harness", "sigstop", "walsender", json!({"pid": pid}));
            walsender = Some(pid);
            "the primary's walsender SIGSTOPped"
        }
        Pair::Container { primary, net, .. } => {
            // A real cut: the primary's interface on the replication network goes away, and what
            // its walsender still has in flight is never delivered.
            net.disconnect(&primary.id).await?;
            ctx.timeline.record(
                "harness",
                "network_cut",
                "primary",
                json!({"network": net.name, "container": primary.id}),
            );
            "the primary cut off the replication network (docker network disconnect)"
        }
        Pair::External { hooks, primary_url, .. } => {
            Pair::hook(
                ctx,
                "pause_replication_command",
                &hooks.pause_replication_command,
                primary_url,
                &hooks.standby_url,
            )
            .await?;
            "the contract's pause_replication_command"
        }
    };

    let mut trap = None;
    match mode {
        ReplicationMode::Async => {
            require_ok(&a.request(json!({"cmd": "release"}), STEP).await?, "A release")?;
            require_ok(&b.request(acquire.clone(), STEP).await?, "B takeover")?;
            require_ok(
                &b.request(json!({"cmd": "plan", "step_id": "s2", "tool": "idem", "request": {"n": 2}}), STEP).await?,
                "B plan",
            )?;
            require_ok(&d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000}), STEP).await?, "dispatch")?;
        }
        ReplicationMode::Sync => {
            // The release waits for the synchronous standby, which hears nothing: cancel the wait.
            let id = a.send(json!({"cmd": "release"})).await?;
            let owner = a.owner.clone();
            let pid = wait::until("A's release to wait for the synchronous standby", STEP, || {
                let p = p_admin.clone();
                let owner = owner.clone();
                async move {
                    let pid: Option<i32> = sqlx::query_scalar(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'SyncRep'",
                    )
                    .bind(&owner)
                    .fetch_optional(&p)
                    .await?;
                    Ok(pid)
                }
            })
            .await?;
            ctx.timeline.record("harness", "observed", "database", json!({"waiting_in": "SyncRep", "pid": pid}));
            sqlx::query("SELECT pg_cancel_backend($1)").bind(pid).execute(&p_admin).await?;
            ctx.timeline.record("harness", "cancel_backend", "database", json!({"pid": pid}));
            let answer = a.reply(id, STEP).await?;
            let on_primary = snapshot(&p_pool, run_id).await?;
            trap = Some((
                outcome(&answer).to_string(),
                answer["detail"].as_str().unwrap_or("").to_string(),
                on_primary.owner.is_none(),
            ));
        }
    }
    let acked_state = snapshot(&p_pool, run_id).await?;
    // What was acknowledged as success: in sync mode nothing new (the release was not a success).
    let acked = if mode == ReplicationMode::Sync { before.clone() } else { acked_state.clone() };
    let high_acked = ledger::entries(&tools.ledger)?.iter().filter(|e| e["kind"] == "created").count();

    // Fence the old primary, then promote the standby.
    p_pool.close().await;
    p_admin.close().await;
    let (n_pool, oracle_schema) =
        match &mut pair {
            Pair::Container { primary, standby, .. } => {
                primary.kill().await?;
                ctx.timeline.record("harness", "fence", "old primary", json!({"docker_kill": primary.id}));
                let url = primary.url_for("postgres");
                let gone = wait::until("the fenced primary's container to stop and refuse connections", STEP, || {
                    let url = url.clone();
                    let primary = &primary;
                    async move {
                        use sqlx::Connection;
                        let r = tokio::time::timeout(Duration::from_secs(2), sqlx::PgConnection::connect(&url)).await;
                        Ok((!primary.running().await && !matches!(r, Ok(Ok(_)))).then_some(()))
                    }
                })
                .await
                .is_ok();
                ctx.check(Check::expect(
                    "the fenced old primary is gone: its container stopped, its port refuses connections",
                    gone,
                    format!("container {}", primary.id),
                ));
                standby.promote().await?;
                (databases::pool(&standby.url_for("h"), CONTROL, 2).await?, oracle::DEFAULT_SCHEMA.to_string())
            }
            Pair::Native { primary, standby, .. } => {
                let pgid = primary.pgid();
                primary.fence();
                ctx.timeline.record("harness", "fence", "old primary", json!({"pgid": pgid.map(|p| p.as_raw())}));
                // SIGKILL is delivered asynchronously: wait (bounded) for the whole tree to be gone.
                let ws = walsender;
                let alive = move || {
                    pgid.is_some_and(NativeCluster::tree_alive)
                        || ws
                            .is_some_and(|w| signals::proc_state(signals::Pid::from_raw(w)).is_some_and(|st| st != 'Z'))
                };
                let gone = wait::until("the fenced primary's processes to die", STEP, || async move {
                    Ok((!alive()).then_some(()))
                })
                .await
                .is_ok();
                ctx.check(Check::expect(
                    "the fenced old primary has no process left (its stopped walsender included)",
                    gone,
                    format!("postmaster {pgid:?}, walsender {walsender:?}"),
                ));
                standby.promote().await?;
                (databases::pool(&standby.url_for("h"), CONTROL, 2).await?, oracle::DEFAULT_SCHEMA.to_string())
            }
            Pair::External { hooks, primary_url, schema } => {
                Pair::hook(ctx, "fence_command", &hooks.fence_command, primary_url, &hooks.standby_url).await?;
                let refused = wait::until("the fenced primary to refuse connections", STEP, || {
                    let url = primary_url.clone();
                    async move {
                        use sqlx::Connection;
                        let r = tokio::time::timeout(Duration::from_secs(2), sqlx::PgConnection::connect(&url)).await;
                        Ok((!matches!(r, Ok(Ok(_)))).then_some(()))
                    }
                })
                .await
                .is_ok();
                ctx.check(Check::expect("the fenced old primary refuses connections", refused, primary_url.clone()));
                Pair::hook(ctx, "promote_command", &hooks.promote_command, primary_url, &hooks.standby_url).await?;
                let s = s_pool.clone();
                wait::until("the promoted standby to accept writes", STEP, || {
                    let s = s.clone();
                    async move {
                        let writable: bool = sqlx::query_scalar("SELECT NOT pg_is_in_recovery()").fetch_one(&s).await?;
                        Ok(writable.then_some(()))
                    }
                })
                .await?;
                (databases::pool_in(&hooks.standby_url, schema, CONTROL, 2).await?, ctx.oracle_schema.clone())
            }
        };
    ctx.timeline.record("harness", "promote", "standby", json!({}));
    let stale = b.request(json!({"cmd": "save", "checkpoint": {"after": "fence"}}), STEP).await?;
    ctx.check(Check::expect(
        "a worker still connected to the fenced primary cannot commit",
        outcome(&stale) != "ok",
        format!("its save answered {}", outcome(&stale)),
    ));
    let after = snapshot(&n_pool, run_id).await?;
    let high_after = ledger::entries(&tools.ledger)?.iter().filter(|e| e["kind"] == "created").count();
    let lost = losses(&acked, &after);
    let forks: Vec<String> = acked
        .operations
        .iter()
        .filter(|(op, st)| *st == "succeeded" && after.operations.get(*op).map(String::as_str) != Some("succeeded"))
        .filter(|(op, _)| !ledger::created_for(&ledger::entries(&tools.ledger).unwrap_or_default(), op).is_empty())
        .map(|(op, _)| format!("…{} exists remotely but is not succeeded in the ledger", short(op)))
        .collect();

    // Verdict against the contract.
    match mode {
        ReplicationMode::Async => ctx.check(Check::expect(
            "the fault took effect: the standby missed acknowledged commits",
            !lost.is_empty(),
            format!("lost: {lost:?}"),
        )),
        ReplicationMode::Sync => {
            let (o, detail, released_on_primary) = trap.clone().unwrap_or_default();
            ctx.check(Check::expect(
                "a commit whose synchronous wait was cancelled is reported as outcome unknown, not success",
                o == "outcome_unknown" && detail.contains("replicat"),
                format!("release answered {o}: {detail}"),
            ));
            ctx.check(Check::expect(
                "that commit was local only: on the old primary, not after failover",
                released_on_primary && after.owner.is_some(),
                format!("old primary released: {released_on_primary}; new primary owner {:?}", after.owner),
            ));
        }
    }
    let evidence = if lost.is_empty() {
        "nothing acknowledged was lost".to_string()
    } else {
        format!(
            "lost {}; the deployment replicates {} ({actual})",
            lost.join(", "),
            if ssn_empty { "asynchronously" } else { "synchronously" }
        )
    };
    if claim {
        ctx.check(Check::expect(
            "contract: acknowledged epochs and ledger transitions survive failover",
            lost.is_empty(),
            evidence.clone(),
        ));
    } else {
        ctx.check(Check::pass("contract: loss allowed, and reported", evidence.clone()));
    }
    ctx.check(Check::expect(
        "the tools' high-water never goes back",
        high_after >= high_acked,
        format!("{high_before} before, {high_acked} acknowledged, {high_after} after"),
    ));
    let rows = oracle::commits_in(&n_pool, &oracle_schema).await?;
    std::fs::write(ctx.dir.join("oracle.json"), serde_json::to_string_pretty(&rows).expect("json"))?;
    ctx.checks.extend(invariants::all(&rows, &[CONTROL, cp.owner.as_str()]));

    let record = json!({
        "contract": contract, "actual_settings": actual, "fault": fault, "before": before, "acknowledged": acked, "on_old_primary_at_fence": acked_state,
        "after": after, "lost": lost, "remote_forks": forks, "tools_high_water": {"before": high_before, "acknowledged": high_acked, "after": high_after},
    });
    std::fs::write(ctx.dir.join("failover.json"), serde_json::to_string_pretty(&record).expect("json"))?;
    ctx.note(format!(
        "{}: epoch/rev {}/{} acknowledged, {}/{} after promote; tools high-water {high_acked}→{high_after}; {evidence}{}",
        mode.as_str(),
        acked.epoch,
        acked.revision,
        after.epoch,
        after.revision,
        if forks.is_empty() { String::new() } else { format!("; remote fork: {}", forks.join(", ")) }
    ));

    for w in [&mut a, &mut b, &mut d, &mut cp] {
        w.kill().await?;
    }
    if let Pair::External { schema, .. } = &pair {
        // The experiment's schemas now live on the promoted standby; the old primary is fenced.
        for sch in [schema.clone(), format!("{schema}_o")] {
            if sqlx::query(&format!("DROP SCHEMA IF EXISTS {sch} CASCADE")).execute(&s_pool).await.is_ok() {
                fenceproof_harness::db::external::forget(&sch);
            }
        }
    }
    n_pool.close().await;
    s_pool.close().await;
    if let Pair::Container { primary, standby, .. } = &mut pair {
        // Their logs into the experiment's folder; the network goes when `pair` is dropped.
        primary.stop().await?;
        standby.stop().await?;
    }
    Ok(())
}
