//! `fenceproof schedules against-mutants`: the randomized search alone against every named mutant, each
//! with the same seed and a fixed time budget, and its kill matrix beside the experiments' (read
//! from the newest `mutants.json` under the reports folder, when there is one). Up to `--jobs`
//! mutants are searched at once, each on a session of its own (its own server; the extra
//! sessions' run folders inside the command's): a mutant's cases depend only on the seed, so each
//! plays the same cases as it would alone.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use fenceproof_harness::HarnessError;
use futures_util::future::join;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde::Serialize;

use super::{run, Limit};
use fenceproof_scenarios::runner::{Server, Session, VerifyOptions};

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
    /// A survivor whose search the machine starved (its CPU pressure), and so was searched again
    /// alone once every other mutant's search had ended: what the starved search measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starved: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScheduleKillMatrix {
    pub run_id: String,
    pub seed: String,
    /// Each mutant's limit: seconds of searching, or cases (one of the two is set).
    pub budget_s: Option<u64>,
    pub budget_cases: Option<u32>,
    /// How many mutants were searched at once (each on a session of its own).
    pub jobs: usize,
    pub rows: Vec<ScheduleKill>,
    pub experiments_matrix: Option<PathBuf>,
    pub duration_ms: u128,
}

impl ScheduleKillMatrix {
    /// Each mutant's limit, as the search had it.
    pub fn limit(&self) -> Limit {
        match (self.budget_cases, self.budget_s) {
            (Some(n), _) => Limit::Cases(n),
            (None, s) => Limit::Seconds(Duration::from_secs(s.unwrap_or(0))),
        }
    }

    pub fn killed(&self) -> usize {
        self.rows.iter().filter(|r| r.killed).count()
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "fenceproof schedules against-mutants run {} (seed {}, budget {} per mutant, {} at once)\n",
            self.run_id,
            self.seed,
            self.limit().describe(),
            self.jobs
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
            "# fenceproof schedules against-mutants `{}`\n\nSeed `{}`, budget {} per mutant, {} at once. {}/{} killed.\n\n",
            self.run_id,
            self.seed,
            self.limit().describe(),
            self.jobs,
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
            starved: None,
        }
    }

    /// A survivor (no kill, no error) whose search ran while the machine queued for its cores.
    fn survived_starved(&self) -> bool {
        !self.killed && self.error.is_none() && self.starved.is_some()
    }
}

/// The matrix of a finished search, saved as `<stem>.json` / `<stem>.md` in the run folder.
fn finish(
    session: &Session,
    seed: u64,
    budget: Limit,
    rows: Vec<ScheduleKill>,
    experiments_matrix: Option<PathBuf>,
    stem: &str,
) -> Result<(ScheduleKillMatrix, PathBuf), HarnessError> {
    let km = ScheduleKillMatrix {
        run_id: session.run.run_id.clone(),
        seed: format!("{seed:#x}"),
        budget_s: match budget {
            Limit::Seconds(d) => Some(d.as_secs()),
            Limit::Cases(_) => None,
        },
        budget_cases: match budget {
            Limit::Cases(n) => Some(n),
            Limit::Seconds(_) => None,
        },
        jobs: side_by_side(session, rows.len()),
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

/// One mutant's search on a session it has to itself, handing the session back with the row.
type Searched<'a> = Pin<Box<dyn Future<Output = (Session, ScheduleKill)> + 'a>>;

/// The mutants still to search and the rows found so far, shared by the sessions searching side
/// by side (all polled on one thread).
struct Work {
    next: Cell<usize>,
    done: Cell<usize>,
    rows: RefCell<Vec<Option<ScheduleKill>>>,
}

impl Work {
    fn new(n: usize) -> Work {
        Work { next: Cell::new(0), done: Cell::new(0), rows: RefCell::new(vec![None; n]) }
    }

    /// The next mutant (by its index in the list) for a session that is free.
    fn take(&self) -> Option<usize> {
        let i = self.next.get();
        (i < self.rows.borrow().len()).then(|| {
            self.next.set(i + 1);
            i
        })
    }

    /// Mutant `i` is searched: its progress line, and its row in its place in the list.
    fn put(&self, i: usize, row: ScheduleKill) {
        self.done.set(self.done.get() + 1);
        let mut rows = self.rows.borrow_mut();
        eprintln!(
            "[{}/{}] {}: {} after {} case(s), {:.0}s{}",
            self.done.get(),
            rows.len(),
            row.mutant,
            verdict(&row),
            row.cases_played,
            row.seconds,
            row.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
        );
        rows[i] = Some(row);
    }
}

/// Search mutants on `session`, one after another, until none is left; the session back.
async fn lane<'a, F>(mut session: Session, work: &Work, one: &F) -> Session
where
    F: Fn(Session, usize) -> Searched<'a>,
{
    while let Some(i) = work.take() {
        let (s, row) = one(session, i).await;
        session = s;
        work.put(i, row);
    }
    session
}

/// A lane on a session of its own (its server, its run folder inside `dir`), finished at the end.
async fn child_lane<'a, F>(opts: &VerifyOptions, dir: &Path, work: &Work, one: &F) -> Result<(), HarnessError>
where
    F: Fn(Session, usize) -> Searched<'a>,
{
    let o = VerifyOptions {
        backend: opts.backend,
        pg_image: opts.pg_image.clone(),
        pg_bin: opts.pg_bin.clone(),
        database_url: opts.database_url.clone(),
        contract: opts.contract.clone(),
        contract_path: opts.contract_path.clone(),
        reports_dir: dir.to_path_buf(),
        worker_bin: opts.worker_bin.clone(),
        worker_dir: opts.worker_dir.clone(),
        tools_bin: opts.tools_bin.clone(),
        skip_conformance: opts.skip_conformance,
        conformance_report: opts.conformance_report.clone(),
        jobs: opts.jobs,
        write_path: opts.write_path,
        judging: opts.judging,
        starved_reruns: opts.starved_reruns,
        program: opts.program.clone(),
    };
    let session = Session::start(&o).await?;
    lane(session, work, one).await.finish().await
}

/// How many of `n` mutants `session` searches at once: its jobs, one against a team's database
/// (the schemas a session drops at its end are every session's).
fn side_by_side(session: &Session, n: usize) -> usize {
    if matches!(session.server, Server::External(_)) {
        1
    } else {
        session.jobs.clamp(1, n.max(1))
    }
}

/// Search `n` mutants with `one`, up to `opts.jobs` at once: `session` (the command's own) is one
/// of the searching sessions, the others are started beside it, their run folders inside its own;
/// a mutant goes to whichever session is free next ([`side_by_side`]). Rows in the order of the
/// list.
async fn search_each<'a, F>(
    session: Session,
    opts: &VerifyOptions,
    n: usize,
    one: F,
) -> (Session, Result<Vec<ScheduleKill>, HarnessError>)
where
    F: Fn(Session, usize) -> Searched<'a>,
{
    let jobs = side_by_side(&session, n);
    let work = Work::new(n);
    let dir = session.run.path.clone();
    let children: FuturesUnordered<_> = (1..jobs).map(|_| child_lane(opts, &dir, &work, &one)).collect();
    let (session, started) = join(lane(session, &work, &one), children.collect::<Vec<_>>()).await;
    let mut error = None;
    for e in started.into_iter().filter_map(Result::err) {
        eprintln!("fenceproof: a search session beside the first one failed: {e}");
        error.get_or_insert(e);
    }
    let rows: Option<Vec<ScheduleKill>> = work.rows.into_inner().into_iter().collect();
    let rows = rows.ok_or_else(|| error.unwrap_or_else(|| HarnessError::Other("a mutant was not searched".into())));
    (session, rows)
}

/// Each survivor whose search the machine starved is searched again, alone, once every search has
/// ended (a schedule that did not reach its moment on a starved machine kills nothing: a false
/// survivor, as the pool's load made two at 21 runnable processes on two cores). The new search's
/// verdict is the row's; its `starved` says it was searched again and why.
async fn search_starved_again<'a, F>(
    mut session: Session,
    mut rows: Vec<ScheduleKill>,
    one: &F,
) -> (Session, Vec<ScheduleKill>)
where
    F: Fn(Session, usize) -> Searched<'a>,
{
    let again: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].survived_starved()).collect();
    for i in again {
        let first = rows[i].starved.clone().unwrap_or_default();
        eprintln!("{}: survived a starved search ({first}); searching it again alone", rows[i].mutant);
        let (s, mut again) = one(session, i).await;
        session = s;
        again.starved = Some(format!(
            "searched again alone after a starved search ({first}){}",
            again.starved.as_deref().map(|d| format!("; starved again: {d}")).unwrap_or_default()
        ));
        rows[i] = again;
    }
    (session, rows)
}

/// The selected named mutants (all of them without `only`), less the operator-side ones.
fn named_selection(opts: &VerifyOptions, only: Option<&[String]>) -> Result<Vec<(String, String)>, HarnessError> {
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
    // A mutant only a scripted execution shows (see `Mutant::schedules_blind`) is not searched
    // either; the experiments kill it.
    mutants.retain(|(n, _)| match fenceproof_protocol::mutant::Mutant::parse(n).and_then(|m| m.schedules_blind()) {
        Some(why) => {
            eprintln!(
                "{n}: not searched (the schedules cannot show it: {why}); the experiments' kill matrix judges it"
            );
            false
        }
        None => true,
    });
    mutants.retain(|(n, _)| {
        let operator =
            fenceproof_protocol::mutant::Mutant::parse(n).and_then(fenceproof_scenarios::operator_experiment);
        if let Some(exp) = &operator {
            eprintln!("{n}: not searched (an operator step the schedules do not perform; killed by {})", exp.id);
        }
        operator.is_none()
    });
    Ok(mutants)
}

/// Search each selected mutant with `budget` from `seed`, up to `opts.jobs` of them at once (each
/// on a session of its own: the same cases as one after another); save `schedules-mutants.json` /
/// `.md`.
pub async fn search(
    opts: &VerifyOptions,
    only: Option<&[String]>,
    seed: u64,
    budget: Limit,
) -> Result<(ScheduleKillMatrix, PathBuf), HarnessError> {
    let mutants = named_selection(opts, only)?;
    let known = experiments_matrix(&opts.reports_dir);
    let one = |mut session: Session, i: usize| -> Searched<'_> {
        let (name, rule) = &mutants[i];
        let experiments = known.as_ref().map(|(_, m)| m.get(name).cloned().unwrap_or_default());
        Box::pin(async move {
            let started = Instant::now();
            let cpu = fenceproof_harness::pressure::mark();
            let args = vec!["--mutant".to_string(), name.clone()];
            let searched = run(&mut session, budget.start(), seed, &args, "", false, name).await;
            let mut row = ScheduleKill::of(name, rule, started, searched, experiments);
            let stall = cpu.and_then(|m| m.since()).filter(fenceproof_harness::pressure::Stall::starved);
            row.starved = stall.map(|s| s.describe());
            (session, row)
        })
    };
    let session = Session::start(opts).await?;
    let (session, rows) = search_each(session, opts, mutants.len(), &one).await;
    let (session, rows) = match rows {
        Ok(rows) => {
            let (session, rows) = search_starved_again(session, rows, &one).await;
            (session, Ok(rows))
        }
        Err(e) => (session, Err(e)),
    };
    let saved = rows.and_then(|rows| finish(&session, seed, budget, rows, known.map(|(p, _)| p), "schedules-mutants"));
    let finished = session.finish().await;
    let saved = saved?;
    finished?;
    Ok(saved)
}

/// One generated SQL mutant's search on `session`: the mutated function installed in every
/// schedule's database, or the statement given to the mutant worker; the session as it was after.
async fn search_sql_one(
    session: &mut Session,
    sel: &crate::sql::Selection,
    m: &crate::sqlmut::SqlMutant,
    seed: u64,
    budget: Limit,
) -> Result<super::Summary, HarnessError> {
    let reference_bin = session.worker_bin.clone();
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
    let r = run(session, budget.start(), seed, &args, "", false, &label).await;
    session.sql_patch = None;
    session.worker_bin = reference_bin;
    r
}

/// `schedules against-mutants --sql`: the same search against the generated SQL mutants of the selection
/// (an fp_* function installed mutated in every schedule's database, or a direct-path statement
/// given to the mutant worker), up to `opts.jobs` at once, each on a session of its own. Reviewed
/// equivalents are marked as such in the rule column.
pub async fn search_sql(
    opts: &VerifyOptions,
    sel: &crate::sql::Selection,
    seed: u64,
    budget: Limit,
) -> Result<(ScheduleKillMatrix, PathBuf), HarnessError> {
    let mutants = crate::sql::pick(sel).map_err(HarnessError::Other)?;
    let listed = crate::equivalents::load().map_err(HarnessError::Other)?;
    let one = |mut session: Session, i: usize| -> Searched<'_> {
        let m = &mutants[i];
        let mut rule = format!("L{}: {} => {}", m.line, m.before.trim(), m.after.trim());
        if let Some(reason) = listed.get(&m.id) {
            rule = format!("{rule} (reviewed equivalent: {reason})");
        }
        Box::pin(async move {
            let started = Instant::now();
            let r = search_sql_one(&mut session, sel, m, seed, budget).await;
            (session, ScheduleKill::of(&m.id, &rule, started, r, None))
        })
    };
    let session = Session::start(opts).await?;
    let (session, rows) = search_each(session, opts, mutants.len(), one).await;
    let saved = rows.and_then(|rows| finish(&session, seed, budget, rows, None, "schedules-mutants-sql"));
    let finished = session.finish().await;
    let saved = saved?;
    finished?;
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(killed: bool, error: Option<&str>, starved: Option<&str>) -> ScheduleKill {
        ScheduleKill {
            mutant: "m".into(),
            rule: "r".into(),
            killed,
            case: None,
            failed_checks: Vec::new(),
            cases_played: 40,
            seconds: 1.0,
            experiments: None,
            error: error.map(str::to_string),
            starved: starved.map(str::to_string),
        }
    }

    #[test]
    fn only_a_survivor_of_a_starved_search_is_searched_again() {
        let busy = Some("some process waited for a core 9100 ms of the row's 31000 ms");
        assert!(row(false, None, busy).survived_starved(), "a survivor on a starved machine");
        assert!(!row(false, None, None).survived_starved(), "a survivor on a calm machine stands");
        assert!(!row(true, None, busy).survived_starved(), "a kill stands, starved or not");
        assert!(!row(false, Some("harness"), busy).survived_starved(), "an error is no survivor");
    }
}
