//! `fenceproof mutants named`: run the experiments against every named broken variant of the worker
//! (a binary built with the `mutants` feature) and report which experiments kill which mutant.
//! The reference (no mutant) must pass everything, and every mutant must be killed by at least one
//! experiment; a survivor is a failure of the suite.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fenceproof_harness::report::{Matrix, Outcome};
use fenceproof_harness::HarnessError;
use serde::Serialize;

use fenceproof_scenarios::jobs::Unit;
use fenceproof_scenarios::runner::{Session, VerifyOptions};
use fenceproof_scenarios::Experiment;

#[derive(Debug, Clone, Serialize)]
pub struct MutantRow {
    pub mutant: String,
    /// The spec rule it removes.
    pub rule: String,
    /// Per experiment id: PASS (survived it), FAIL or ERROR (killed by it).
    pub verdicts: Vec<(String, Outcome)>,
    pub killed: bool,
}

/// Whether a row's verdict kills a mutant: a FAIL, or an ERROR (the mutant broke the row); a
/// STARVED row says nothing about the mutant.
fn kills(o: Outcome) -> bool {
    matches!(o, Outcome::Fail | Outcome::Error)
}

impl MutantRow {
    pub fn killers(&self) -> Vec<String> {
        self.verdicts
            .iter()
            .filter(|(_, o)| kills(*o))
            .map(|(id, o)| format!("{id}{}", if *o == Outcome::Error { "(error)" } else { "" }))
            .collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct KillMatrix {
    pub run_id: String,
    pub reference_passed: bool,
    pub reference_failures: Vec<String>,
    pub experiments: Vec<String>,
    pub rows: Vec<MutantRow>,
    pub duration_ms: u128,
}

impl KillMatrix {
    pub fn all_killed(&self) -> bool {
        self.reference_passed && self.rows.iter().all(|r| r.killed)
    }

    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "fenceproof mutants named run {}", self.run_id);
        let _ = writeln!(
            s,
            "reference: {}",
            if self.reference_passed {
                "all experiments PASS".to_string()
            } else {
                format!("FAILED {}", self.reference_failures.join(", "))
            }
        );
        let w = self.rows.iter().map(|r| r.mutant.len()).max().unwrap_or(0).max("mutant".len());
        let _ = writeln!(s, "{:<w$} {:<9} killed by", "mutant", "verdict");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<w$} {:<9} {}",
                r.mutant,
                if r.killed { "KILLED" } else { "SURVIVED" },
                r.killers().join(", ")
            );
            if !r.killed {
                let _ = writeln!(s, "{:<pad$} rule no experiment defends: {}", "", r.rule, pad = w + 10);
            }
        }
        let killed = self.rows.iter().filter(|r| r.killed).count();
        let _ = writeln!(s, "{killed}/{} mutants killed in {:.1}s", self.rows.len(), self.duration_ms as f64 / 1000.0);
        s
    }

    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# fenceproof mutants named `{}`\n\nReference passes everything: {}.\n\n",
            self.run_id, self.reference_passed
        );
        let _ = writeln!(s, "| mutant | {} | verdict |", self.experiments.join(" | "));
        let _ = writeln!(s, "|---|{}---|", "---|".repeat(self.experiments.len()));
        for r in &self.rows {
            // A row not run (stopped at the first kill with --first-kill) is a dash.
            let cells: Vec<&str> = self
                .experiments
                .iter()
                .map(|e| match r.verdicts.iter().find(|(id, _)| id == e).map(|(_, o)| o) {
                    Some(Outcome::Pass) => "·",
                    Some(Outcome::Fail) => "killed",
                    Some(Outcome::Error) => "killed (error)",
                    Some(Outcome::Starved) => "starved",
                    None => "–",
                })
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                r.mutant,
                cells.join(" | "),
                if r.killed { "KILLED" } else { "SURVIVED" }
            );
        }
        s.push_str("\n## Rules the mutants remove\n\n");
        for r in &self.rows {
            let _ = writeln!(s, "- `{}`: {}", r.mutant, r.rule);
        }
        s
    }
}

/// The mutants a worker binary offers (`--list-mutants`), as (name, rule).
pub fn list(worker_bin: &Path) -> Result<Vec<(String, String)>, HarnessError> {
    let out = std::process::Command::new(worker_bin)
        .arg(fenceproof_harness::procs::flags::LIST_MUTANTS)
        .output()
        .map_err(|e| HarnessError::Other(format!("cannot run {}: {e}", worker_bin.display())))?;
    if !out.status.success() {
        return Err(HarnessError::Other(format!(
            "{} offers no mutants (it is a reference build); build the mutant worker with `just build-mutants`",
            worker_bin.display()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(n, r)| (n.to_string(), r.to_string())))
        .collect())
}

fn failures(m: &Matrix) -> Vec<String> {
    m.results.iter().filter(|r| r.outcome != Outcome::Pass).map(|r| format!("{} {}", r.id, r.outcome.label())).collect()
}

/// Run the reference and every selected mutant; save `mutants.json` / `mutants.md`.
/// Every mutant through `experiments`, their rows side by side (the session's jobs): each
/// mutant's rows in its order (an operator-side mutant first in the experiment of its operator
/// step), the first rows of all mutants before their second ones; with `first_kill`, a mutant's
/// rows not yet started when one kills it are not run.
async fn mutant_rows(
    session: &mut Session,
    experiments: &[Experiment],
    mutants: &[(String, String)],
    first_kill: bool,
) -> Result<Vec<MutantRow>, HarnessError> {
    let mut units = Vec::new();
    let mut order_key = Vec::new();
    for (group, (name, _)) in mutants.iter().enumerate() {
        let first = fenceproof_protocol::mutant::Mutant::parse(name)
            .and_then(fenceproof_scenarios::operator_experiment)
            .map(|e| e.id);
        let mut order: Vec<&Experiment> = experiments.iter().collect();
        order.sort_by_key(|e| Some(e.id) != first);
        for (pos, exp) in order.into_iter().enumerate() {
            order_key.push((pos, group));
            units.push(Unit {
                group,
                label: format!("mutant-{name}"),
                exp: *exp,
                args: vec!["--mutant".to_string(), name.clone()],
                worker_bin: None,
                sql_patch: None,
            });
        }
    }
    let mut start: Vec<usize> = (0..units.len()).collect();
    start.sort_by_key(|&i| order_key[i]);
    let (mut slots, died) = session.units(&units, &start, |r| first_kill && kills(r.outcome)).await?;
    if died.is_none() {
        session.rerun_starved_unkilled(&units, &mut slots, kills).await?;
    }
    let mut rows = Vec::new();
    for (group, (name, rule)) in mutants.iter().enumerate() {
        let verdicts: Vec<(String, Outcome)> = units
            .iter()
            .zip(&slots)
            .filter(|(u, _)| u.group == group)
            .filter_map(|(_, r)| r.as_ref().map(|r| (r.id.clone(), r.outcome)))
            .collect();
        let killed = verdicts.iter().any(|(_, o)| kills(*o));
        let row = MutantRow { mutant: name.clone(), rule: rule.clone(), verdicts, killed };
        eprintln!(
            "[{}/{}] {name}: {}",
            group + 1,
            mutants.len(),
            if killed { format!("killed by {}", row.killers().join(", ")) } else { "SURVIVED".into() }
        );
        rows.push(row);
    }
    Ok(rows)
}

pub async fn run(
    opts: &VerifyOptions,
    experiments: Vec<Experiment>,
    only: Option<&[String]>,
    first_kill: bool,
) -> Result<(KillMatrix, PathBuf), HarnessError> {
    let mut mutants = list(&opts.worker_bin)?;
    if let Some(only) = only {
        for want in only {
            if !mutants.iter().any(|(n, _)| n == want) {
                return Err(HarnessError::Other(format!("unknown mutant '{want}'")));
            }
        }
        mutants.retain(|(n, _)| only.contains(n));
    }
    let mut session = Session::start(opts).await?;
    let reference = session.matrix("reference", &experiments, &[]).await?;
    let reference_failures = failures(&reference);
    eprintln!(
        "reference: {}",
        if reference_failures.is_empty() { "all PASS".into() } else { reference_failures.join(", ") }
    );
    let rows = mutant_rows(&mut session, &experiments, &mutants, first_kill).await?;
    let km = KillMatrix {
        run_id: session.run.run_id.clone(),
        reference_passed: reference_failures.is_empty(),
        reference_failures,
        experiments: experiments.iter().map(|e| e.id.to_string()).collect(),
        rows,
        duration_ms: session.elapsed_ms(),
    };
    let path = session.run.path.clone();
    reference.save(&path)?;
    std::fs::write(path.join("mutants.json"), serde_json::to_string_pretty(&km).expect("json"))?;
    std::fs::write(path.join("mutants.md"), km.markdown())?;
    session.run.mark_latest()?;
    Ok((km, path))
}
