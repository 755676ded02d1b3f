//! The matrix: one row per experiment, printed as a terminal table and saved as `matrix.json`,
//! `matrix.md` and `junit.xml` in the run folder. Also the exit-code rule.

pub mod broken;
pub mod fingerprint;
pub mod html;
pub mod junit;
pub mod partial;

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::check::rule::RuleRef;
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
    /// The experiment could not reach a verdict because the machine starved the harness: a wait
    /// ran out although it was granted the harness's own measured delay ([`crate::lag`]). Says
    /// nothing about the worker; run the row again on a quieter machine.
    Starved,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Error => "ERROR",
            Outcome::Starved => "STARVED",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ExperimentResult {
    /// The spec's letter (A-H), with a suffix for variants.
    pub id: String,
    pub title: String,
    /// PASS, FAIL or ERROR: `verdict` in the JSON, the name a check's verdict has too.
    #[serde(rename = "verdict")]
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
    /// Why the run stopped before its end (`interrupted by SIGINT at ...`): then `results` holds
    /// only the rows that finished. `null` for a run that ended on its own.
    pub interrupted: Option<String>,
}

/// The worker program a matrix tested: where it is and what it was, byte for byte.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WorkerUnderTest {
    /// The path given (`--worker-bin`), or the reference worker's.
    pub path: String,
    /// SHA-256 of the file's bytes, or for an interpreted worker of every file of its script's
    /// folder ([`fingerprint`]), hex; empty when the file could not be read.
    pub sha256: String,
    /// How many files the fingerprint covers.
    pub files: usize,
    /// Whether it is the reference worker built with fenceproof.
    pub reference: bool,
    /// The folder the fingerprint covers when the user named one (`verify --worker-dir`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
}

impl WorkerUnderTest {
    /// Identify the program at `path` (its fingerprint, see [`fingerprint`]).
    pub fn of(path: &Path, reference: bool) -> WorkerUnderTest {
        let (sha256, files) = fingerprint::of(path);
        WorkerUnderTest { path: path.display().to_string(), sha256, files, reference, folder: None }
    }

    /// Identify the program at `path` by every file of `folder` when one is named
    /// ([`fingerprint::of_dir`]), else as [`WorkerUnderTest::of`].
    pub fn of_in(path: &Path, reference: bool, folder: Option<&Path>) -> WorkerUnderTest {
        let Some(dir) = folder else { return WorkerUnderTest::of(path, reference) };
        let (sha256, files) = fingerprint::of_dir(dir);
        let folder = Some(dir.display().to_string());
        WorkerUnderTest { path: path.display().to_string(), sha256, files, reference, folder }
    }

    /// "the reference worker" or "PATH (sha256 0123456789ab)".
    pub fn describe(&self) -> String {
        let short: String = self.sha256.chars().take(12).collect();
        if self.reference {
            format!("the reference worker {} (sha256 {short})", self.path)
        } else if let Some(dir) = &self.folder {
            format!("{} (sha256 {short} over the {} files of {dir})", self.path, self.files)
        } else {
            match self.files {
                0 | 1 => format!("{} (sha256 {short})", self.path),
                n => format!("{} (sha256 {short} over the {n} files of its folder)", self.path),
            }
        }
    }
}

/// The error, what broke (one line per broken rule, its consequences indented under it:
/// [`broken::lines`]) and the reproduce line of a row that did not pass. The whole evidence of
/// each check is in the report (`checks.json`, `matrix.md`, `index.html`).
fn failure_lines(r: &ExperimentResult, indent: &str) -> String {
    let mut s = String::new();
    if let Some(e) = &r.error {
        let _ = writeln!(s, "{indent}error: {e}");
    }
    for line in broken::lines(r) {
        let _ = writeln!(s, "{indent}{line}");
    }
    let _ = writeln!(s, "{indent}reproduce: {}", r.reproduce);
    if !r.evidence.is_empty() {
        let _ = writeln!(
            s,
            "{indent}evidence: {}/ in the report folder (every check's whole evidence: index.html)",
            r.evidence
        );
    }
    s
}

/// `text`'s first line, trimmed, cut to about `max` bytes with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if line.len() <= max {
        return line.to_string();
    }
    let mut to = max;
    while !line.is_char_boundary(to) {
        to -= 1;
    }
    format!("{}…", &line[..to])
}

/// How long a report lets one row's "what broke" evidence be.
pub const EVIDENCE_SENTENCE: usize = 400;

impl ExperimentResult {
    /// The checks that failed, in their order.
    pub fn broken_checks(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed())
    }

    /// The rules the failed checks judge, each once, root causes first ([`broken::grouped`]).
    pub fn broken_rules(&self) -> Vec<&RuleRef> {
        let mut rules: Vec<&RuleRef> = Vec::new();
        let roots = broken::grouped(self);
        let lines = roots.iter().flat_map(|r| std::iter::once(&r.line).chain(&r.same_commit).chain(&r.follows));
        for r in lines.flat_map(|l| l.rules.iter().copied()) {
            if !rules.iter().any(|x| x.id == r.id) {
                rules.push(r);
            }
        }
        rules
    }

    /// What broke in one sentence: the root cause's evidence ([`broken::root_check`]; its first
    /// line, without raw JSON, capped), else the error's.
    pub fn evidence_sentence(&self) -> String {
        match (broken::root_check(self), &self.error) {
            (Some(c), _) => broken::observed(&c.evidence, EVIDENCE_SENTENCE),
            (None, Some(e)) => one_line(e, EVIDENCE_SENTENCE),
            (None, None) => String::new(),
        }
    }

    /// One line for a log without a terminal: id, verdict, time, and the first failed check.
    pub fn log_line(&self) -> String {
        let first = self.checks.iter().find(|c| !c.passed()).map(|c| format!(" ({})", c.name));
        let error = self
            .error
            .as_ref()
            .filter(|_| matches!(self.outcome, Outcome::Error | Outcome::Starved))
            .map(|e| format!(" ({e})"));
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
    /// No FAIL and no ERROR, but at least one experiment was STARVED: the machine was too busy
    /// for the harness to reach its verdict.
    pub const STARVED: u8 = 5;
}

impl Matrix {
    pub fn exit_code(&self) -> u8 {
        if self.results.iter().any(|r| r.outcome == Outcome::Fail) {
            exit::FAILED
        } else if self.results.iter().any(|r| r.outcome == Outcome::Error) || self.results.is_empty() {
            exit::HARNESS
        } else if self.results.iter().any(|r| r.outcome == Outcome::Starved) {
            exit::STARVED
        } else {
            exit::OK
        }
    }

    /// The rows that did not pass, FAIL rows first, then ERROR rows, then STARVED rows, each in
    /// matrix order.
    pub fn broken_rows(&self) -> Vec<&ExperimentResult> {
        let of = |o: Outcome| self.results.iter().filter(move |r| r.outcome == o);
        of(Outcome::Fail).chain(of(Outcome::Error)).chain(of(Outcome::Starved)).collect()
    }

    /// Every row, the broken ones first (as [`Matrix::broken_rows`]), then the passing ones.
    pub fn rows_failing_first(&self) -> Vec<&ExperimentResult> {
        let mut rows = self.broken_rows();
        rows.extend(self.results.iter().filter(|r| r.outcome == Outcome::Pass));
        rows
    }

    /// The conformance report as a link from the run folder `run_dir`: a relative path when it lies
    /// inside it (the runner copies the gate's report in), else `None` (show the path as text: a
    /// link out of the folder would break once the folder is copied alone).
    pub fn conformance_link(&self, run_dir: &Path) -> Option<String> {
        let report = std::fs::canonicalize(self.conformance_report.as_ref()?).ok()?;
        let run = std::fs::canonicalize(run_dir).ok()?;
        report.strip_prefix(&run).ok().map(|rel| rel.display().to_string())
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
                s.push_str(&failure_lines(r, "  "));
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

    /// The Markdown version of the matrix: the worker under test, what broke (failing rows first,
    /// with rule, evidence and reproduce line), the table, then every row's checks, broken first.
    pub fn markdown(&self, run_dir: &Path) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# fenceproof run `{}`\n", self.run_id);
        if let Some(why) = &self.interrupted {
            let _ = writeln!(s, "**INTERRUPTED**: {why}; only the rows below finished.\n");
        }
        let _ = writeln!(
            s,
            "Backend: {} ({}); started {}.\n",
            self.backend,
            self.server_version,
            self.started_at.to_rfc3339()
        );
        s.push_str(&self.markdown_worker(run_dir));
        s.push_str(&self.markdown_broke());
        let _ = writeln!(s, "| experiment | verdict | time | key observations |\n|---|---|---|---|");
        for r in self.rows_failing_first() {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1}s | {} |",
                r.id,
                r.outcome.label(),
                r.duration_ms as f64 / 1000.0,
                r.observations.replace('|', "\\|")
            );
        }
        for r in self.rows_failing_first() {
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
            for c in r.broken_checks().chain(r.checks.iter().filter(|c| c.passed())) {
                let mark = if c.passed() { "pass" } else { "FAIL" };
                let _ = writeln!(s, "- [{mark}] {}: {}", c.name, c.evidence.replace('\n', " "));
            }
        }
        s
    }

    /// "Worker under test: …" and the conformance report, for matrix.md.
    fn markdown_worker(&self, run_dir: &Path) -> String {
        let short: String = self.worker.sha256.chars().take(12).collect();
        let which = if self.worker.reference { " (the reference worker)" } else { "" };
        let conformance = match (&self.conformance_report, self.conformance_link(run_dir)) {
            (Some(_), Some(link)) => format!("[conformance.txt]({link})"),
            (Some(path), None) => format!("`{path}`"),
            (None, _) => "none (the gate did not run: the reference worker, or --skip-conformance)".into(),
        };
        format!(
            "Worker under test: `{}`{which}, sha256 `{short}`. Conformance report: {conformance}.\n\n",
            self.worker.path
        )
    }

    /// The "What broke" section of matrix.md: one entry per FAIL row, then per ERROR row.
    fn markdown_broke(&self) -> String {
        let broken = self.broken_rows();
        if broken.is_empty() {
            return String::new();
        }
        let mut s = String::from("## What broke\n\n");
        for r in broken {
            let _ = writeln!(s, "### {} — {}: {}\n", r.id, r.outcome.label(), r.title);
            if let Some(c) = broken::root_check(r) {
                let _ = writeln!(s, "- check: {}", c.name);
            }
            for rule in r.broken_rules() {
                let _ = writeln!(s, "- rule: `{}` (§{}): {}", rule.id, rule.section, rule.statement);
            }
            let _ = writeln!(s, "- evidence: {}", r.evidence_sentence());
            for line in broken::lines(r).iter().skip(1) {
                let _ = writeln!(s, "- {}", line.trim_start());
            }
            let _ = writeln!(s, "- reproduce: `{}`\n", r.reproduce);
        }
        s
    }

    /// Write matrix.json, matrix.md, junit.xml and index.html into `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::write(dir.join("matrix.json"), serde_json::to_string_pretty(self).expect("json"))?;
        std::fs::write(dir.join("matrix.md"), self.markdown(dir))?;
        std::fs::write(dir.join("junit.xml"), junit::render(self))?;
        std::fs::write(dir.join("index.html"), html::render(self, dir))?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::check::rule::RuleRef;

    pub(crate) fn row(id: &str, outcome: Outcome, checks: Vec<Check>, error: Option<&str>) -> ExperimentResult {
        ExperimentResult {
            id: id.into(),
            title: format!("title of {id}"),
            outcome,
            duration_ms: 1200,
            observations: format!("observations of {id}"),
            checks,
            error: error.map(Into::into),
            reproduce: format!("fenceproof verify --only {id} --worker-bin /tmp/broken/worker.py"),
            evidence: id.into(),
        }
    }

    /// A matrix whose passing row comes first, then a FAIL row (a passing check before its broken
    /// one), then an ERROR row.
    pub(crate) fn failing_matrix() -> Matrix {
        let rule = RuleRef {
            id: "commit.lease-owner-epoch-live".into(),
            section: "06".into(),
            statement: "a protected write locks the lease row and validates owner, epoch and expiry".into(),
        };
        let mut broken =
            Check::fail("old owner writes nothing", "  worker a committed #7 after the takeover\nmore").citing([7]);
        broken.rules.push(rule);
        let fine = Check::pass("epochs only grow", "3 takeovers, each + 1");
        Matrix {
            run_id: "r1".into(),
            backend: "native".into(),
            server_version: "16".into(),
            started_at: chrono::Utc::now(),
            duration_ms: 3600,
            worker: WorkerUnderTest {
                path: "/tmp/broken/worker.py".into(),
                sha256: "0123456789abcdef".repeat(4),
                files: 1,
                reference: false,
                folder: None,
            },
            conformance_report: Some("/elsewhere/conformance.txt".into()),
            interrupted: None,
            results: vec![
                row("A", Outcome::Pass, vec![Check::pass("a fine check", "ok")], None),
                row("X-stop", Outcome::Fail, vec![fine, broken], None),
                row("C", Outcome::Error, vec![], Some("the worker exited\nstderr: boom")),
            ],
        }
    }

    #[test]
    fn markdown_says_what_broke_first_and_names_the_worker() {
        let md = failing_matrix().markdown(Path::new("/nonexistent/run"));
        assert!(md.contains("Worker under test: `/tmp/broken/worker.py`, sha256 `0123456789ab`"), "{md}");
        assert!(md.contains("Conformance report: `/elsewhere/conformance.txt`"), "{md}");
        let broke = md.find("## What broke").expect("a What broke section");
        assert!(broke < md.find("| experiment |").unwrap(), "before the table:\n{md}");
        let b = md.find("### X-stop — FAIL").unwrap();
        assert!(b < md.find("### C — ERROR").unwrap(), "FAIL rows before ERROR rows:\n{md}");
        for want in [
            "- rule: `commit.lease-owner-epoch-live` (§06): a protected write locks",
            "- evidence: worker a committed #7 after the takeover\n",
            "- reproduce: `fenceproof verify --only X-stop --worker-bin /tmp/broken/worker.py`",
            "- evidence: the worker exited\n",
        ] {
            assert!(md.contains(want), "{want:?} missing:\n{md}");
        }
        // Row sections: failing first, and a broken check above the passing ones.
        assert!(md.find("\n## X-stop").unwrap() < md.find("\n## A ").unwrap(), "{md}");
        assert!(md.find("[FAIL] old owner").unwrap() < md.find("[pass] epochs only grow").unwrap(), "{md}");
        // A passing matrix has no such section.
        let mut ok = failing_matrix();
        ok.results.truncate(1);
        assert!(!ok.markdown(Path::new("/x")).contains("What broke"));
    }

    #[test]
    fn the_evidence_sentence_is_one_trimmed_capped_line() {
        assert_eq!(one_line("\n  first  \nsecond", 100), "first");
        assert_eq!(one_line(&"é".repeat(10), 5), "éé…");
        let m = failing_matrix();
        let ids: Vec<&str> = m.rows_failing_first().iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["X-stop", "C", "A"]);
    }
}
