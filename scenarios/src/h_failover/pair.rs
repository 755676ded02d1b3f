//! The two servers of experiment H: a primary + streaming standby the harness builds with the
//! session's backend (two native clusters, or two containers on a private Docker network), or the
//! team's own, driven by the contract's `[failover]` hooks. What the story does to them: cut the
//! replication, fence the old primary, promote the standby.

use std::time::Duration;

use fenceproof_harness::contract::{Contract, Failover, ReplicationMode, SynchronousCommit};
use fenceproof_harness::db::container::ContainerDb;
use fenceproof_harness::db::docker::PrivateNetwork;
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::procs::{passfile, signals};
use fenceproof_harness::record::oracle;
use fenceproof_harness::{wait, HarnessError};
use serde_json::json;
use sqlx::PgPool;

use crate::ctx::{Ctx, CONTROL, STEP};

pub(crate) mod patroni;

/// The standby's name (its `application_name` on the primary).
const STANDBY: &str = "standby1";
/// Bound on one failover hook.
const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// The two servers of the experiment: built by the harness (native clusters, or containers on a
/// private network), or the team's own, driven by hooks.
pub(super) enum Pair {
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
    /// A Patroni cluster of the harness's own: Patroni, not the harness, promotes.
    Patroni(Box<patroni::Managed>),
}

/// The pair, and on it: the experiment's URL and pool (primary), a pool to watch the standby
/// replay, an admin pool (primary), and the replication settings the primary actually runs with.
pub(super) struct Servers {
    pub pair: Pair,
    pub url: String,
    pub p_pool: PgPool,
    pub s_pool: PgPool,
    /// The harness's own admin pool on a primary it built; the experiment's pool otherwise.
    pub p_admin: PgPool,
    pub actual: String,
}

/// What fencing the old primary was seen to do.
pub(super) enum Fence {
    /// `docker kill`: whether the container stopped and its port refuses connections.
    Container { gone: bool, id: String },
    /// The whole process tree SIGKILLed: whether every process of it (the stopped walsender
    /// included) is gone.
    Native { gone: bool, pgid: Option<signals::Pid>, walsender: Option<i32> },
    /// The contract's `fence_command`: whether the old primary refuses connections.
    External { refused: bool, url: String },
    /// The Patroni leader crashed: whether every process it had (its Patroni, its postmaster and
    /// children, the stopped walsender included) is gone.
    Crashed { gone: bool, killed: Vec<i32> },
}

/// The replication settings a server runs with, as one line of evidence.
pub(super) async fn settings(pool: &PgPool) -> Result<String, HarnessError> {
    let (ssn, sc): (String, String) =
        sqlx::query_as("SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')")
            .fetch_one(pool)
            .await?;
    Ok(format!("synchronous_standby_names = '{ssn}', synchronous_commit = {sc}"))
}

impl Servers {
    /// The contract's own pair when it has `[failover]` hooks, else a pair the harness builds.
    pub async fn start(ctx: &Ctx, contract: &Contract, mode: ReplicationMode) -> Result<Servers, HarnessError> {
        if let Some(settings) = contract.patroni() {
            return patroni::start(ctx, settings, mode).await;
        }
        match contract.hooks() {
            Some(hooks) => Servers::external(ctx, hooks).await,
            None => Servers::own(ctx, contract, mode).await,
        }
    }

    async fn external(ctx: &Ctx, hooks: Failover) -> Result<Servers, HarnessError> {
        let schema = ctx.oracle_schema.strip_suffix("_o").unwrap_or(&ctx.oracle_schema).to_string();
        let s_pool = databases::pool(&hooks.standby_url, CONTROL, 2).await?;
        let actual = settings(&ctx.pool).await?;
        let primary_url = ctx.db_url.split("?options").next().unwrap_or(&ctx.db_url).to_string();
        Ok(Servers {
            pair: Pair::External { hooks, primary_url, schema },
            url: ctx.db_url.clone(),
            p_pool: ctx.pool.clone(),
            s_pool,
            p_admin: ctx.pool.clone(),
            actual,
        })
    }

    async fn own(ctx: &Ctx, contract: &Contract, mode: ReplicationMode) -> Result<Servers, HarnessError> {
        let commit = contract.replication.as_ref().map_or(SynchronousCommit::On, |r| r.synchronous_commit);
        let settings_c = vec![("synchronous_commit".to_string(), commit.as_str().to_string())];
        let pair = Pair::start(ctx, settings_c, mode).await?;
        let (primary, standby) = pair.servers().expect("a pair the harness built");
        let admin = databases::pool(&primary.url_for("postgres"), "fenceproof-harness", 2).await?;
        wait_standby(&admin, STANDBY, "the standby to stream", "state = 'streaming'").await?;
        if mode == ReplicationMode::Sync {
            sqlx::query(&format!("ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'")).execute(&admin).await?;
            sqlx::query("SELECT pg_reload_conf()").execute(&admin).await?;
            wait_standby(&admin, STANDBY, "the standby to become synchronous", "sync_state = 'sync'").await?;
        }
        let actual = settings(&admin).await?;
        databases::create_template(primary).await?;
        let url = databases::create_from_template(primary, "h").await?;
        let p_pool = databases::pool(&url, CONTROL, 4).await?;
        let s_pool = databases::pool(&standby.url_for("postgres"), CONTROL, 2).await?;
        Ok(Servers { pair, url, p_pool, s_pool, p_admin: admin, actual })
    }
}

/// Wait until the primary (`admin`) shows its standby `name` with `state` (a condition on
/// `pg_stat_replication`).
pub(super) async fn wait_standby(admin: &PgPool, name: &str, what: &str, state: &str) -> Result<(), HarnessError> {
    let sql = format!("SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND {state}");
    wait::until(what, STEP, || {
        let (p, sql) = (admin.clone(), sql.clone());
        async move {
            let n: i64 = sqlx::query_scalar(&sql).bind(name).fetch_one(&p).await?;
            Ok((n == 1).then_some(()))
        }
    })
    .await
}

impl Pair {
    /// Start a primary with the settings `conf` and its standby: containers on the container backend,
    /// native clusters from the machine's binaries.
    async fn start(ctx: &Ctx, conf: Vec<(String, String)>, mode: ReplicationMode) -> Result<Pair, HarnessError> {
        match (&ctx.container_image, ctx.pg_bin.clone()) {
            (Some(image), _) => {
                let primary = ContainerDb::start_with(image, &ctx.dir.join("primary.log"), conf.clone()).await?;
                let net = PrivateNetwork::create("h").await?;
                let standby =
                    ContainerDb::start_standby(&primary, &net, STANDBY, &ctx.dir.join("standby.log"), conf).await?;
                ctx.timeline.record(
                    "harness",
                    "pair_started",
                    "database",
                    json!({"primary": primary.id, "standby": standby.id, "network": net.name, "mode": mode.as_str()}),
                );
                Ok(Pair::Container { primary: Box::new(primary), standby: Box::new(standby), net })
            }
            (None, Some(bin)) => {
                let primary = NativeCluster::start_with(bin, &ctx.dir.join("primary.log"), conf).await?;
                let standby = NativeCluster::start_standby(&primary, STANDBY, &ctx.dir.join("standby.log")).await?;
                ctx.timeline.record(
                    "harness",
                    "pair_started",
                    "database",
                    json!({"primary": primary.port(), "standby": standby.port(), "mode": mode.as_str()}),
                );
                Ok(Pair::Native { primary, standby })
            }
            (None, None) => Err(HarnessError::Other(
                "experiment H builds its own primary + standby and needs local PostgreSQL binaries (--pg-bin) or the container backend".into(),
            )),
        }
    }

    /// The primary and the standby, when the harness built them.
    fn servers(&self) -> Option<(&dyn Backend, &dyn Backend)> {
        match self {
            Pair::Native { primary, standby } => Some((primary, standby)),
            Pair::Container { primary, standby, .. } => Some((primary.as_ref(), standby.as_ref())),
            Pair::External { .. } | Pair::Patroni(_) => None,
        }
    }

    /// The fault: the standby stops receiving WAL. Returns what was done, and the walsender's pid
    /// when it was SIGSTOPped.
    pub async fn cut_replication(
        &self,
        ctx: &Ctx,
        p_admin: &PgPool,
    ) -> Result<(&'static str, Option<i32>), HarnessError> {
        match self {
            Pair::Native { .. } => {
                let pid = stop_walsender(ctx, p_admin, STANDBY).await?;
                Ok(("the primary's walsender SIGSTOPped", Some(pid)))
            }
            Pair::Patroni(m) => {
                let pid = stop_walsender(ctx, p_admin, m.replica_name()).await?;
                Ok(("the Patroni leader's walsender SIGSTOPped", Some(pid)))
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
                Ok(("the primary cut off the replication network (docker network disconnect)", None))
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
                Ok(("the contract's pause_replication_command", None))
            }
        }
    }

    /// Fence the old primary (`docker kill`, a SIGKILL of its process tree, or the contract's
    /// `fence_command`) and see, bounded, that it is gone.
    pub async fn fence(&mut self, ctx: &Ctx, walsender: Option<i32>) -> Result<Fence, HarnessError> {
        match self {
            Pair::Patroni(m) => m.crash_leader(ctx).await,
            Pair::Container { primary, .. } => {
                primary.kill().await?;
                ctx.timeline.record("harness", "fence", "old primary", json!({"docker_kill": primary.id}));
                let url = primary.url_for("postgres");
                let gone = wait::until("the fenced primary's container to stop and refuse connections", STEP, || {
                    let url = url.clone();
                    let primary = &primary;
                    async move {
                        let refused = !connects(&url).await;
                        Ok((!primary.running().await && refused).then_some(()))
                    }
                })
                .await
                .is_ok();
                Ok(Fence::Container { gone, id: primary.id.clone() })
            }
            Pair::Native { primary, .. } => {
                let pgid = primary.pgid();
                primary.fence();
                ctx.timeline.record("harness", "fence", "old primary", json!({"pgid": pgid.map(|p| p.as_raw())}));
                // SIGKILL is delivered asynchronously: wait (bounded) for the whole tree to be gone.
                let alive = move || {
                    pgid.is_some_and(NativeCluster::tree_alive)
                        || walsender
                            .is_some_and(|w| signals::proc_state(signals::Pid::from_raw(w)).is_some_and(|st| st != 'Z'))
                };
                let gone = wait::until("the fenced primary's processes to die", STEP, || async move {
                    Ok((!alive()).then_some(()))
                })
                .await
                .is_ok();
                Ok(Fence::Native { gone, pgid, walsender })
            }
            Pair::External { hooks, primary_url, .. } => {
                Pair::hook(ctx, "fence_command", &hooks.fence_command, primary_url, &hooks.standby_url).await?;
                let refused = wait::until("the fenced primary to refuse connections", STEP, || {
                    let url = primary_url.clone();
                    async move { Ok((!connects(&url).await).then_some(())) }
                })
                .await
                .is_ok();
                Ok(Fence::External { refused, url: primary_url.clone() })
            }
        }
    }

    /// Promote the standby: the pool on the new primary and the schema of its oracle.
    pub async fn promote(&mut self, ctx: &Ctx, s_pool: &PgPool) -> Result<(PgPool, String), HarnessError> {
        match self {
            Pair::Patroni(m) => m.await_promotion(ctx).await,
            Pair::Container { standby, .. } => {
                standby.promote().await?;
                Ok((databases::pool(&standby.url_for("h"), CONTROL, 2).await?, oracle::DEFAULT_SCHEMA.to_string()))
            }
            Pair::Native { standby, .. } => {
                standby.promote().await?;
                Ok((databases::pool(&standby.url_for("h"), CONTROL, 2).await?, oracle::DEFAULT_SCHEMA.to_string()))
            }
            Pair::External { hooks, primary_url, schema } => {
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
                Ok((databases::pool_in(&hooks.standby_url, schema, CONTROL, 2).await?, ctx.oracle_schema.clone()))
            }
        }
    }

    /// After the story on the team's pair: the experiment's schemas now live on the promoted
    /// standby (`s_pool`); the old primary is fenced.
    pub async fn drop_external_schemas(&self, s_pool: &PgPool) {
        if let Pair::External { schema, primary_url, hooks } = self {
            for sch in [schema.clone(), format!("{schema}_o")] {
                if sqlx::query(&format!("DROP SCHEMA IF EXISTS {sch} CASCADE")).execute(s_pool).await.is_ok() {
                    fenceproof_harness::db::external::forget(&sch);
                }
            }
            // What else the run created there (the worker role, replicated before the cut) is
            // dropped at the session's end on the server that now holds it: the promoted standby.
            let standby = hooks.standby_url.clone();
            // The primary's URL exactly, or with its `?options`: a prefix alone would also match
            // another port that begins with this one's digits.
            let primary =
                |u: &str| u == primary_url || u.strip_prefix(primary_url.as_str()).is_some_and(|r| r.starts_with('?'));
            fenceproof_harness::db::external::retarget(|u| primary(u).then(|| standby.clone()));
        }
    }

    /// Stop the harness's servers: containers with their logs into the experiment's folder (the
    /// network goes when the pair is dropped), native clusters without holding the session's thread.
    pub async fn stop_servers(&mut self) -> Result<(), HarnessError> {
        match self {
            Pair::Container { primary, standby, .. } => {
                primary.stop().await?;
                standby.stop().await?;
            }
            // Not left to the drop: a stop there would hold the session's thread (other rows).
            Pair::Native { primary, standby } => {
                standby.stop_async().await;
                primary.stop_async().await;
            }
            _ => {}
        }
        Ok(())
    }

    /// Run one of the contract's hooks with the URLs in its environment, bounded, logged.
    async fn hook(ctx: &Ctx, name: &str, cmd: &str, primary_url: &str, standby_url: &str) -> Result<(), HarnessError> {
        ctx.timeline.record("harness", "hook", name, json!({ "command": cmd }));
        // The URLs without their passwords; the passwords in a 0600 file libpq finds by PGPASSFILE.
        let (pass, urls) = passfile::write(&ctx.dir, "hooks.pgpass", &[primary_url, standby_url])?;
        let child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("FENCEPROOF_PRIMARY_URL", &urls[0])
            .env("FENCEPROOF_STANDBY_URL", &urls[1])
            .env("PGPASSFILE", &pass.path)
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

/// SIGSTOP the walsender that serves the standby `name` on the primary (`p_admin`): the standby
/// hears nothing more, while the primary goes on acknowledging (async). Returns its pid.
async fn stop_walsender(ctx: &Ctx, p_admin: &PgPool, name: &str) -> Result<i32, HarnessError> {
    let pid: i32 = sqlx::query_scalar("SELECT pid FROM pg_stat_replication WHERE application_name = $1")
        .bind(name)
        .fetch_one(p_admin)
        .await?;
    signals::send(signals::Pid::from_raw(pid), signals::Signal::SIGSTOP)?;
    ctx.timeline.record("harness", "sigstop", "walsender", json!({"pid": pid, "standby": name}));
    Ok(pid)
}

/// Whether a connection to `url` succeeds within 2 s.
async fn connects(url: &str) -> bool {
    use sqlx::Connection;
    let r = tokio::time::timeout(Duration::from_secs(2), sqlx::PgConnection::connect(url)).await;
    matches!(r, Ok(Ok(_)))
}
