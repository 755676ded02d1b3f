//! The server a bench measures and how it is reached: the facts the sizing answer names (version,
//! the settings that decide a commit's cost, replicas, connection limit, where it is) and the round
//! trip from the load host; and, for `--database-url`, the run's own schema in the team's database.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fenceproof_harness::db::external::{self, ExternalDb};
use fenceproof_harness::HarnessError;
use serde::Serialize;
use sqlx::PgPool;

/// What the sizing answer says about the server it sized.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ServerFacts {
    /// Where it is: `host:port/database` (password never kept), or the bench's own cluster.
    pub name: String,
    pub version: String,
    pub synchronous_commit: String,
    pub fsync: String,
    pub max_connections: String,
    /// Standbys streaming from it, as far as the role may see `pg_stat_replication`; `None` when
    /// it may not read the view.
    pub replicas: Option<i64>,
    /// Synchronous standbys named by `synchronous_standby_names` (empty: none).
    pub synchronous_standby_names: String,
    /// `SELECT 1` round trips from the load host: median and p99, in milliseconds.
    pub round_trip_p50_ms: f64,
    pub round_trip_p99_ms: f64,
    /// A team's database (`--database-url`), not a throwaway cluster.
    pub external: bool,
}

impl ServerFacts {
    /// One line for the sizing answer.
    pub fn line(&self) -> String {
        let replicas = match self.replicas {
            Some(n) => n.to_string(),
            None => "not visible to this role".into(),
        };
        let sync_names = if self.synchronous_standby_names.is_empty() {
            String::new()
        } else {
            format!(", synchronous_standby_names={}", self.synchronous_standby_names)
        };
        format!(
            "Server: {} ({}; synchronous_commit={}, fsync={}, replicas={replicas}{sync_names}, max_connections={}); \
             round trip from this load host p50 {:.2} ms, p99 {:.2} ms.",
            self.name,
            self.version,
            self.synchronous_commit,
            self.fsync,
            self.max_connections,
            self.round_trip_p50_ms,
            self.round_trip_p99_ms
        )
    }
}

/// Round trips measured for the server facts.
const PINGS: usize = 200;

/// Read the facts from the server behind `admin` (settings, replicas) and time [`PINGS`] round
/// trips on one connection.
pub async fn facts(admin: &PgPool, name: &str, external: bool) -> Result<ServerFacts, HarnessError> {
    let settings: BTreeMap<String, String> = sqlx::query_as::<_, (String, String)>(
        "SELECT name, setting FROM pg_settings WHERE name IN
           ('server_version', 'synchronous_commit', 'fsync', 'max_connections', 'synchronous_standby_names')",
    )
    .fetch_all(admin)
    .await?
    .into_iter()
    .collect();
    let replicas: Option<i64> =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_replication").fetch_one(admin).await.ok();
    let mut conn = admin.acquire().await?;
    let mut rt = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let t = Instant::now();
        sqlx::query("SELECT 1").execute(&mut *conn).await?;
        rt.push(t.elapsed());
    }
    rt.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let get = |k: &str| settings.get(k).cloned().unwrap_or_default();
    Ok(ServerFacts {
        name: name.to_string(),
        version: format!("PostgreSQL {}", get("server_version")),
        synchronous_commit: get("synchronous_commit"),
        fsync: get("fsync"),
        max_connections: get("max_connections"),
        replicas,
        synchronous_standby_names: get("synchronous_standby_names"),
        round_trip_p50_ms: ms(rt[PINGS / 2]),
        round_trip_p99_ms: ms(rt[PINGS * 99 / 100]),
        external,
    })
}

/// `host:port/database` of a URL, with nothing secret in it.
pub fn display_name(url: &str) -> String {
    let parsed: Result<sqlx::postgres::PgConnectOptions, _> = external::with_host(url).parse();
    match parsed {
        Ok(o) => {
            let db = o.get_database().unwrap_or_default().to_string();
            match o.get_socket() {
                Some(dir) => format!("socket {}/.s.PGSQL.{} db {db}", dir.display(), o.get_port()),
                None => format!("{}:{}/{db}", o.get_host(), o.get_port()),
            }
        }
        Err(_) => external::masked(url),
    }
}

/// The run's schema in a team's database: its name and the URL whose sessions use it.
pub struct OwnSchema {
    pub db: ExternalDb,
    pub schema: String,
    pub url: String,
}

/// Connect to the team's database, sweep what killed bench or verify runs of this host left, and
/// create the run's own migrated schema (registered: dropped at the end and after Ctrl-C).
pub async fn own_schema(url: &str, run_id: &str) -> Result<OwnSchema, HarnessError> {
    let db = ExternalDb::connect(url).await?;
    let swept = db.sweep_stale().await?;
    if !swept.is_empty() {
        eprintln!(
            "fenceproof: dropped {} schema(s) left in the database by runs that no longer exist: {}",
            swept.len(),
            swept.join(", ")
        );
    }
    let suffix: String = run_id.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_lowercase();
    let schema = format!("fp_bench_{suffix}");
    let url = db.create_migrated(&schema).await?;
    Ok(OwnSchema { db, schema, url })
}
