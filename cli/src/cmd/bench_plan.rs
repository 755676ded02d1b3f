//! `bench plan DIR` and `bench merge DIR...`: load from several hosts with plain pgbench, and one
//! report from their logs.

use std::path::PathBuf;

use fenceproof_bench::plan::PlanSpec;
use fenceproof_harness::report::exit;

use crate::cmd::output::Output;
use crate::fail::usage;

/// The subcommands of `bench`.
#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    Plan(PlanArgs),
    Merge(MergeArgs),
}

/// Write everything the load hosts need into DIR: setup.sql and teardown.sql (run once with psql),
/// and per host a folder with the pgbench script, its variables, the lease owners the host owns,
/// its offered rate and run.sh (plain pgbench; no fenceproof on the load hosts).
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The folder to write (created; must not hold a plan yet).
    dir: PathBuf,
    /// Load hosts.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    hosts: u32,
    /// pgbench clients per host, each one lease owner.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    clients: u32,
    /// A deployment contract: its [lease] heartbeat and renewal timeout and [load] active_runs.
    #[arg(long)]
    contract: Option<PathBuf>,
    /// Active runs to size for (overrides the contract's).
    #[arg(long)]
    runs: Option<u64>,
    /// Heartbeat in milliseconds to size for (overrides the contract's).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Leases per renewal statement.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10000))]
    renew_batch: u64,
    /// Seconds each host runs.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    duration: u64,
    /// Ceiling on the statements per second one host offers.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_rate: Option<u32>,
    /// The database, only to name it in the report and the README (its password is never written).
    #[arg(long)]
    database_url: Option<String>,
}

/// Join the host folders of one `bench plan` (each with its pgbench logs) into one report with one
/// sizing answer.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// The host folders (`host-1`, `host-2`, ... as the hosts sent them back).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// The database the hosts loaded: its settings (version, synchronous_commit, fsync, replicas,
    /// max_connections) and this host's round trip go into the sizing answer (read-only).
    #[arg(long)]
    database_url: Option<String>,
}

/// `out`: `bench`'s output flags, which its subcommands share.
pub async fn run(sub: Sub, out: Output) -> u8 {
    match sub {
        Sub::Plan(a) => plan(a, out),
        Sub::Merge(a) => merge(a, out).await,
    }
}

fn plan(a: PlanArgs, out: Output) -> u8 {
    if a.dir.join("plan.json").exists() {
        return usage(format!("{} already holds a plan", a.dir.display()));
    }
    let contract = match crate::server::load_contract(a.contract.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let lease = contract.as_ref().map(|c| c.lease.clone()).unwrap_or_default();
    let spec = PlanSpec {
        hosts: a.hosts as usize,
        clients: a.clients as usize,
        active_runs: a.runs.or(contract.as_ref().map(|c| c.load.active_runs)).unwrap_or(30_000).max(1),
        heartbeat_ms: a.heartbeat_ms.unwrap_or(lease.heartbeat_ms as u64).max(1),
        renewal_timeout_ms: lease.renewal_timeout_ms as u64,
        batch: a.renew_batch,
        duration_s: a.duration,
        max_rate: a.max_rate.map(f64::from),
        schema: format!("fp_plan_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
        server: a.database_url.as_deref().map_or("(not named)".into(), fenceproof_bench::server::display_name),
    };
    match fenceproof_bench::plan::write(&spec, &a.dir) {
        Ok(()) if out.json => {
            let v = serde_json::json!({"report": a.dir, "hosts": spec.hosts, "schema": spec.schema});
            outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
            exit::OK
        }
        Ok(()) => {
            let (hosts, dir, schema) = (spec.hosts, a.dir.display(), &spec.schema);
            outln!("plan for {hosts} hosts written to {dir} (schema {schema}): see its README.md");
            exit::OK
        }
        Err(e) => crate::fail::harness_failed(format!("cannot write the plan into {}: {e}", a.dir.display())),
    }
}

/// The server facts of `url`, read-only, as the sizing answer names them.
async fn server_line(url: &str) -> Result<(String, String), String> {
    let name = fenceproof_bench::server::display_name(url);
    let pool = fenceproof_harness::db::databases::pool(
        &fenceproof_harness::db::external::with_host(url),
        "fenceproof-bench",
        1,
    )
    .await
    .map_err(|e| format!("cannot connect to --database-url: {e}"))?;
    let facts = fenceproof_bench::server::facts(&pool, &name, true).await.map_err(|e| e.to_string());
    pool.close().await;
    Ok((name, facts?.line()))
}

async fn merge(a: MergeArgs, out: Output) -> u8 {
    let mut merged = fenceproof_bench::merge::merge(&a.dirs);
    if let (Ok(m), Some(url)) = (merged.as_mut(), a.database_url.as_deref()) {
        match server_line(url).await {
            Ok((name, line)) => m.with_server(&name, &line),
            Err(e) => return crate::fail::harness_failed(e),
        }
    }
    match merged {
        Ok(m) if out.json => {
            outln!("{}", serde_json::to_string_pretty(&m).expect("json"));
            exit::OK
        }
        Ok(m) => {
            let text = fenceproof_bench::merge::summary(&m);
            out!("{}", if out.quiet { crate::cmd::quiet_text(&text) } else { text });
            exit::OK
        }
        Err(e) => usage(e),
    }
}
