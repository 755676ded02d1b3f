//! Databases inside a server: the migrated template (protocol schema + the harness's oracle) and a
//! fresh clone of it per experiment.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::db::Backend;
use crate::error::Result;

/// The protocol's migrations, in order (the `migrations/` folder of the workspace).
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_protocol_schema", include_str!("../../../migrations/0001_protocol_schema.sql")),
    ("0002_worker_role", include_str!("../../../migrations/0002_worker_role.sql")),
    ("0003_claim_index", include_str!("../../../migrations/0003_claim_index.sql")),
];

/// The login the reference worker uses in throwaway clusters: a member of `fenceproof_worker`
/// (migration 0002), so it can read the tables and call the fenced fp_* functions, nothing else.
pub const WORKER_LOGIN: &str = "fenceproof_worker_login";

/// The login a worker on its own statements uses in throwaway clusters (`verify --write-path
/// direct`): a member of `fenceproof_direct_writer`, which holds exactly the table privileges of
/// [`DIRECT_WRITER_SQL`] (docs/worker-protocol.md lists them).
pub const DIRECT_LOGIN: &str = "fenceproof_direct_login";

/// Whether this process's templates grant the direct path's privileges (`verify --write-path
/// direct`); off, no role but the owner can write the tables (the fp_* path's boundary).
static DIRECT_PATH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Grant the direct path's privileges (and create its login) in the templates made from now on.
pub fn grant_direct_path(on: bool) {
    DIRECT_PATH.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// The direct path's table privileges, granted to the role `fenceproof_direct_writer`.
pub const DIRECT_WRITER_SQL: &str = include_str!("../../sql/direct_writer.sql");

/// Its password (and the direct login's), for servers that authenticate TCP connections (a container); throwaway servers
/// only, never a team's database.
pub const WORKER_PASSWORD: &str = "fenceproof-worker";

/// The oracle the harness installs beside the schema: audit triggers the code under test never owns.
pub const ORACLE_SQL: &str = include_str!("../../sql/oracle.sql");

pub const TEMPLATE: &str = "fenceproof_template";

/// Promote a standby (`pg_promote`, waiting up to 30 s) so it accepts writes.
pub async fn promote(server: &dyn Backend) -> Result<()> {
    let pool = pool(&server.url_for("postgres"), "fenceproof-harness", 1).await?;
    let promoted: bool = sqlx::query_scalar("SELECT pg_promote(true, 30)").fetch_one(&pool).await?;
    pool.close().await;
    if promoted {
        Ok(())
    } else {
        Err(crate::error::HarnessError::ServerStart("pg_promote did not finish within 30 s".into()))
    }
}

/// Connect a small pool to `url` with `application_name` set.
pub async fn pool(url: &str, app: &str, max: u32) -> Result<PgPool> {
    let opts: PgConnectOptions = url.parse()?;
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(opts.application_name(app))
        .await?)
}

/// Connect a small pool to `url` whose sessions use `search_path` = `path`.
pub async fn pool_in(url: &str, path: &str, app: &str, max: u32) -> Result<PgPool> {
    let opts: PgConnectOptions = url.parse()?;
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(opts.options([("search_path", path)]).application_name(app))
        .await?)
}

/// Apply the protocol's migrations to the database behind `pool`.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    for (_name, sql) in MIGRATIONS {
        sqlx::raw_sql(sql).execute(pool).await?;
    }
    Ok(())
}

/// Create the template database: migrations (fenceproof's, or the team's of
/// [`crate::db::team_schema`]), then the oracle.
pub async fn create_template(backend: &dyn Backend) -> Result<()> {
    let admin = pool(&backend.url_for("postgres"), "fenceproof-harness", 1).await?;
    sqlx::query(&format!("CREATE DATABASE {TEMPLATE}")).execute(&admin).await?;
    admin.close().await;
    let tpl = pool(&backend.url_for(TEMPLATE), "fenceproof-harness", 1).await?;
    match crate::db::team_schema::chosen() {
        Some(team) => crate::db::team_schema::apply(&tpl, &team).await?,
        None => migrate(&tpl).await?,
    }
    sqlx::raw_sql(ORACLE_SQL).execute(&tpl).await?;
    create_worker_login(&tpl).await?;
    if DIRECT_PATH.load(std::sync::atomic::Ordering::SeqCst) {
        create_direct_login(&tpl).await?;
    }
    tpl.close().await;
    Ok(())
}

/// Create the worker's login role (cluster-wide) if it does not exist yet.
pub async fn create_worker_login(pool: &PgPool) -> Result<()> {
    create_login(pool, WORKER_LOGIN, "fenceproof_worker").await
}

/// Grant the direct path's table privileges ([`DIRECT_WRITER_SQL`]) in the database behind `pool`
/// and create the direct login (cluster-wide) if it does not exist yet.
pub async fn create_direct_login(pool: &PgPool) -> Result<()> {
    sqlx::raw_sql(DIRECT_WRITER_SQL).execute(pool).await?;
    create_login(pool, DIRECT_LOGIN, "fenceproof_direct_writer").await
}

async fn create_login(pool: &PgPool, login: &str, role: &str) -> Result<()> {
    sqlx::raw_sql(&format!(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}') THEN
             CREATE ROLE {login} LOGIN PASSWORD '{WORKER_PASSWORD}' IN ROLE {role};
           END IF;
         END $$"
    ))
    .execute(pool)
    .await?;
    Ok(())
}

/// The same URL as the worker login (user and password replaced).
pub fn url_as(url: &str, user: &str) -> Result<String> {
    let mut u = url::Url::parse(url).map_err(|e| crate::HarnessError::Other(format!("bad database URL: {e}")))?;
    u.set_username(user).map_err(|_| crate::HarnessError::Other("database URL cannot carry a user".into()))?;
    u.set_password(Some(WORKER_PASSWORD))
        .map_err(|_| crate::HarnessError::Other("database URL cannot carry a password".into()))?;
    Ok(u.to_string())
}

/// Clone a fresh database `name` from the template; returns its URL.
pub async fn create_from_template(backend: &dyn Backend, name: &str) -> Result<String> {
    create_from_template_at(&backend.url_for("postgres"), name).await?;
    Ok(backend.url_for(name))
}

/// [`create_from_template`] through the server's `postgres` database at `admin_url` (owned data, for
/// a future that must not borrow the backend).
pub async fn create_from_template_at(admin_url: &str, name: &str) -> Result<()> {
    let admin = pool(admin_url, "fenceproof-harness", 1).await?;
    sqlx::query(&format!("CREATE DATABASE \"{name}\" TEMPLATE {TEMPLATE}")).execute(&admin).await?;
    admin.close().await;
    Ok(())
}
