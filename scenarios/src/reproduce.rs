//! The `reproduce:` line of a row that did not pass: the command that reruns that row alone, as
//! printed, with the flags that bring back the same server, deployment and worker.

use fenceproof_harness::procs::worker::without_password;

use crate::runner::{default_worker_bin, BackendChoice, Server, VerifyOptions};

/// What a session's reproduce lines hold besides the row: the command that runs verify as it was
/// run, the flags that select this session's server, contract and worker (the barriers' flag is
/// added by [`crate::runner::Session::reproduce`], since they are set after start), and a closing note.
pub(crate) struct Reproduce {
    /// The command that runs verify ([`VerifyOptions::program`]).
    pub program: String,
    pub flags: String,
    /// With a `--database-url` that held a password: a shell comment saying to set PGPASSWORD.
    pub note: String,
}

impl Reproduce {
    pub fn of(opts: &VerifyOptions, server: &Server) -> Reproduce {
        let program = opts.program.clone();
        let mut flags = String::new();
        let mut note = String::new();
        match server {
            Server::Container(c) => {
                flags.push_str(&format!(" --backend container --pg-image {}", shell_word(&c.image)))
            }
            Server::External(_) => {
                if let Some(url) = &opts.database_url {
                    let (bare, password) = without_password(url);
                    flags.push_str(&format!(" --database-url {}", shell_word(&bare)));
                    if password.is_some() {
                        note = "  # with PGPASSWORD set to the role's password".into();
                    }
                }
            }
            Server::Native(_) => {
                if opts.backend == BackendChoice::Native && opts.contract_path.is_none() {
                    flags.push_str(" --backend native");
                }
                if let Some(dir) = &opts.pg_bin {
                    flags.push_str(&format!(" --pg-bin {}", shell_word(&dir.display().to_string())));
                }
            }
        }
        flags.push_str(&deployment_flags(opts));
        Reproduce { program, flags, note }
    }
}

/// The reproduce flags that do not depend on the server: the contract, the worker under test, and
/// `--skip-conformance` when the gate was skipped or already passed (the row alone needs no second
/// gate).
fn deployment_flags(opts: &VerifyOptions) -> String {
    let mut flags = String::new();
    if let Some(p) = &opts.contract_path {
        flags.push_str(&format!(" --contract {}", shell_word(&p.display().to_string())));
    }
    if opts.worker_bin != default_worker_bin() {
        flags.push_str(&format!(" --worker-bin {}", shell_word(&opts.worker_bin.display().to_string())));
    }
    if opts.skip_conformance || opts.conformance_report.is_some() {
        flags.push_str(" --skip-conformance");
    }
    flags
}

/// `s` as one word for a POSIX shell: bare when it holds only safe characters, else single-quoted.
pub fn shell_word(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(worker: &str) -> VerifyOptions {
        VerifyOptions {
            backend: BackendChoice::Auto,
            pg_image: String::new(),
            pg_bin: None,
            contract: None,
            contract_path: None,
            database_url: None,
            reports_dir: "reports".into(),
            worker_bin: worker.into(),
            tools_bin: "t".into(),
            skip_conformance: false,
            conformance_report: None,
            jobs: 1,
            program: "just verify".into(),
        }
    }

    #[test]
    fn a_gate_that_passed_is_not_run_again_by_the_line() {
        let mut o = opts("/w/my worker");
        assert_eq!(deployment_flags(&o), " --worker-bin '/w/my worker'");
        o.conformance_report = Some("reports/r/conformance.txt".into());
        assert_eq!(deployment_flags(&o), " --worker-bin '/w/my worker' --skip-conformance");
        o.conformance_report = None;
        o.skip_conformance = true;
        assert!(deployment_flags(&o).ends_with(" --skip-conformance"));
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }
}
