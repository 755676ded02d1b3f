//! The `reproduce:` line of a row that did not pass: the command that reruns that row alone, as
//! printed, with the flags that bring back the same server, deployment and worker. The runner
//! says what its session ran on ([`Ran`]); this module only words it.

use std::path::Path;

use fenceproof_harness::procs::worker::without_password;

/// What a session ran on, as the reproduce line must bring it back.
pub struct Ran<'a> {
    /// The command that runs verify (`VerifyOptions::program`).
    pub program: &'a str,
    /// `--backend container --pg-image IMAGE`.
    pub image: Option<&'a str>,
    /// The team's database, as given (its password, if any, is left out of the line).
    pub database_url: Option<&'a str>,
    /// `--backend native` was asked for (and no contract chose it).
    pub native: bool,
    pub pg_bin: Option<&'a Path>,
    pub contract: Option<&'a Path>,
    /// The worker under test, when it is not the reference.
    pub worker: Option<&'a Path>,
    /// The conformance gate was skipped or already passed: the row alone needs no second gate.
    pub gate_done: bool,
    /// The workers ran their own statements (`--write-path direct`).
    pub direct: bool,
}

/// What a session's reproduce lines hold besides the row: the command that runs verify as it was
/// run, the flags that select this session's server, contract and worker (the barriers' flag is
/// added by [`crate::runner::Session::reproduce`], since they are set after start), and a closing note.
pub struct Reproduce {
    pub program: String,
    pub flags: String,
    /// With a `--database-url` that held a password: a shell comment saying to set PGPASSWORD.
    pub note: String,
}

impl Reproduce {
    pub fn of(ran: &Ran) -> Reproduce {
        let mut flags = String::new();
        let mut note = String::new();
        let path = |p: &Path| shell_word(&p.display().to_string());
        if let Some(image) = ran.image {
            flags.push_str(&format!(" --backend container --pg-image {}", shell_word(image)));
        }
        if let Some(url) = ran.database_url {
            let (bare, password) = without_password(url);
            flags.push_str(&format!(" --database-url {}", shell_word(&bare)));
            if password.is_some() {
                note = "  # with PGPASSWORD set to the role's password".into();
            }
        }
        if ran.native {
            flags.push_str(" --backend native");
        }
        for (flag, p) in [("--pg-bin", ran.pg_bin), ("--contract", ran.contract), ("--worker-bin", ran.worker)] {
            if let Some(p) = p {
                flags.push_str(&format!(" {flag} {}", path(p)));
            }
        }
        if ran.gate_done {
            flags.push_str(" --skip-conformance");
        }
        if ran.direct {
            flags.push_str(" --write-path direct");
        }
        Reproduce { program: ran.program.to_string(), flags, note }
    }
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

    fn ran<'a>(worker: &'a Path) -> Ran<'a> {
        Ran {
            program: "just verify",
            image: None,
            database_url: None,
            native: false,
            pg_bin: None,
            contract: None,
            worker: Some(worker),
            gate_done: false,
            direct: false,
        }
    }

    #[test]
    fn a_gate_that_passed_is_not_run_again_by_the_line() {
        let w = Path::new("/w/my worker");
        let mut r = ran(w);
        assert_eq!(Reproduce::of(&r).flags, " --worker-bin '/w/my worker'");
        r.gate_done = true;
        assert_eq!(Reproduce::of(&r).flags, " --worker-bin '/w/my worker' --skip-conformance");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }

    #[test]
    fn a_database_url_keeps_no_password_and_says_to_set_pgpassword() {
        let mut r = ran(Path::new("/w"));
        r.database_url = Some("postgres://app:s3cret@db:5432/appdb");
        let line = Reproduce::of(&r);
        assert!(line.flags.contains("--database-url postgres://app@db:5432/appdb"), "{}", line.flags);
        assert!(!line.flags.contains("s3cret") && line.note.contains("PGPASSWORD"));
        r.database_url = Some("postgres://app@db/appdb");
        assert!(Reproduce::of(&r).note.is_empty(), "no password given, nothing to say");
    }
}
