//! The server and backend arguments every running command shares, and the one place they (with a
//! command's worker, contract and database URL) become the runner's [`VerifyOptions`].

use std::path::PathBuf;
use std::sync::Arc;

use fenceproof_harness::contract::{BackendKind, Contract};
use fenceproof_scenarios::runner::{self, BackendChoice, VerifyOptions};

/// Where the server binaries are and where run folders go (shared by the commands that run).
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// Folder with the PostgreSQL server binaries (initdb, postgres).
    #[arg(long)]
    pub pg_bin: Option<PathBuf>,
    /// Where run folders are written.
    #[arg(long, default_value = "reports")]
    pub reports_dir: PathBuf,
    /// Which server to start: native binaries, a Docker container, or auto (native when binaries
    /// are found, else Docker when a daemon answers). Default: the contract's, else auto.
    #[arg(long, value_parser = ["auto", "native", "container"])]
    pub backend: Option<String>,
    /// The image of the container backend (offline: `just pg-image` builds fenceproof/postgres:15).
    /// Default: the contract's `[database] image`, else postgres:15.
    #[arg(long)]
    pub pg_image: Option<String>,
}

/// `--jobs` of the commands that run experiment rows (each command that has another kind of
/// parallelism describes its own `--jobs`).
#[derive(clap::Args, Debug, Clone)]
pub struct RowJobs {
    /// How many experiment rows run side by side, each on its own database (default: four per
    /// core, at most 8; 1 against --database-url). Rows that freeze the server or measure timing
    /// run alone.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: Option<u32>,
}

/// What a command tests beyond the server: a deployment contract (and where it was read from)
/// and the user's database. `Default` for the commands that have neither.
#[derive(Default)]
pub struct Deployment {
    pub contract: Option<Arc<Contract>>,
    pub contract_path: Option<PathBuf>,
    pub database_url: Option<String>,
}

impl ServerArgs {
    /// The native backend with no `--pg-bin`, run folders in `reports_dir`: for `verify-versions`,
    /// which finds its servers itself.
    pub fn native(reports_dir: PathBuf) -> Self {
        ServerArgs { pg_bin: None, reports_dir, backend: Some("native".into()), pg_image: None }
    }

    /// A `--reports-dir` that cannot be made or written is bad input: one line, the usage code.
    pub fn check(&self) -> Result<(), u8> {
        crate::cmd::input::reports_dir(&self.reports_dir).map_err(crate::fail::usage)
    }

    /// The runner's options: these flags, the worker to run, the deployment (whose contract gives
    /// the backend and image when the flags do not) and the command's `--jobs`.
    pub fn options(self, worker_bin: PathBuf, deployment: Deployment, jobs: Option<u32>) -> VerifyOptions {
        let contract = deployment.contract.as_deref();
        let external = deployment.database_url.is_some();
        VerifyOptions {
            backend: choice(self.backend.as_deref(), contract),
            pg_image: image(self.pg_image, contract),
            pg_bin: self.pg_bin,
            contract: deployment.contract.clone(),
            contract_path: deployment.contract_path,
            database_url: deployment.database_url,
            reports_dir: self.reports_dir,
            worker_bin,
            worker_dir: None,
            tools_bin: runner::default_tools_bin(),
            skip_conformance: false,
            conformance_report: None,
            jobs: jobs.map(|j| j as usize).unwrap_or_else(|| runner::default_jobs(external)),
            write_path: fenceproof_protocol::write_path::WritePath::Api,
            judging: fenceproof_scenarios::trace_check::Judging::Both,
            starved_reruns: 1,
            program: "fenceproof verify".into(),
        }
    }
}

/// The backend asked for: the flag, else the contract's `[database] backend`, else auto.
fn choice(backend: Option<&str>, contract: Option<&Contract>) -> BackendChoice {
    match (backend, contract.map(|c| c.database.backend)) {
        (Some(b), _) => BackendChoice::parse(b).unwrap_or_default(),
        (None, Some(BackendKind::Native)) => BackendChoice::Native,
        (None, Some(BackendKind::Container)) => BackendChoice::Container,
        (None, _) => BackendChoice::Auto,
    }
}

/// The container image: the flag, else the contract's, else the official default.
fn image(pg_image: Option<String>, contract: Option<&Contract>) -> String {
    pg_image
        .or_else(|| contract.and_then(|c| c.database.image.clone()))
        .unwrap_or_else(|| fenceproof_harness::db::container::DEFAULT_IMAGE.to_string())
}

/// The contract at `path`, if one was given; one that cannot be read is a usage error.
pub fn load_contract(path: Option<&std::path::Path>) -> Result<Option<Contract>, u8> {
    match path.map(Contract::load) {
        None => Ok(None),
        Some(Ok(c)) => Ok(Some(c)),
        Some(Err(e)) => Err(crate::fail::usage(e)),
    }
}
