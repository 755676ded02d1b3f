//! The external backend: a database the user already runs. Nothing is created outside it: each
//! experiment gets a dedicated schema for the protocol's tables and one for the oracle, created
//! with the user's role, reached through `search_path`, and dropped when the run ends (also after
//! Ctrl-C). The role must be allowed to create schemas in the database; that is checked up front.

use std::sync::Mutex;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::db::databases::{migrate, MIGRATIONS, ORACLE_SQL};
use crate::error::{HarnessError, Result};

/// Schemas created in external databases and not dropped yet: (url, schema).
static CREATED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Cluster-wide roles this process created in external databases (migration 0002's
/// `fenceproof_worker`, when the role had CREATEROLE and the role did not exist yet): (url, role).
static CREATED_ROLES: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// The role migration 0002 creates when it may.
pub const WORKER_ROLE: &str = "fenceproof_worker";

#[derive(Clone)]
pub struct ExternalDb {
    pub url: String,
    pub version: String,
    pub role: String,
    pub database: String,
}

/// One experiment's schemas in the external database.
pub struct Schemas {
    /// The protocol's tables.
    pub schema: String,
    /// The harness's oracle.
    pub oracle: String,
    /// The URL workers use (search_path = the protocol schema).
    pub worker_url: String,
}

impl ExternalDb {
    /// Connect, and refuse with a clear error when the role cannot create schemas.
    pub async fn connect(url: &str) -> Result<ExternalDb> {
        let normal = with_env_password(&with_host(url), std::env::var("PGPASSWORD").ok().as_deref());
        let url = normal.as_str();
        let scheme = url.split("://").next().unwrap_or_default();
        if !url.contains("://") || !["postgres", "postgresql"].contains(&scheme) {
            return Err(HarnessError::Other(format!(
                "--database-url must be a postgres:// or postgresql:// URL, not '{}'",
                masked(url)
            )));
        }
        let opts: PgConnectOptions =
            url.parse().map_err(|e| HarnessError::Other(format!("bad --database-url: {e}")))?;
        // A closed port or an unknown host says so at once, instead of a pool timing out after 10 s.
        let (host, port) = (opts.get_host().to_string(), opts.get_port());
        if !host.starts_with('/') {
            let addr = format!("{host}:{port}");
            match tokio::time::timeout(std::time::Duration::from_secs(5), tokio::net::TcpStream::connect(&addr)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(HarnessError::Other(format!("cannot connect to --database-url: {addr}: {e}")))
                }
                Err(_) => {
                    return Err(HarnessError::Other(format!(
                        "cannot connect to --database-url: {addr}: no answer within 5 s"
                    )))
                }
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_with(opts.application_name("fenceproof-harness"))
            .await
            .map_err(|e| HarnessError::Other(format!("cannot connect to --database-url: {e}")))?;
        let (version, role, database, can_create): (String, String, String, bool) = sqlx::query_as(
            "SELECT current_setting('server_version'), current_user::text, current_database()::text,
                    has_database_privilege(current_user, current_database(), 'CREATE')",
        )
        .fetch_one(&pool)
        .await?;
        pool.close().await;
        if !can_create {
            return Err(HarnessError::Other(format!(
                "role {role} may not create schemas in database {database}; fenceproof needs a dedicated schema per experiment (GRANT CREATE ON DATABASE {database} TO {role})"
            )));
        }
        let major: u32 = version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
        if major < 15 {
            return Err(HarnessError::Other(format!("PostgreSQL {version} is too old; fenceproof needs 15 or newer")));
        }
        Ok(ExternalDb { url: url.to_string(), version: format!("PostgreSQL {version}"), role, database })
    }

    /// The URL with `search_path` set to `schema`, in libpq's own form (`options=-csearch_path=…`,
    /// percent-encoded), so a worker in any language with any libpq-compatible driver can use it.
    pub fn url_in(&self, schema: &str) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-csearch_path%3D{schema}", self.url)
    }

    /// A pool whose sessions use `search_path` = `path`.
    pub async fn pool_in(&self, path: &str, app: &str, max: u32) -> Result<PgPool> {
        crate::db::databases::pool_in(&self.url, path, app, max).await
    }

    /// Create the schemas of one experiment: the protocol's migrations in `name`, the oracle in
    /// `name_o`.
    pub async fn create(&self, name: &str) -> Result<Schemas> {
        let oracle = format!("{name}_o");
        let admin = self.pool_in("public", "fenceproof-harness", 1).await?;
        // Registered before they exist (dropped `IF EXISTS`): a Ctrl-C that lands between the
        // CREATE's commit and its answer being read still drops them.
        register(&self.url, name);
        register(&self.url, &oracle);
        sqlx::query(&format!("CREATE SCHEMA {name}")).execute(&admin).await?;
        admin.close().await;
        let pool = self.pool_in(name, "fenceproof-harness", 1).await?;
        debug_assert!(!MIGRATIONS.is_empty());
        self.migrate_noting_role(&pool).await?;
        sqlx::raw_sql(&oracle_sql_for(name, &oracle)).execute(&pool).await?;
        // Who made them, so the next run can sweep them if this process is killed (SIGKILL leaves
        // no chance to drop them).
        for s in [name, oracle.as_str()] {
            sqlx::query(&format!("COMMENT ON SCHEMA {s} IS '{}'", owner_tag())).execute(&pool).await?;
        }
        pool.close().await;
        Ok(Schemas { schema: name.to_string(), oracle, worker_url: self.url_in(name) })
    }
}

impl ExternalDb {
    /// Create one schema `name` (tagged, registered to be dropped) with the protocol's migrations
    /// and nothing else (no oracle: `bench` measures the tables as a deployment has them); returns
    /// the URL whose sessions use it.
    pub async fn create_migrated(&self, name: &str) -> Result<String> {
        let admin = self.pool_in("public", "fenceproof-harness", 1).await?;
        register(&self.url, name);
        sqlx::query(&format!("CREATE SCHEMA {name}")).execute(&admin).await?;
        sqlx::query(&format!("COMMENT ON SCHEMA {name} IS '{}'", owner_tag())).execute(&admin).await?;
        admin.close().await;
        let pool = self.pool_in(name, "fenceproof-harness", 1).await?;
        self.migrate_noting_role(&pool).await?;
        pool.close().await;
        Ok(self.url_in(name))
    }

    /// Run the migrations; when they created [`WORKER_ROLE`] (it did not exist, the role may
    /// create roles), tag it and have it dropped at the end of the run. It is registered before the
    /// migrations run, so a Ctrl-C between their commit and the check after them still drops it
    /// (`DROP ROLE IF EXISTS`, which fails harmlessly while another run's schema grants to it).
    async fn migrate_noting_role(&self, pool: &PgPool) -> Result<()> {
        let exists = "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)";
        let before: bool = sqlx::query_scalar(exists).bind(WORKER_ROLE).fetch_one(pool).await?;
        let entry = (self.url.clone(), WORKER_ROLE.to_string());
        if !before {
            CREATED_ROLES.lock().unwrap_or_else(|p| p.into_inner()).push(entry.clone());
        }
        migrate(pool).await?;
        let after: bool = sqlx::query_scalar(exists).bind(WORKER_ROLE).fetch_one(pool).await?;
        if after && !before {
            sqlx::query(&format!("COMMENT ON ROLE {WORKER_ROLE} IS '{}'", owner_tag())).execute(pool).await?;
        } else if !before {
            // The migrations did not create it (the login may not create roles): nothing to drop.
            let mut roles = CREATED_ROLES.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = roles.iter().position(|r| *r == entry) {
                roles.remove(i);
            }
        }
        Ok(())
    }
}

/// The comment that marks a schema as made by this harness process on this host.
fn owner_tag() -> String {
    format!("{OWNER_TAG_PREFIX}{} host={}", std::process::id(), this_host())
}

pub(crate) const OWNER_TAG_PREFIX: &str = "fenceproof harness pid=";

pub(crate) fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

impl ExternalDb {
    /// Drop the schemas of harness runs on this host whose process no longer exists (a run killed
    /// with SIGKILL); returns their names. Schemas of other hosts, or of live runs, are left alone.
    pub async fn sweep_stale(&self) -> Result<Vec<String>> {
        let admin = self.pool_in("public", "fenceproof-harness", 1).await?;
        let tagged: Vec<(String, String)> = sqlx::query_as(
            "SELECT nspname::text, obj_description(oid, 'pg_namespace') FROM pg_namespace
              WHERE obj_description(oid, 'pg_namespace') LIKE $1",
        )
        .bind(format!("{OWNER_TAG_PREFIX}%"))
        .fetch_all(&admin)
        .await?;
        let host = this_host();
        let mut swept = Vec::new();
        for (schema, tag) in tagged {
            let Some((pid, h)) = tag.strip_prefix(OWNER_TAG_PREFIX).and_then(|r| r.split_once(" host=")) else {
                continue;
            };
            let Ok(pid) = pid.parse::<i32>() else { continue };
            let gone =
                matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH));
            if h == host
                && gone
                && sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).execute(&admin).await.is_ok()
            {
                swept.push(schema);
            }
        }
        admin.close().await;
        Ok(swept)
    }
}

/// The oracle's SQL, retargeted from `public` / `fenceproof_oracle` to the given schemas.
pub fn oracle_sql_for(schema: &str, oracle: &str) -> String {
    ORACLE_SQL
        .replace("fenceproof_oracle", oracle)
        .replace("public.", &format!("{schema}."))
        .replace("pg_catalog, public", &format!("pg_catalog, {schema}"))
}

/// A libpq URL whose host part is empty but which names a user (`postgres://app:pw@/db?host=/sock`,
/// which psql accepts) with `localhost` written in, since URL parsers refuse an empty host after a
/// user; the `host` parameter (a socket folder) still decides where it connects. Other URLs as
/// they are.
pub fn with_host(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((user, tail)) if tail.starts_with('/') && !user.contains('/') => {
                format!("{scheme}://{user}@localhost{tail}")
            }
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// `url` with the password from `PGPASSWORD` when it names a user but no password (as libpq
/// reads it), so every connection made from it, the workers' and the tools' too, has it; the
/// password still never goes on a command line (they get it in their environment).
pub fn with_env_password(url: &str, pgpassword: Option<&str>) -> String {
    let (Some(pw), Ok(mut u)) = (pgpassword.filter(|p| !p.is_empty()), url::Url::parse(url)) else {
        return url.to_string();
    };
    if u.password().is_some() || u.username().is_empty() || u.set_password(Some(pw)).is_err() {
        return url.to_string();
    }
    u.to_string()
}

/// `url` with its password replaced by `***` (for logs).
pub fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(parts) => parts,
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// Forget a schema that was dropped some other way (e.g. on a promoted standby after a failover).
pub fn forget(schema: &str) {
    CREATED.lock().unwrap_or_else(|p| p.into_inner()).retain(|(_, s)| s != schema);
}

/// Point what this process will drop at another server: every recorded URL `to` maps (e.g. the
/// old leader's to the new leader's after a switchover of a team's Patroni, whose old leader is
/// read-only now) is replaced. Schemas and roles.
pub fn retarget(to: impl Fn(&str) -> Option<String>) {
    for list in [&CREATED, &CREATED_ROLES] {
        for (url, _) in list.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
            if let Some(new) = to(url) {
                *url = new;
            }
        }
    }
}

fn register(url: &str, schema: &str) {
    CREATED.lock().unwrap_or_else(|p| p.into_inner()).push((url.to_string(), schema.to_string()));
}

/// Drop every schema this process created in external databases (end of run, or after Ctrl-C).
/// Returns how many were dropped and, for those that could not be (a server fenced by experiment
/// H, say), why.
pub async fn drop_created() -> Result<(usize, Vec<String>)> {
    let created: Vec<(String, String)> = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|p| p.into_inner()));
    let mut dropped = 0;
    let mut failed = Vec::new();
    for (url, schema) in &created {
        let attempt = async {
            let opts: PgConnectOptions = url.parse()?;
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(std::time::Duration::from_secs(3))
                .connect_with(opts.application_name("fenceproof-harness"))
                .await?;
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).execute(&pool).await?;
            pool.close().await;
            Ok::<_, HarnessError>(())
        };
        match attempt.await {
            Ok(()) => dropped += 1,
            Err(e) => failed.push(format!("{schema}: {e}")),
        }
    }
    let roles: Vec<(String, String)> = std::mem::take(&mut *CREATED_ROLES.lock().unwrap_or_else(|p| p.into_inner()));
    for (url, role) in &roles {
        // Another run's schema may still grant to it (a run that started while this one had made
        // it): then it stays, and `fenceproof cleanup` removes it once no schema needs it.
        match drop_role(url, role).await {
            Ok(()) => eprintln!("fenceproof: dropped role {role}, which this run created"),
            Err(e) => failed.push(format!("role {role}: {e}")),
        }
    }
    Ok((dropped, failed))
}

/// Drop `role` through a short connection to `url`.
async fn drop_role(url: &str, role: &str) -> Result<()> {
    let opts: PgConnectOptions = url.parse()?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(3))
        .connect_with(opts.application_name("fenceproof-harness"))
        .await?;
    let r = sqlx::query(&format!("DROP ROLE IF EXISTS {role}")).execute(&pool).await;
    pool.close().await;
    r?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_url_with_a_user_gets_a_host_the_parsers_accept() {
        assert_eq!(
            with_host("postgres://app:pw@/appdb?host=/tmp/sock"),
            "postgres://app:pw@localhost/appdb?host=/tmp/sock"
        );
        assert_eq!(with_host("postgres://app@db:5432/appdb"), "postgres://app@db:5432/appdb");
        assert_eq!(with_host("postgres:///appdb?host=/tmp/sock"), "postgres:///appdb?host=/tmp/sock");
        let parsed: std::result::Result<PgConnectOptions, _> =
            with_host("postgres://app:pw@/appdb?host=/tmp/sock").parse();
        assert_eq!(parsed.unwrap().get_socket().map(|p| p.display().to_string()).as_deref(), Some("/tmp/sock"));
    }

    #[test]
    fn passwords_are_masked() {
        assert_eq!(masked("postgres://u:secret@h:5432/db?x=1"), "postgres://u:***@h:5432/db?x=1");
        assert_eq!(masked("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(masked("postgres://h/db"), "postgres://h/db");
        assert_eq!(masked("not a url"), "not a url");
        assert_eq!(with_env_password("postgres://u@h:5432/db", Some("p w")), "postgres://u:p%20w@h:5432/db");
        assert_eq!(with_env_password("postgres://u:mine@h/db", Some("env")), "postgres://u:mine@h/db");
        assert_eq!(with_env_password("postgres://u@h/db", None), "postgres://u@h/db");
        assert_eq!(with_env_password("postgresql:///db?host=/tmp", Some("x")), "postgresql:///db?host=/tmp");
    }

    #[test]
    fn the_oracle_is_retargeted_completely() {
        let sql = oracle_sql_for("fp_x", "fp_x_o");
        assert!(!sql.contains("public."), "{sql}");
        assert!(!sql.contains("fenceproof_oracle"), "{sql}");
        assert!(sql.contains("fp_x.agent_runs") && sql.contains("fp_x_o.commits") && sql.contains("pg_catalog, fp_x"));
    }
}
