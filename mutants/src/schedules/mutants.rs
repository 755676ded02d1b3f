//! `fenceproof schedules-mutants`: the randomized search alone against every named mutant, each
//! with the same seed and a fixed time budget, and its kill matrix beside the experiments' (read
//! from the newest `mutants.json` under the reports folder, when there is one).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fenceproof_harness::HarnessError;
use serde::Serialize;

use super::{run, Budget};
use fenceproof_scenarios::runner::{Session, VerifyOptions};

#[derive(Debug, Clone, Serialize)]
pub struct ScheduleKill {
    pub mutant: String,
    pub rule: String,
    pub killed: bool,
    /// The case that found it, and the checks that failed.
    pub case: Option<u32>,
    pub failed_checks: Vec<String>,
    pub cases_played: u32,
    pub seconds: f64,
    /// The experiments that kill it (from the newest experiments' kill matrix), if known.
    pub experiments: Option<Vec<String>>,
    /// The search stopped without a verdict (the harness could not go on).
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScheduleKillMatrix {
    pub run_id: String,
    pub seed: String,
    pub budget_s: u64,
    pub rows: Vec<ScheduleKill>,
    pub experiments_matrix: Option<PathBuf>,
    pub duration_ms: u128,
}

impl ScheduleKillMatrix {
    pub fn killed(&self) -> usize {
        self.rows.iter().filter(|r| r.killed).count()
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "fenceproof schedules-mutants run {} (seed {}, budget {} s per mutant)\n",
            self.run_id, self.seed, self.budget_s
        );
        let w = self.rows.iter().map(|r| r.mutant.len()).max().unwrap_or(6).max(6);
        let _ = writeln!(
            s,
            "{:<w$} {:<9} {:>5} {:>7}  {:<30} killed by experiments",
            "mutant", "schedules", "case", "seconds", "failed checks"
        );
        for r in &self.rows {
            let checks = r.failed_checks.join("; ");
            let checks: String =
                if checks.chars().count() > 30 { checks.chars().take(29).chain(['…']).collect() } else { checks };
            let _ = writeln!(
                s,
                "{:<w$} {:<9} {:>5} {:>7.1}  {:<30} {}",
                r.mutant,
                verdict(r),
                r.case.map_or("-".into(), |c| c.to_string()),
                r.seconds,
                r.error.as_ref().map_or(checks, |e| e.chars().take(30).collect()),
                r.experiments.as_ref().map_or("(no experiments' matrix found)".into(), |e| e.join(", ")),
            );
        }
        let _ = writeln!(
            s,
            "{}/{} mutants killed by the schedules alone in {:.1}s",
            self.killed(),
            self.rows.len(),
            self.duration_ms as f64 / 1000.0
        );
        s
    }

    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# fenceproof schedules-mutants `{}`\n\nSeed `{}`, budget {} s per mutant. {}/{} killed.\n\n",
            self.run_id,
            self.seed,
            self.budget_s,
            self.killed(),
            self.rows.len()
        );
        s.push_str(
            "| mutant | schedules | case | seconds | failed checks | experiments |\n|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {} | {} |",
                r.mutant,
                verdict(r),
                r.case.map_or("-".into(), |c| c.to_string()),
                r.seconds,
                r.error.clone().unwrap_or_else(|| r.failed_checks.join("; ")),
                r.experiments.as_ref().map_or("?".into(), |e| e.join(", "))
            );
        }
        s
    }
}

impl ScheduleKill {
    /// The row of one mutant's search: killed when a schedule failed a check; an error of the
    /// harness is an ERROR row (no verdict), never a kill.
    fn of(
        mutant: &str,
        rule: &str,
        started: Instant,
        searched: Result<super::Summary, HarnessError>,
        experiments: Option<Vec<String>>,
    ) -> ScheduleKill {
        let (summary, error) = match searched {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let failure = summary.as_ref().and_then(|s| s.failure.as_ref());
        ScheduleKill {
            mutant: mutant.to_string(),
            rule: rule.to_string(),
            killed: failure.is_some(),
            case: failure.map(|f| f.case),
            failed_checks: failure
                .map(|f| f.failed_checks.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default(),
            cases_played: summary.as_ref().map_or(0, |s| s.cases),
            seconds: started.elapsed().as_secs_f64(),
            experiments,
            error,
        }
    }
}

/// The matrix of a finished search, saved as `<stem>.json` / `<stem>.md` in the run folder.
fn finish(
    session: &Session,
    seed: u64,
    budget: Duration,
    rows: Vec<ScheduleKill>,
    experiments_matrix: Option<PathBuf>,
    stem: &str,
) -> Result<(ScheduleKillMatrix, PathBuf), HarnessError> {
    let km = ScheduleKillMatrix {
        run_id: session.run.run_id.clone(),
        seed: format!("{seed:#x}"),
        budget_s: budget.as_secs(),
        rows,
        experiments_matrix,
        duration_ms: session.elapsed_ms(),
    };
    let path = session.run.path.clone();
    std::fs::write(path.join(format!("{stem}.json")), serde_json::to_string_pretty(&km).expect("json"))?;
    std::fs::write(path.join(format!("{stem}.md")), km.markdown())?;
    session.run.mark_latest()?;
    Ok((km, path))
}

fn verdict(r: &ScheduleKill) -> &'static str {
    match (r.killed, &r.error) {
        (true, _) => "KILLED",
        (false, Some(_)) => "ERROR",
        (false, None) => "SURVIVED",
    }
}

/// The newest experiments' kill matrix under `reports`: mutant -> experiments that kill it.
fn experiments_matrix(reports: &Path) -> Option<(PathBuf, BTreeMap<String, Vec<String>>)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(reports)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("mutants.json").is_file())
        .collect();
    dirs.sort();
    let path = dirs.pop()?.join("mutants.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    let mut m = BTreeMap::new();
    for row in v["rows"].as_array()? {
        let killers = row["verdicts"]
            .as_array()?
            .iter()
            .filter(|pair| pair[1] != "PASS")
            .filter_map(|pair| pair[0].as_str().map(String::from))
            .collect();
        m.insert(row["mutant"].as_str()?.to_string(), killers);
    }
    Some((path, m))
}

/// Search each selected mutant with `budget` from `seed`; save `schedules-mutants.json` / `.md`.
pub async fn search(
    opts: &VerifyOptions,
    only: Option<&[String]>,
    seed: u64,
    budget: Duration,
) -> Result<(ScheduleKillMatrix, PathBuf), HarnessError> {
    let mut mutants = crate::named::list(&opts.worker_bin)?;
    if let Some(only) = only {
        for want in only {
            if !mutants.iter().any(|(n, _)| n == want) {
                return Err(HarnessError::Other(format!("unknown mutant '{want}'")));
            }
        }
        mutants.retain(|(n, _)| only.contains(n));
    }
    // An operator-side mutant breaks a step the harness performs as the operator (a restore's
    // recovery); the schedules have no such step, so it is not searched here.
    mutants.retain(|(n, _)| {
        let operator =
            fenceproof_protocol::mutant::Mutant::parse(n).and_then(fenceproof_scenarios::operator_experiment);
        if let Some(exp) = &operator {
            eprintln!("{n}: not searched (an operator step the schedules do not perform; killed by {})", exp.id);
        }
        operator.is_none()
    });
    let known = experiments_matrix(&opts.reports_dir);
    let mut session = Session::start(opts).await?;
    let mut rows = Vec::new();
    for (i, (name, rule)) in mutants.iter().enumerate() {
        let started = Instant::now();
        let args = vec!["--mutant".to_string(), name.clone()];
        let searched = run(&mut session, Budget::time(budget), seed, &args, "", false, name).await;
        let experiments = known.as_ref().map(|(_, m)| m.get(name).cloned().unwrap_or_default());
        let row = ScheduleKill::of(name, rule, started, searched, experiments);
        eprintln!(
            "[{}/{}] {name}: {} after {} case(s), {:.0}s{}",
            i + 1,
            mutants.len(),
            verdict(&row),
            row.cases_played,
            row.seconds,
            row.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
        );
        rows.push(row);
    }
    finish(&session, seed, budget, rows, known.map(|(p, _)| p), "schedules-mutants")
}

/// `schedules-mutants --sql`: the same search against the generated SQL mutants of the selection
/// (an fp_* function installed mutated in every schedule's database, or a direct-path statement
/// given to the mutant worker). Reviewed equivalents are marked as such in the rule column.
pub async fn search_sql(
    opts: &VerifyOptions,
    sel: &crate::sql::Selection,
    seed: u64,
    budget: Duration,
) -> Result<(ScheduleKillMatrix, PathBuf), HarnessError> {
    let mutants = crate::sql::pick(sel).map_err(HarnessError::Other)?;
    let listed = crate::equivalents::load().map_err(HarnessError::Other)?;
    let mut session = Session::start(opts).await?;
    let reference_bin = session.worker_bin.clone();
    let mut rows = Vec::new();
    for (i, m) in mutants.iter().enumerate() {
        let started = Instant::now();
        let mut args = Vec::new();
        if crate::sql::is_direct(&m.id) {
            let name = m.function.trim_start_matches("direct/");
            let file = crate::sql::override_file(&session.run.path, &m.id.replace('/', "-"), name, &m.sql)?;
            args = vec!["--sql-mutant".to_string(), file.display().to_string()];
            session.worker_bin = sel.mutant_worker_bin.clone();
        } else {
            session.sql_patch = Some(m.sql.clone());
        }
        let label = format!("sql-{}", m.id.replace('/', "-"));
        let r = run(&mut session, Budget::time(budget), seed, &args, "", false, &label).await;
        session.sql_patch = None;
        session.worker_bin = reference_bin.clone();
        let mut rule = format!("L{}: {} => {}", m.line, m.before.trim(), m.after.trim());
        if let Some(reason) = listed.get(&m.id) {
            rule = format!("{rule} (reviewed equivalent: {reason})");
        }
        let row = ScheduleKill::of(&m.id, &rule, started, r, None);
        eprintln!("[{}/{}] {}: {}", i + 1, mutants.len(), m.id, verdict(&row));
        rows.push(row);
    }
    finish(&session, seed, budget, rows, None, "schedules-mutants-sql")
}
