//! Databases inside a server: the migrated template (protocol schema + the harness's oracle) and a
//! fresh clone of it per experiment.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::db::Backend;
use crate::error::Result;

/// The protocol's migrations, in order (the `migrations/` folder of the workspace).
pub const MIGRATIONS: &[(&str, &str)] =
    &[("0001_protocol_schema", include_str!("../../../migrations/0001_protocol_schema.sql"))];

/// The oracle the harness installs beside the schema: audit triggers the code under test never owns.
pub const ORACLE_SQL: &str = include_str!("../../sql/oracle.sql");

pub const TEMPLATE: &str = "fenceproof_template";

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

/// Create the template database: migrations, then the oracle.
pub async fn create_template(backend: &dyn Backend) -> Result<()> {
    let admin = pool(&backend.url_for("postgres"), "fenceproof-harness", 1).await?;
    sqlx::query(&format!("CREATE DATABASE {TEMPLATE}")).execute(&admin).await?;
    admin.close().await;
    let tpl = pool(&backend.url_for(TEMPLATE), "fenceproof-harness", 1).await?;
    migrate(&tpl).await?;
    sqlx::raw_sql(ORACLE_SQL).execute(&tpl).await?;
    tpl.close().await;
    Ok(())
}

/// Clone a fresh database `name` from the template; returns its URL.
pub async fn create_from_template(backend: &dyn Backend, name: &str) -> Result<String> {
    let admin = pool(&backend.url_for("postgres"), "fenceproof-harness", 1).await?;
    sqlx::query(&format!("CREATE DATABASE \"{name}\" TEMPLATE {TEMPLATE}")).execute(&admin).await?;
    admin.close().await;
    Ok(backend.url_for(name))
}
