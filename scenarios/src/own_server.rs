//! A database server of a row's own, migrated like the session's template (and patched with the
//! session's SQL mutant, if any): native, or a container of the session's image on the container
//! backend. While it is entered, the row's context points at it (workers, barriers, the oracle and
//! the server faults all use it), so a row that freezes its server stops nothing of the rows
//! beside it. Leaving hands its commits to the runner (saved and judged as the row's oracle) and
//! points the context back.

use fenceproof_harness::db::container::ContainerDb;
use fenceproof_harness::db::databases;
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::faults::ServerTarget;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use sqlx::PgPool;

use crate::ctx::{Ctx, CONTROL};

enum Kind {
    Native(NativeCluster),
    Container(Box<ContainerDb>),
}

/// What the context pointed at before: pool, URL, worker login, oracle schema, server.
type Saved = (PgPool, String, Option<String>, String, Option<ServerTarget>);

pub struct OwnServer {
    server: Kind,
    pool: PgPool,
    saved: Option<Saved>,
}

impl OwnServer {
    /// Start the server and point `ctx` at a fresh database on it.
    pub async fn enter(ctx: &mut Ctx) -> Result<OwnServer, HarnessError> {
        let log = ctx.dir.join("postgres-own.log");
        let (server, target) = match (&ctx.container_image, ctx.pg_bin.clone()) {
            (Some(image), _) => {
                let c = ContainerDb::start(image, &log).await?;
                let id = c.id.clone();
                (Kind::Container(Box::new(c)), Some(ServerTarget::Container(id)))
            }
            (None, Some(bin)) => {
                let n = NativeCluster::start(bin, &log).await?;
                let pid = n.pid().map(ServerTarget::Native);
                (Kind::Native(n), pid)
            }
            (None, None) => {
                return Err(HarnessError::Other(format!(
                    "{} starts a server of its own: no PostgreSQL binaries here",
                    ctx.id
                )))
            }
        };
        let backend: &dyn fenceproof_harness::db::Backend = match &server {
            Kind::Native(n) => n,
            Kind::Container(c) => c.as_ref(),
        };
        databases::create_template(backend).await?;
        let url = databases::create_from_template(backend, "own").await?;
        let pool = databases::pool(&url, CONTROL, 4).await?;
        if let Some(sql) = &ctx.sql_patch {
            sqlx::raw_sql(sql).execute(&pool).await?;
        }
        let login = databases::url_as(&url, databases::WORKER_LOGIN)?;
        let saved = (
            std::mem::replace(&mut ctx.pool, pool.clone()),
            std::mem::replace(&mut ctx.db_url, url),
            ctx.worker_login.replace(login),
            std::mem::replace(&mut ctx.oracle_schema, oracle::DEFAULT_SCHEMA.to_string()),
            std::mem::replace(&mut ctx.server, target),
        );
        Ok(OwnServer { server, pool, saved: Some(saved) })
    }

    /// Hand this server's commits to the runner as the row's, point `ctx` back, stop the server.
    pub async fn leave(mut self, ctx: &mut Ctx) -> Result<(), HarnessError> {
        let rows = oracle::commits_in(&self.pool, &ctx.oracle_schema).await;
        if let Some((pool, url, login, schema, server)) = self.saved.take() {
            (ctx.pool, ctx.db_url, ctx.worker_login, ctx.oracle_schema, ctx.server) =
                (pool, url, login, schema, server);
        }
        ctx.own_commits = Some(rows?);
        self.pool.close().await;
        match self.server {
            Kind::Container(mut c) => c.stop().await?,
            Kind::Native(mut n) => n.stop_async().await,
        }
        Ok(())
    }
}
