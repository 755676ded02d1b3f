//! A database server of an experiment's own whose clock the harness sets (see
//! [`fenceproof_harness::faults::clock`]): frozen at an absolute time, or running with an offset
//! (`+0`, then jumped). Native, or on the container backend a container of the session's image
//! (which must carry libfaketime: `just pg-image`). Migrated like the session's template (and
//! patched with the session's SQL mutant, if any). While it is entered, the experiment's context points at it:
//! workers, dispatchers, barriers and the oracle all use that server. Leaving saves its oracle as
//! the experiment's `oracle.json` and points the context back.

use fenceproof_harness::db::container::ContainerDb;
use fenceproof_harness::db::databases;
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::faults::clock::{ClockFault, ServerClock};
use fenceproof_harness::faults::{self, Injected};
use fenceproof_harness::HarnessError;
use sqlx::PgPool;

use crate::ctx::{Ctx, CONTROL};

/// The experiment's own server: native, or a container of the session's image on the container
/// backend (its image must carry libfaketime: `just pg-image`).
enum ClockServer {
    Native(NativeCluster),
    Container(Box<ContainerDb>),
}

pub struct FrozenServer {
    /// The clock fault, injected for the server's whole life; healed (real time) on leaving.
    pub clock: Injected<ClockFault>,
    server: ClockServer,
    pool: PgPool,
    saved: Option<(PgPool, String, Option<String>, String)>,
}

impl FrozenServer {
    /// Start the server with its clock frozen at `at` (`YYYY-MM-DD hh:mm:ss`) and point `ctx` at a
    /// fresh database on it.
    pub async fn enter(ctx: &mut Ctx, at: &str) -> Result<FrozenServer, HarnessError> {
        let log = ctx.dir.join("postgres-clock.log");
        let (clock, server) = match (&ctx.container_image, ctx.pg_bin.clone()) {
            (Some(image), _) => {
                let env = vec![("FP_FAKETIME".to_string(), at.to_string())];
                let c = ContainerDb::start_with_env(image, &log, Vec::new(), env).await.map_err(|e| {
                    HarnessError::Other(format!(
                        "{}: the clock fault needs libfaketime in the image {image} (fenceproof's own image has it: just pg-image): {e}",
                        ctx.id
                    ))
                })?;
                (ServerClock::in_container(&c.id), ClockServer::Container(Box::new(c)))
            }
            (None, Some(bin)) => {
                let clock = ServerClock::create(&ctx.dir.join("clock"), at)?;
                let n = NativeCluster::start_with_env(bin, &log, Vec::new(), clock.env()).await?;
                (clock, ClockServer::Native(n))
            }
            (None, None) => {
                return Err(HarnessError::Other(format!(
                    "{} starts its own server (the clock fault is that server's): no PostgreSQL binaries here",
                    ctx.id
                )))
            }
        };
        let backend: &dyn fenceproof_harness::db::Backend = match &server {
            ClockServer::Native(n) => n,
            ClockServer::Container(c) => c.as_ref(),
        };
        databases::create_template(backend).await?;
        let url = databases::create_from_template(backend, "clock").await?;
        let pool = databases::pool(&url, CONTROL, 4).await?;
        if let Some(sql) = &ctx.sql_patch {
            sqlx::raw_sql(sql).execute(&pool).await?;
        }
        let now: String = sqlx::query_scalar("SELECT clock_timestamp()::text").fetch_one(&pool).await?;
        let clock = faults::inject(ClockFault::new(&clock, at).reading(&now).on_fresh_server(), &ctx.timeline).await?;
        // An absolute time freezes the clock there; an offset (`+0`, `-1m`) lets it run.
        let offset = at.starts_with('+') || at.starts_with('-');
        if !offset && !now.starts_with(at) {
            return Err(HarnessError::Other(format!(
                "libfaketime did not freeze the server's clock at {at}: it reads {now}"
            )));
        }
        let login = databases::url_as(&url, databases::WORKER_LOGIN)?;
        if ctx.server.is_none() {
            ctx.note("on a local server of the harness's own (libfaketime), not in the team's database");
        }
        let saved = (
            std::mem::replace(&mut ctx.pool, pool.clone()),
            std::mem::replace(&mut ctx.db_url, url),
            ctx.worker_login.replace(login),
            std::mem::replace(&mut ctx.oracle_schema, fenceproof_harness::record::oracle::DEFAULT_SCHEMA.to_string()),
        );
        Ok(FrozenServer { clock, server, pool, saved: Some(saved) })
    }

    /// Move the server's clock to `at` (recorded in the timeline as a change of the clock fault).
    pub fn set(&self, at: &str) -> Result<(), HarnessError> {
        self.clock.move_to(at)
    }

    /// Save this server's oracle as the experiment's, point `ctx` back, stop the server.
    pub async fn leave(mut self, ctx: &mut Ctx) -> Result<(), HarnessError> {
        let rows = fenceproof_harness::record::oracle::commits_in(&self.pool, &ctx.oracle_schema).await;
        if let Some((pool, url, login, schema)) = self.saved.take() {
            (ctx.pool, ctx.db_url, ctx.worker_login, ctx.oracle_schema) = (pool, url, login, schema);
        }
        if let Ok(rows) = &rows {
            std::fs::write(ctx.dir.join("oracle.json"), serde_json::to_string_pretty(rows).expect("json"))?;
        }
        self.pool.close().await;
        self.clock.heal().await?;
        match self.server {
            ClockServer::Container(mut c) => c.stop().await?,
            ClockServer::Native(mut n) => n.stop_async().await,
        }
        Ok(())
    }
}
