//! `fenceproof writers`: the privilege audit of a database (spec §12, §13). Who can write the
//! protocol's tables around the fenced path (PUBLIC, roles by grant, by column or through
//! membership), which SECURITY DEFINER functions lack a fixed search_path or search pg_temp first,
//! which PUBLIC may execute, who may CREATE in the schema, and which default privileges will grant
//! more later; one `FINDING` line each ([`privileges`] names the rules). Read-only. It audits
//! `--database-url` as it is, or a throwaway cluster migrated with fenceproof's migrations or a
//! contract's `[database] migrations` (the team's schema). Exit 0 without a finding, 1 with one, 2
//! for bad input (a team schema missing a protocol column too), 3 when the database cannot be read,
//! 130 when interrupted (the throwaway cluster is stopped).

use std::path::PathBuf;

use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::privileges::{self, Audit, Scope};
use fenceproof_harness::db::{databases, team_schema, writers, Backend};
use fenceproof_harness::report::exit;
use fenceproof_harness::HarnessError;

/// Audit who can write the protocol's tables around the fenced path, and the functions, schema
/// and default privileges that open it (read-only; exit 1 on a finding).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database to audit, as it is. Without it: a throwaway cluster, migrated with
    /// fenceproof's migrations (or the --contract's), audited and stopped.
    #[arg(long)]
    database_url: Option<String>,
    /// The schema holding the protocol's tables (default: the connection's current schema).
    #[arg(long)]
    schema: Option<String>,
    /// A role meant to write on its own statements (the direct path): it, and its members, may hold
    /// the direct path's table privileges (docs/worker-protocol.md) and nothing more. Repeatable.
    #[arg(long = "direct-writer", value_name = "ROLE")]
    direct_writers: Vec<String>,
    /// A deployment contract: its `[database] migrations` (the team's schema) are what the
    /// throwaway cluster audits.
    #[arg(long, conflicts_with = "database_url")]
    contract: Option<PathBuf>,
    /// On the throwaway cluster, the grants of this write path: `direct` adds the direct path's
    /// (role fenceproof_direct_writer, then a direct writer), as `verify --write-path direct` does.
    #[arg(long, value_parser = ["api", "direct"], default_value = "api", conflicts_with = "database_url")]
    write_path: String,
    /// Folder with the PostgreSQL server binaries of the throwaway cluster (initdb, postgres).
    #[arg(long, conflicts_with = "database_url")]
    pg_bin: Option<PathBuf>,
    #[command(flatten)]
    out: crate::cmd::output::Output,
}

/// What the audit saw: the roles that can write whole tables (owner and superusers marked) and
/// the findings.
#[derive(serde::Serialize)]
struct Report {
    schema: String,
    writers: Vec<writers::DirectWriter>,
    findings: Vec<privileges::Finding>,
}

pub async fn run(a: Args) -> u8 {
    let print = a.out.print();
    if let Err(msg) = crate::cmd::input::check(None, a.database_url.as_deref()) {
        return crate::fail::usage(msg);
    }
    let team = match crate::server::load_contract(a.contract.as_deref()) {
        Ok(c) => c.map(|c| c.database.migrations).unwrap_or_default(),
        Err(code) => return code,
    };
    let mut scope = Scope { schema: a.schema.clone(), direct_writers: a.direct_writers.clone() };
    if a.write_path == "direct" {
        scope.direct_writers.push("fenceproof_direct_writer".into());
    }
    let work = async {
        let found = match &a.database_url {
            Some(url) => on_database(url, &scope).await,
            None => on_throwaway(&a, &team, &scope).await,
        };
        match found {
            Ok(r) => show(&r, print),
            Err(e) => crate::fail::harness_error(&e),
        }
    };
    crate::interrupt::interruptible(work).await
}

/// Print the report; the exit code is 1 when there is a finding.
fn show(r: &Report, print: crate::cmd::Print) -> u8 {
    if print.json {
        outln!("{}", serde_json::to_string_pretty(r).expect("json"));
    } else {
        out!("{}", print.text(&text(r)));
    }
    if r.findings.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// Audit the database at `url` as it is.
async fn on_database(url: &str, scope: &Scope) -> Result<Report, HarnessError> {
    let pool = databases::pool(url, "fenceproof-writers", 1).await.map_err(|e| {
        let shown = fenceproof_harness::db::external::masked(url);
        HarnessError::Other(format!("cannot connect to {shown}: {e}"))
    })?;
    let r = inspect(&pool, scope).await;
    pool.close().await;
    r
}

/// Audit a throwaway cluster's template, migrated as `verify` migrates it (fenceproof's migrations
/// or the team's, the oracle, the worker login, and the direct path's grants when asked).
async fn on_throwaway(a: &Args, team: &[PathBuf], scope: &Scope) -> Result<Report, HarnessError> {
    team_schema::choose(team)?;
    databases::grant_direct_path(a.write_path == "direct");
    let bin = PgBin::locate(a.pg_bin.as_deref())?;
    let dir = std::env::temp_dir().join(format!("fenceproof-writers-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let r = async {
        let cluster = NativeCluster::start(bin, &dir.join("postgres.log")).await?;
        databases::create_template(&cluster).await?;
        let pool = databases::pool(&cluster.url_for(databases::TEMPLATE), "fenceproof-writers", 1).await?;
        let r = inspect(&pool, scope).await;
        pool.close().await;
        r
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    r
}

async fn inspect(pool: &sqlx::PgPool, scope: &Scope) -> Result<Report, HarnessError> {
    let Audit { schema, findings } = privileges::audit(pool, scope).await?;
    let writers = writers::direct_writers(pool, Some(&schema)).await?;
    Ok(Report { schema, writers, findings })
}

/// The writers as a table, one line per finding, and the closing line.
fn text(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let w = r.writers.iter().map(|r| r.role.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(s, "{:<w$}  {:<5}  {:<22}  table write privileges", "role", "login", "why it may");
    for wr in &r.writers {
        let why = match (wr.superuser, wr.owner) {
            (true, _) => "superuser",
            (_, true) => "owns the tables",
            _ => "GRANTED: bypasses fencing",
        };
        let login = if wr.can_login { "yes" } else { "no" };
        let _ = writeln!(s, "{:<w$}  {login:<5}  {why:<22}  {}", wr.role, wr.grants.join(", "));
    }
    for f in &r.findings {
        let _ = writeln!(s, "{}", f.line());
    }
    if r.findings.is_empty() {
        let _ = writeln!(
            s,
            "no finding in schema {}: only the tables' owner and superusers can write the protocol's tables directly; every SECURITY DEFINER function has a fixed search_path ending in pg_temp and none is PUBLIC's",
            r.schema
        );
    } else {
        let _ =
            writeln!(s, "{} finding(s) in schema {}: the fenced path can be gone around", r.findings.len(), r.schema);
    }
    s
}
