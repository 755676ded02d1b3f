//! The matrix: one row per experiment, printed as a terminal table and saved as `matrix.json`,
//! `matrix.md` and `junit.xml` in the run folder. Also the exit-code rule.

pub mod html;
pub mod junit;

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::check::Check;
use crate::error::Result;

/// The verdict of one experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Outcome {
    /// Every check passed.
    Pass,
    /// At least one check failed: the protocol or deployment broke a rule.
    Fail,
    /// The experiment could not reach a verdict (a timeout, a crashed process, a harness fault).
    Error,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Error => "ERROR",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ExperimentResult {
    /// The spec's letter (A-H), with a suffix for variants.
    pub id: String,
    pub title: String,
    pub outcome: Outcome,
    pub duration_ms: u128,
    /// The key observations in one line.
    pub observations: String,
    pub checks: Vec<Check>,
    pub error: Option<String>,
    /// The command that runs this experiment alone.
    pub reproduce: String,
    /// The experiment's evidence folder, relative to the run folder.
    pub evidence: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    pub run_id: String,
    pub backend: String,
    pub server_version: String,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub duration_ms: u128,
    /// The program the rows drove as their workers.
    pub worker: WorkerUnderTest,
    /// The conformance report of the gate that ran before this matrix (its `conformance.txt`),
    /// when one ran.
    pub conformance_report: Option<String>,
    pub results: Vec<ExperimentResult>,
}

/// The worker program a matrix tested: where it is and what it was, byte for byte.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WorkerUnderTest {
    /// The path given (`--worker-bin`), or the reference worker's.
    pub path: String,
    /// SHA-256 of the file's bytes (the script itself for an interpreted worker), hex; empty when
    /// the file could not be read.
    pub sha256: String,
    /// Whether it is the reference worker built with fenceproof.
    pub reference: bool,
}

impl WorkerUnderTest {
    /// Identify the program at `path` (hash of its bytes).
    pub fn of(path: &Path, reference: bool) -> WorkerUnderTest {
        use sha2::{Digest, Sha256};
        let sha256 = std::fs::read(path)
            .map(|b| Sha256::digest(&b).iter().map(|x| format!("{x:02x}")).collect())
            .unwrap_or_default();
        WorkerUnderTest { path: path.display().to_string(), sha256, reference }
    }

    /// "the reference worker" or "PATH (sha256 0123456789ab)".
    pub fn describe(&self) -> String {
        let short: String = self.sha256.chars().take(12).collect();
        if self.reference {
            format!("the reference worker {} (sha256 {short})", self.path)
        } else {
            format!("{} (sha256 {short})", self.path)
        }
    }
}

/// The error, the failed checks and the reproduce line of a row that did not pass.
fn failure_lines(r: &ExperimentResult, indent: &str) -> String {
    let mut s = String::new();
    if let Some(e) = &r.error {
        let _ = writeln!(s, "{indent}error: {e}");
    }
    for c in r.checks.iter().filter(|c| !c.passed()) {
        let _ = writeln!(s, "{indent}FAILED {}: {}", c.name, c.evidence);
    }
    let _ = writeln!(s, "{indent}reproduce: {}", r.reproduce);
    if !r.evidence.is_empty() {
        let _ = writeln!(s, "{indent}evidence: {}/ in the report folder", r.evidence);
    }
    s
}

impl ExperimentResult {
    /// One line for a log without a terminal: id, verdict, time, and the first failed check.
    pub fn log_line(&self) -> String {
        let first = self.checks.iter().find(|c| !c.passed()).map(|c| format!(" ({})", c.name));
        let error = self.error.as_ref().filter(|_| self.outcome == Outcome::Error).map(|e| format!(" ({e})"));
        format!(
            "{:<14} {:<5} {:>6.1}s{}",
            self.id,
            self.outcome.label(),
            self.duration_ms as f64 / 1000.0,
            first.or(error).unwrap_or_default()
        )
    }
}

/// Exit codes of `fenceproof verify`.
pub mod exit {
    /// Every selected experiment passed.
    pub const OK: u8 = 0;
    /// At least one experiment failed.
    pub const FAILED: u8 = 1;
    /// Bad usage (flags, input files).
    pub const USAGE: u8 = 2;
    /// The harness itself failed: setup, or an experiment that could not reach a verdict.
    pub const HARNESS: u8 = 3;
    /// The worker deviates from the worker contract: `conformance` found a deviation, and `verify`
    /// stopped before the matrix because of one.
    pub const CONFORMANCE: u8 = 4;
}

impl Matrix {
    pub fn exit_code(&self) -> u8 {
        if self.results.iter().any(|r| r.outcome == Outcome::Fail) {
            exit::FAILED
        } else if self.results.iter().any(|r| r.outcome == Outcome::Error) || self.results.is_empty() {
            exit::HARNESS
        } else {
            exit::OK
        }
    }

    /// The terminal table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "fenceproof run {}  ({} backend, {})", self.run_id, self.backend, self.server_version);
        let _ = writeln!(s, "worker: {}", self.worker.describe());
        let _ = writeln!(s, "{:<14} {:<7} {:>8}  key observations", "experiment", "verdict", "time");
        for r in &self.results {
            let _ = writeln!(
                s,
                "{:<14} {:<7} {:>7.1}s  {}",
                r.id,
                r.outcome.label(),
                r.duration_ms as f64 / 1000.0,
                r.observations
            );
            if r.outcome != Outcome::Pass {
                s.push_str(&failure_lines(r, &" ".repeat(33)));
            }
        }
        s.push_str(&self.count_line());
        s
    }

    /// Only what failed, and the count: for `--quiet`.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for r in self.results.iter().filter(|r| r.outcome != Outcome::Pass) {
            let _ = writeln!(s, "{} {}", r.id, r.outcome.label());
            s.push_str(&failure_lines(r, "  "));
        }
        s.push_str(&self.count_line());
        s
    }

    /// "N/M experiments passed in T s".
    fn count_line(&self) -> String {
        let passed = self.results.iter().filter(|r| r.outcome == Outcome::Pass).count();
        format!("{passed}/{} experiments passed in {:.1}s\n", self.results.len(), self.duration_ms as f64 / 1000.0)
    }

    /// The Markdown version of the matrix, with every check.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# fenceproof run `{}`\n", self.run_id);
        let _ = writeln!(
            s,
            "Backend: {} ({}); started {}.\n",
            self.backend,
            self.server_version,
            self.started_at.to_rfc3339()
        );
        let _ = writeln!(s, "| experiment | verdict | time | key observations |\n|---|---|---|---|");
        for r in &self.results {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1}s | {} |",
                r.id,
                r.outcome.label(),
                r.duration_ms as f64 / 1000.0,
                r.observations.replace('|', "\\|")
            );
        }
        for r in &self.results {
            let _ = writeln!(
                s,
                "\n## {} — {}\n\nVerdict: **{}**. Reproduce: `{}`\n",
                r.id,
                r.title,
                r.outcome.label(),
                r.reproduce
            );
            if let Some(e) = &r.error {
                let _ = writeln!(s, "Error: {e}\n");
            }
            for c in &r.checks {
                let mark = if c.passed() { "pass" } else { "FAIL" };
                let _ = writeln!(s, "- [{mark}] {}: {}", c.name, c.evidence.replace('\n', " "));
            }
        }
        s
    }

    /// Write matrix.json, matrix.md, junit.xml and index.html into `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::write(dir.join("matrix.json"), serde_json::to_string_pretty(self).expect("json"))?;
        std::fs::write(dir.join("matrix.md"), self.markdown())?;
        std::fs::write(dir.join("junit.xml"), junit::render(self))?;
        std::fs::write(dir.join("index.html"), html::render(self, dir))?;
        Ok(())
    }
}
