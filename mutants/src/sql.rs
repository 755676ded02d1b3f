//! `fenceproof mutants sql`: the generated mutants ([`crate::sqlmut`]) of the fenced
//! fp_* functions, each installed in every experiment's fresh database and run through the matrix
//! with the reference worker, and of the worker's direct-path statements (`protocol::sql`), each run
//! by the mutants build of the worker on the direct path (and, where the statement has a fenced
//! twin, also installed as that function for the P-api probes). A mutant is killed only by a FAIL: an ERROR is no
//! verdict, so it does not count. Survivors must be listed as equivalent, with the reason, in
//! `mutants/src/equivalent_mutants.toml`; a listed mutant that is killed makes that entry wrong.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::equivalents;
use crate::kill_order;
use crate::reach::{self, Reach};
use crate::sqlmut::{self, SqlMutant};
use fenceproof_harness::report::{ExperimentResult, Outcome};
use fenceproof_harness::HarnessError;
use serde::{Deserialize, Serialize};

use fenceproof_scenarios::experiment::Judges;
use fenceproof_scenarios::jobs::Unit;
use fenceproof_scenarios::runner::{Session, VerifyOptions};
use fenceproof_scenarios::Experiment;

/// What happened to one generated mutant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// At least one experiment FAILed.
    Killed,
    /// Survived, and listed as equivalent with a reason.
    Equivalent,
    /// Survived and not listed: a gap in the suite.
    Survived,
    /// Listed as equivalent, but an experiment FAILed: the listing is wrong.
    KilledButListed,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SqlMutantRow {
    pub id: String,
    pub function: String,
    pub operator: String,
    pub line: usize,
    pub before: String,
    pub after: String,
    /// Per experiment id: its verdict with the mutant installed.
    pub verdicts: Vec<(String, Outcome)>,
    /// The experiments that FAILed, each with the checks that failed.
    pub killed_by: Vec<String>,
    pub fate: Fate,
    /// The reviewed reason, for an equivalent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SqlKillMatrix {
    pub run_ids: Vec<String>,
    /// `K/N` of each shard this matrix holds.
    pub shards: Vec<String>,
    pub generated: usize,
    pub reference_passed: bool,
    pub reference_failures: Vec<String>,
    pub experiments: Vec<String>,
    pub rows: Vec<SqlMutantRow>,
    pub duration_ms: u128,
}

impl SqlKillMatrix {
    pub fn count(&self, fate: Fate) -> usize {
        self.rows.iter().filter(|r| r.fate == fate).count()
    }

    /// Every non-equivalent mutant killed, every listed equivalent survived, the reference clean.
    pub fn ok(&self) -> bool {
        self.reference_passed
            && self.count(Fate::Survived) == 0
            && self.count(Fate::KilledButListed) == 0
            && !self.rows.is_empty()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} generated SQL mutants run ({} in the set): {} killed, {} equivalent, {} survived, {} listed as equivalent but killed; reference {}; {:.1}s",
            self.rows.len(),
            self.generated,
            self.count(Fate::Killed),
            self.count(Fate::Equivalent),
            self.count(Fate::Survived),
            self.count(Fate::KilledButListed),
            if self.reference_passed { "clean".to_string() } else { format!("FAILED {}", self.reference_failures.join(", ")) },
            self.duration_ms as f64 / 1000.0
        )
    }

    pub fn table(&self) -> String {
        let mut s = String::new();
        let w = self.rows.iter().map(|r| r.id.len()).max().unwrap_or(6).max(6);
        let _ = writeln!(s, "{:<w$} {:<10} line  killed by", "mutant", "fate");
        for r in &self.rows {
            let fate = match r.fate {
                Fate::Killed => "KILLED",
                Fate::Equivalent => "equivalent",
                Fate::Survived => "SURVIVED",
                Fate::KilledButListed => "LISTED-BUT-KILLED",
            };
            let who = match r.fate {
                Fate::Equivalent => r.reason.clone().unwrap_or_default(),
                Fate::Survived => format!("{} => {}", r.before, r.after),
                _ => r.killed_by.iter().map(|k| k.split(':').next().unwrap_or("")).collect::<Vec<_>>().join(", "),
            };
            let _ = writeln!(s, "{:<w$} {:<10} {:<5} {}", r.id, fate, r.line, truncate(&who, 140));
        }
        s.push_str(&self.summary());
        s.push('\n');
        s
    }

    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# Generated SQL mutants of `{}` and of the direct-path statements (`protocol/src/sql.rs`)\n\n{}\n\nShards: {}. Runs: {}.\n\n",
            sqlmut::SOURCE_FILE,
            self.summary(),
            self.shards.join(", "),
            self.run_ids.join(", ")
        );
        s.push_str("| mutant | operator | line | change | fate | killed by |\n|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let change = format!("`{}` → `{}`", r.before.replace('|', "\\|"), r.after.replace('|', "\\|"));
            let who = match r.fate {
                Fate::Equivalent => format!("equivalent: {}", r.reason.clone().unwrap_or_default()),
                _ => r.killed_by.iter().map(|k| k.split(':').next().unwrap_or("")).collect::<Vec<_>>().join(", "),
            };
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {:?} | {} |",
                r.id,
                r.operator,
                r.line,
                change,
                r.fate,
                who.replace('|', "\\|")
            );
        }
        s.push_str("\n## Checks that failed, per killed mutant\n\n");
        for r in self.rows.iter().filter(|r| !r.killed_by.is_empty()) {
            let _ = writeln!(s, "- `{}`: {}", r.id, r.killed_by.join("; ").replace('|', "\\|"));
        }
        s
    }

    /// Join shard matrices into one (rows in generation order, each mutant once).
    pub fn merge(parts: Vec<SqlKillMatrix>) -> Result<SqlKillMatrix, String> {
        let Some(first) = parts.first() else { return Err("nothing to merge".into()) };
        let mut m = SqlKillMatrix {
            run_ids: Vec::new(),
            shards: Vec::new(),
            generated: first.generated,
            reference_passed: true,
            reference_failures: Vec::new(),
            experiments: first.experiments.clone(),
            rows: Vec::new(),
            duration_ms: 0,
        };
        for p in parts {
            if p.experiments != m.experiments {
                return Err(format!(
                    "shards ran different experiments ({} vs {})",
                    p.experiments.join(","),
                    m.experiments.join(",")
                ));
            }
            m.run_ids.extend(p.run_ids);
            m.shards.extend(p.shards);
            m.reference_passed &= p.reference_passed;
            m.reference_failures.extend(p.reference_failures);
            m.duration_ms += p.duration_ms;
            for r in p.rows {
                if m.rows.iter().any(|x| x.id == r.id) {
                    return Err(format!("mutant {} is in two shards", r.id));
                }
                m.rows.push(r);
            }
        }
        let order: Vec<String> = all_mutants().into_iter().map(|g| g.id).collect();
        m.rows.sort_by_key(|r| order.iter().position(|o| *o == r.id).unwrap_or(usize::MAX));
        Ok(m)
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// The whole generated set: the fenced functions of migration 0002, then the direct-path
/// statements of the protocol crate (`fenceproof_protocol::sql::DIRECT`).
pub fn all_mutants() -> Vec<SqlMutant> {
    let mut all = sqlmut::generate();
    for (name, text) in fenceproof_protocol::sql::DIRECT {
        all.extend(sqlmut::generate_statement(name, text));
    }
    all
}

/// Whether a mutant rewrites a direct-path statement (run by a mutants build of the worker on the
/// direct path) rather than an fp_* function (installed in the database).
pub fn is_direct(id: &str) -> bool {
    id.starts_with("direct/")
}

/// The fenced function a direct-path statement implements one to one (same parameters in the same
/// order, same result columns), and whether that function answers a row count instead of rows.
const FENCED_TWIN: &[(&str, &str, bool)] = &[
    ("lease_acquire", "fp_lease_acquire", false),
    ("lease_renew", "fp_lease_renew", false),
    ("lease_release", "fp_lease_release", true),
    ("claim", "fp_claim", false),
    ("record_result", "fp_record_result", false),
    ("mark_unknown_own", "fp_mark_unknown_own", false),
    ("mark_expired_unknown", "fp_mark_expired_unknown", true),
    ("converge", "fp_converge", false),
];

/// For a direct-path statement with a fenced twin: a `CREATE OR REPLACE FUNCTION` of that twin
/// whose body runs `statement` (with the twin's parameters as `$1..$n`), so the P-api probes judge
/// the statement with the same adversarial arguments they give the functions.
pub fn twin_wrapper(name: &str, statement: &str) -> Option<String> {
    let (_, fp, counts) = FENCED_TWIN.iter().find(|(n, _, _)| *n == name)?;
    let f = sqlmut::parse::functions(fenceproof_harness::db::databases::MIGRATIONS[1].1)
        .into_iter()
        .find(|f| f.name == *fp)?;
    // The parameter names, in order, from the header's argument list.
    let args = f.header.split_once('(')?.1;
    let args = &args[..args.find(")\n")?];
    let names: Vec<&str> = args.split(',').filter_map(|a| a.split_whitespace().next()).collect();
    let using = names.join(", ");
    let body = if *counts {
        format!(
            "DECLARE\n  n bigint;\nBEGIN\n  EXECUTE $stmt${statement}$stmt$ USING {using};\n  GET DIAGNOSTICS n = ROW_COUNT;\n  RETURN n;\nEND\n"
        )
    } else {
        format!("BEGIN\n  RETURN QUERY EXECUTE $stmt${statement}$stmt$ USING {using};\nEND\n")
    };
    Some(f.replacement(&body))
}

/// Which mutants to run.
pub struct Selection {
    /// `(k, n)`: the k-th of n deterministic shares.
    pub shard: (usize, usize),
    /// Only mutants whose id starts with one of these.
    pub only: Option<Vec<String>>,
    /// Stop each mutant at its first FAIL (the matrix then lists that row only); the probes of
    /// the fenced functions run first, so most mutants cost one short row.
    pub first_kill: bool,
    /// The mutants build of the worker, for the direct-path statements.
    pub mutant_worker_bin: PathBuf,
}

/// Parse `K/N` (1 ≤ K ≤ N).
pub fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("bad --shard '{s}' (K/N with 1 <= K <= N, e.g. 2/4)");
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (k.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// The mutants `sel` picks from the generated set.
pub fn pick(sel: &Selection) -> Result<Vec<SqlMutant>, String> {
    let all = all_mutants();
    let mut ms = sqlmut::shard(&all, sel.shard.0, sel.shard.1);
    if let Some(only) = &sel.only {
        for o in only {
            if !all.iter().any(|m| m.id.starts_with(o.as_str())) {
                return Err(format!(
                    "no generated SQL mutant id starts with '{o}' (see `fenceproof mutants sql --list`)"
                ));
            }
        }
        ms.retain(|m| only.iter().any(|o| m.id.starts_with(o.as_str())));
    }
    Ok(ms)
}

/// The rows that judge a SQL mutant: all but the worker's paths (Model-paths drives the worker
/// under test through the model's paths, several hundred runs; the same paths on the fenced
/// functions are Model-paths-db's, and the direct statements are the other rows' to kill). An
/// error when nothing is left (`--only Model-paths`).
fn judging_sql(experiments: Vec<Experiment>) -> Result<Vec<Experiment>, HarnessError> {
    use fenceproof_scenarios::experiment::Need;
    let kept: Vec<Experiment> =
        experiments.into_iter().filter(|e| !e.needs(Need::ModelPaths) || e.needs(Need::DatabaseProbe)).collect();
    if kept.is_empty() {
        return Err(HarnessError::Other(
            "the SQL mutants are judged by the rows that run SQL against them, not by Model-paths (the worker's \
             paths): select Model-paths-db to play the model's paths on the fenced functions"
                .into(),
        ));
    }
    Ok(kept)
}

/// Run the reference and every picked mutant; save `mutants-sql.json` / `.md` in the run folder.
pub async fn run(
    opts: &VerifyOptions,
    experiments: Vec<Experiment>,
    sel: &Selection,
) -> Result<(SqlKillMatrix, PathBuf), HarnessError> {
    let experiments = judging_sql(experiments)?;
    let mutants = pick(sel).map_err(HarnessError::Other)?;
    let listed = equivalents::load().map_err(HarnessError::Other)?;
    let mut session = Session::start(opts).await?;
    let reference = session.matrix("reference", &experiments, &[]).await?;
    let mut reference_failures = failures(&reference.results, "");
    eprintln!(
        "reference: {}",
        if reference_failures.is_empty() { "all PASS".into() } else { reference_failures.join(", ") }
    );
    // Direct-path mutants run in a mutants build of the worker, on the direct path, through the
    // experiments that drive workers (A-G; P-* and the probes judge the role boundary and the
    // functions, which a direct-path worker bypasses by construction).
    let direct_experiments: Vec<&Experiment> =
        experiments.iter().filter(|e| !matches!(e.judges, Judges::Functions | Judges::Boundary)).collect();
    // A statement with a fenced twin is also run as that twin, through the P-api probes.
    let twin_experiments: Vec<&Experiment> = experiments.iter().filter(|e| e.judges != Judges::Boundary).collect();
    let mut reach = Reach::default();
    if mutants.iter().any(|m| is_direct(&m.id)) {
        let (failed, reached) = reference_on_the_direct_path(&mut session, &direct_experiments, sel).await?;
        reference_failures.extend(failed);
        reach = reached;
    }
    // Each mutant's rows, the one that killed it in an earlier run first (order only).
    let hints = kill_order::load();
    let exps_of = |m: &SqlMutant| -> Vec<&Experiment> {
        let exps = match (is_direct(&m.id), twin_wrapper_of(m).is_some()) {
            (true, true) => twin_experiments.clone(),
            (true, false) => {
                let name = m.function.trim_start_matches("direct/");
                direct_experiments.iter().copied().filter(|e| reach.may_reach(e.id, name)).collect()
            }
            (false, _) => experiments.iter().collect(),
        };
        kill_order::front(exps, hints.get(&m.id))
    };
    let rows = mutant_rows(&mut session, &mutants, exps_of, sel, &listed).await?;
    let km = SqlKillMatrix {
        run_ids: vec![session.run.run_id.clone()],
        shards: vec![format!("{}/{}", sel.shard.0, sel.shard.1)],
        generated: all_mutants().len(),
        reference_passed: reference_failures.is_empty(),
        reference_failures,
        experiments: experiments.iter().map(|e| e.id.to_string()).collect(),
        rows,
        duration_ms: session.elapsed_ms(),
    };
    let path = session.run.path.clone();
    reference.save(&path)?;
    save(&km, &path)?;
    session.run.mark_latest()?;
    session.finish().await?;
    Ok((km, path))
}

/// The rows that did not PASS, as `<prefix><id> <verdict>`.
fn failures(results: &[ExperimentResult], prefix: &str) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.outcome != Outcome::Pass)
        .map(|r| format!("{prefix}{} {}", r.id, r.outcome.label()))
        .collect()
}

/// The reference on the direct path: the mutants build with an identity override, through the
/// experiments that drive workers; the rows that did not PASS, and the statements each row reached.
/// The session's worker is the reference build again afterwards, whatever happened.
async fn reference_on_the_direct_path(
    session: &mut Session,
    direct_experiments: &[&Experiment],
    sel: &Selection,
) -> Result<(Vec<String>, Reach), HarnessError> {
    let reference_bin = session.worker_bin.clone();
    let bin = sel.mutant_worker_bin.clone();
    if !bin.is_file() {
        return Err(HarnessError::Other(format!(
            "direct-path SQL mutants need the mutants build of the worker ({}); build it with `just build-mutants`",
            bin.display()
        )));
    }
    let (name, text) = fenceproof_protocol::sql::DIRECT[0];
    let file = override_file(&session.run.path, "identity", name, text)?;
    session.worker_bin = bin;
    let args = vec!["--sql-mutant".to_string(), file.display().to_string(), reach::FLAG.to_string()];
    let exps: Vec<Experiment> = direct_experiments.iter().map(|e| **e).collect();
    let m = session.matrix("reference-direct", &exps, &args).await;
    session.worker_bin = reference_bin;
    let m = m?;
    let failed = failures(&m.results, "direct ");
    let reached = Reach::read(&session.run.path, &m.results);
    eprintln!(
        "reference on the direct path: {}; a direct statement's mutants run through the rows that reached it ({} of {} rows known)",
        if failed.is_empty() { "all PASS".into() } else { failed.join(", ") },
        reached.known(),
        exps.len()
    );
    Ok((failed, reached))
}

/// The fenced twin a direct-path mutant is also installed as, if its statement has one.
fn twin_wrapper_of(m: &SqlMutant) -> Option<String> {
    is_direct(&m.id).then(|| twin_wrapper(m.function.trim_start_matches("direct/"), &m.sql)).flatten()
}

/// The units of mutant `m` (group `group`) through `exps`: a fenced-function mutant installed in
/// each fresh database, a direct-path one run by the mutants build (and installed as its twin).
fn mutant_units(
    session: &Session,
    group: usize,
    m: &SqlMutant,
    exps: &[&Experiment],
    sel: &Selection,
) -> Result<Vec<Unit>, HarnessError> {
    let (mut args, mut worker_bin, sql_patch) = (Vec::new(), None, Some(m.sql.clone()));
    let sql_patch = if is_direct(&m.id) {
        let name = m.function.trim_start_matches("direct/");
        let file = override_file(&session.run.path, &m.id.replace('/', "-"), name, &m.sql)?;
        args = vec!["--sql-mutant".to_string(), file.display().to_string()];
        worker_bin = Some(sel.mutant_worker_bin.clone());
        twin_wrapper(name, &m.sql)
    } else {
        sql_patch
    };
    let label = format!("sql-{}", m.id.replace('/', "-"));
    Ok(exps
        .iter()
        .map(|exp| Unit {
            group,
            label: label.clone(),
            exp: **exp,
            args: args.clone(),
            worker_bin: worker_bin.clone(),
            sql_patch: sql_patch.clone(),
        })
        .collect())
}

/// Every mutant through its experiments, side by side (the session's jobs), the first rows of all
/// mutants before their second ones; with `first_kill` a mutant's rows not yet started when one
/// FAILs it are not run. Each mutant's row, judged against the equivalents list.
async fn mutant_rows<'e>(
    session: &mut Session,
    mutants: &[SqlMutant],
    exps_of: impl Fn(&SqlMutant) -> Vec<&'e Experiment>,
    sel: &Selection,
    listed: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<SqlMutantRow>, HarnessError> {
    let mut units = Vec::new();
    let mut key = Vec::new();
    for (group, m) in mutants.iter().enumerate() {
        for (pos, u) in mutant_units(session, group, m, &exps_of(m), sel)?.into_iter().enumerate() {
            key.push((pos, group));
            units.push(u);
        }
    }
    let mut start: Vec<usize> = (0..units.len()).collect();
    start.sort_by_key(|&i| key[i]);
    let first_kill = sel.first_kill;
    let (mut slots, died) = session.units(&units, &start, |r| first_kill && r.outcome == Outcome::Fail).await?;
    if died.is_none() {
        session.rerun_starved_unkilled(&units, &mut slots, |o| o == Outcome::Fail).await?;
    }
    let mut rows = Vec::new();
    for (group, m) in mutants.iter().enumerate() {
        let results: Vec<ExperimentResult> =
            units.iter().zip(&slots).filter(|(u, _)| u.group == group).filter_map(|(_, r)| r.clone()).collect();
        let row = judge(m, &results, listed.get(&m.id).cloned());
        eprintln!("[{}/{}] {}: {}", group + 1, mutants.len(), m.id, fate_line(&row));
        rows.push(row);
    }
    Ok(rows)
}

/// The row of mutant `m`: its verdicts, what killed it, and its fate given the equivalents list.
fn judge(m: &SqlMutant, results: &[ExperimentResult], reason: Option<String>) -> SqlMutantRow {
    let verdicts: Vec<(String, Outcome)> = results.iter().map(|r| (r.id.clone(), r.outcome)).collect();
    let killed_by: Vec<String> = results
        .iter()
        .filter(|r| r.outcome == Outcome::Fail)
        .map(|r| {
            let failed: Vec<&str> = r.checks.iter().filter(|c| !c.passed()).map(|c| c.name.as_str()).collect();
            format!("{}: {}", r.id, failed.join(" / "))
        })
        .collect();
    let fate = match (killed_by.is_empty(), reason.is_some()) {
        (false, false) => Fate::Killed,
        (false, true) => Fate::KilledButListed,
        (true, true) => Fate::Equivalent,
        (true, false) => Fate::Survived,
    };
    SqlMutantRow {
        id: m.id.clone(),
        function: m.function.clone(),
        operator: m.operator.name().into(),
        line: m.line,
        before: m.before.clone(),
        after: m.after.clone(),
        verdicts,
        killed_by,
        fate,
        reason,
    }
}

/// What the progress line says of a mutant's fate.
fn fate_line(row: &SqlMutantRow) -> String {
    match row.fate {
        Fate::Killed => format!(
            "killed by {}",
            row.killed_by.iter().map(|k| k.split(':').next().unwrap_or("")).collect::<Vec<_>>().join(", ")
        ),
        Fate::Equivalent => "survived (listed as equivalent)".into(),
        Fate::Survived => format!("SURVIVED ({} => {})", row.before, row.after),
        Fate::KilledButListed => "killed, but listed as equivalent".into(),
    }
}

/// The override a mutants build reads (`--sql-mutant FILE`): statement `name` runs as `sql`.
pub(crate) fn override_file(run: &std::path::Path, tag: &str, name: &str, sql: &str) -> Result<PathBuf, HarnessError> {
    let dir = run.join("sql-mutants");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{tag}.json"));
    std::fs::write(&file, serde_json::to_string_pretty(&serde_json::json!({"name": name, "sql": sql})).expect("json"))?;
    Ok(file)
}

/// Write `mutants-sql.json` and `mutants-sql.md` into `dir`.
pub fn save(km: &SqlKillMatrix, dir: &std::path::Path) -> Result<(), HarnessError> {
    std::fs::write(dir.join("mutants-sql.json"), serde_json::to_string_pretty(km).expect("json"))?;
    std::fs::write(dir.join("mutants-sql.md"), km.markdown())?;
    let hints =
        kill_order::updated(kill_order::load(), km.rows.iter().map(|r| (r.id.as_str(), r.killed_by.as_slice())));
    std::fs::write(dir.join("kill-order.json"), serde_json::to_string_pretty(&hints).expect("json") + "\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, fate: Fate) -> SqlMutantRow {
        SqlMutantRow {
            id: id.into(),
            function: "f".into(),
            operator: "drop-conjunct".into(),
            line: 1,
            before: "a".into(),
            after: "b".into(),
            verdicts: vec![],
            killed_by: vec![],
            fate,
            reason: None,
        }
    }

    fn km(shard: &str, rows: Vec<SqlMutantRow>) -> SqlKillMatrix {
        SqlKillMatrix {
            run_ids: vec![format!("run-{shard}")],
            shards: vec![shard.into()],
            generated: 3,
            reference_passed: true,
            reference_failures: vec![],
            experiments: vec!["A".into()],
            rows,
            duration_ms: 10,
        }
    }

    #[test]
    fn shards_merge_into_one_matrix_and_duplicates_are_refused() {
        let ids: Vec<String> = all_mutants().into_iter().map(|m| m.id).collect();
        let a = km("1/2", vec![row(&ids[2], Fate::Killed)]);
        let b = km("2/2", vec![row(&ids[0], Fate::Killed), row(&ids[1], Fate::Survived)]);
        let m = SqlKillMatrix::merge(vec![a.clone(), b]).unwrap();
        assert_eq!(m.rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>(), ids[..3].to_vec());
        assert_eq!(m.shards, vec!["1/2", "2/2"]);
        assert!(!m.ok(), "a survivor fails the matrix");
        assert!(SqlKillMatrix::merge(vec![a.clone(), a]).unwrap_err().contains("in two shards"));
    }

    #[test]
    fn listed_equivalents_exist_and_are_at_most_a_tenth_of_the_generated_set() {
        let listed = equivalents::load().unwrap();
        let all: Vec<String> = all_mutants().into_iter().map(|m| m.id).collect();
        for id in listed.keys() {
            assert!(all.contains(id), "{id} is listed as equivalent but is not generated");
        }
        assert!(listed.len() * 10 <= all.len(), "{} equivalents of {} generated", listed.len(), all.len());
    }

    #[test]
    fn direct_statements_with_a_fenced_twin_become_that_function() {
        for (name, fp, _) in FENCED_TWIN {
            let text = fenceproof_protocol::sql::DIRECT.iter().find(|(d, _)| d == name).expect("a direct statement").1;
            let w = twin_wrapper(name, text).expect("a wrapper");
            let body = w.split_once('\n').map(|(path, rest)| {
                assert!(path.starts_with("SELECT set_config('search_path'"), "{w}");
                rest
            });
            assert!(body.is_some_and(|b| b.starts_with(&format!("CREATE OR REPLACE FUNCTION {fp}("))), "{w}");
            assert!(w.contains("EXECUTE $stmt$") && w.contains(" USING p_"), "{w}");
        }
        let w = twin_wrapper("record_result", fenceproof_protocol::sql::RECORD_RESULT).unwrap();
        assert!(w.contains("USING p_op, p_owner, p_revision, p_digest, p_status, p_remote_id, p_result;"), "{w}");
        assert!(twin_wrapper("commit_update_run", "x").is_none());
    }

    #[test]
    fn shard_flags_are_checked() {
        assert_eq!(parse_shard("2/4"), Ok((2, 4)));
        for bad in ["0/4", "5/4", "x", "1/0", "2-4"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }
}
