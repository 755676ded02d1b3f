//! Rows side by side: [`Session::matrix`] runs a selection with up to `jobs` rows at once, each on
//! its own fresh database with its own processes, timeline and evidence folder, as when they run
//! one after another. A row that declares it must run alone ([`Experiment::runs_alone`]: it freezes
//! the shared server, or it measures timing) waits until the others have finished and runs with
//! nothing beside it. Everything runs on the session's one thread (children are tied to the thread
//! that spawned them); rows overlap in their waits, which are most of their time. The matrix keeps
//! the selection's order whatever order the rows finish in.
//!
//! The server's connections are budgeted as the cores are: a row starts only while the
//! connections the running rows hold ([`Experiment::connections`]) and its own fit what the server
//! allows them ([`fenceproof_harness::db::connections::Budget`], read when the session started).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::{Duration, Instant};

use fenceproof_harness::report::{ExperimentResult, Matrix, Outcome};
use fenceproof_harness::HarnessError;
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::runner::{log_finished, progress, ContextPlan, RowEnd, Session};
use crate::Experiment;

/// How one row's story ended, with its context and when it started; an error when its database
/// could not be made.
struct Ran {
    index: usize,
    result: Result<ExperimentResult, HarnessError>,
}

type Running = Pin<Box<dyn Future<Output = Ran>>>;

/// Row `index`: its database made and its story told within its ceiling
/// ([`Experiment::ceiling`]), its evidence saved
/// and its verdict, all inside the row's own future, so the other rows go on meanwhile.
fn execute(index: usize, u: Unit, plan: ContextPlan, end: RowEnd) -> Running {
    Box::pin(async move {
        let start = crate::runner::RowStart::now();
        let t0 = start.at;
        let ceiling = u.exp.ceiling();
        // The database's making counts against the row's ceiling too (a server that hangs on
        // CREATE DATABASE must not hold the matrix).
        let result = match tokio::time::timeout(ceiling, plan.build()).await {
            Ok(Ok(mut ctx)) => {
                let res = within_granted(ceiling, t0, (u.exp.run)(&mut ctx)).await;
                end.finish(&u.exp, &u.args, ctx, res, start).await
            }
            Ok(Err(e)) if e.out_of_connections() => Ok(end.starved_unmade(&u.exp, &e, t0)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(HarnessError::Other(format!("{}: its database was not made within {ceiling:?}", u.exp.id))),
        };
        Ran { index, result }
    })
}

/// `story` under the row's `ceiling` counted from `t0`, granted the scheduling delay the harness
/// measured meanwhile ([`fenceproof_harness::lag::granted`]), up to twice the ceiling: a row that
/// ran slow because the machine starved the harness is not cut off at the nominal ceiling.
async fn within_granted<F: Future + Unpin>(
    ceiling: Duration,
    t0: Instant,
    mut story: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    loop {
        let (granted, _) = fenceproof_harness::lag::granted(ceiling, t0, Duration::ZERO, 2);
        match tokio::time::timeout(granted.saturating_sub(t0.elapsed()), &mut story).await {
            Ok(done) => return Ok(done),
            Err(e) => {
                let (again, _) = fenceproof_harness::lag::granted(ceiling, t0, Duration::ZERO, 2);
                if again <= t0.elapsed() {
                    return Err(e);
                }
            }
        }
    }
}

/// Which rows run now: the next ones in [`start_order`], while fewer than `jobs` run, no row that
/// must be alone runs or waits to, and the connections the running rows hold leave room for the
/// next one's.
struct Scheduler {
    next: usize,
    alone_running: bool,
    /// The connections the running rows hold at most, by their declarations.
    held: u32,
    /// How many connections the server allows the rows (`None`: not known; no admission by
    /// connections).
    budget: Option<u32>,
}

/// The order rows start in (indices into the selection): those that must run alone first, while
/// the field is empty anyway; then longest first, by how long each took the last time it ran here
/// (`history`, [`crate::row_times`]), so the short ones fill the time beside the long ones and none
/// of the long ones starts last. A row with no history counts as long when it starts a server of its
/// own, short otherwise. With one job the selection's order is kept.
fn start_order(experiments: &[Experiment], jobs: usize, history: &BTreeMap<String, u64>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..experiments.len()).collect();
    if jobs > 1 {
        let expected = |e: &Experiment| -> u64 {
            use crate::experiment::Need;
            history.get(e.id).copied().unwrap_or_else(|| {
                let own = e.needs.iter().any(|n| {
                    matches!(
                        n,
                        Need::OwnServer
                            | Need::ClockServer
                            | Need::Standby(_)
                            | Need::Patroni(_)
                            | Need::PatroniSwitchover
                    )
                });
                if own {
                    10_000
                } else {
                    1_500
                }
            })
        };
        order.sort_by_key(|&i| (!experiments[i].runs_alone(), std::cmp::Reverse(expected(&experiments[i]))));
    }
    order
}

impl Scheduler {
    fn new(budget: Option<u32>) -> Scheduler {
        Scheduler { next: 0, alone_running: false, held: 0, budget }
    }

    /// Whether `exp` may start beside the `running` rows. A row starts on an empty field whatever
    /// it holds: it has nothing to wait for (a server too small for it alone may still refuse it a
    /// connection, and the row is then STARVED).
    fn may_start(&self, exp: &Experiment, running: usize, jobs: usize) -> bool {
        if running == 0 {
            return true;
        }
        let fits = self.budget.is_none_or(|b| self.held + exp.connections() <= b);
        !self.alone_running && !exp.runs_alone() && running < jobs && fits
    }
}

/// One row to run: an experiment with the worker arguments of its run (a mutant's), in a group
/// (a mutant's rows; a plain matrix is one group), with the worker program and the SQL patch its
/// fresh database gets when they are not the session's.
#[derive(Clone)]
pub struct Unit {
    pub group: usize,
    pub label: String,
    pub exp: Experiment,
    pub args: Vec<String>,
    pub worker_bin: Option<std::path::PathBuf>,
    pub sql_patch: Option<String>,
}

impl Session {
    /// Run `experiments` with `worker_args` added to every worker, up to [`Session::jobs`] at once;
    /// evidence goes to `<run>/<label>/<id>/` (or `<run>/<id>/` without a label).
    pub async fn matrix(
        &mut self,
        label: &str,
        experiments: &[Experiment],
        worker_args: &[String],
    ) -> Result<Matrix, HarnessError> {
        let t0 = Instant::now();
        let units: Vec<Unit> = experiments
            .iter()
            .map(|e| Unit {
                group: 0,
                label: label.to_string(),
                exp: *e,
                args: worker_args.to_vec(),
                worker_bin: None,
                sql_patch: self.sql_patch.clone(),
            })
            .collect();
        let reports = self.run.path.parent().map(Path::to_path_buf).unwrap_or_default();
        let order = start_order(experiments, self.jobs.max(1), &crate::row_times::load(&reports));
        let (slots, died) = self.units(&units, &order, |_| false).await?;
        let mut results: Vec<ExperimentResult> = experiments
            .iter()
            .zip(slots)
            .map(|(exp, slot)| {
                slot.unwrap_or_else(|| self.not_run(exp, &format!("not run: {}", died.as_deref().unwrap_or("?"))))
            })
            .collect();
        if died.is_none() {
            self.rerun_starved(&units, &mut results).await?;
        }
        let matrix = self.matrix_of(results, t0);
        crate::row_times::record(&reports, &matrix.results);
        Ok(matrix)
    }

    /// Run the STARVED rows of `results` (one per unit of `units`) again, one at a time, up to
    /// [`Session::starved_reruns`] rounds: a starved row has no verdict, and alone on the machine it
    /// may reach one. A rerun's result replaces the row's, its observations saying so and where the
    /// starved attempt's evidence is; a row still starved after the last round stays STARVED.
    async fn rerun_starved(&mut self, units: &[Unit], results: &mut [ExperimentResult]) -> Result<(), HarnessError> {
        for round in 1..=self.starved_reruns {
            let again: Vec<usize> = (0..results.len()).filter(|&i| results[i].outcome == Outcome::Starved).collect();
            if again.is_empty() {
                break;
            }
            let (slots, died) = self.rerun_alone(units, &again, &format!("rerun{round}")).await?;
            adopt_reruns(results, &again, slots);
            if died.is_some() {
                break;
            }
        }
        Ok(())
    }

    /// The STARVED units of the groups (mutants) none of whose units `kills`, run again one at a
    /// time (up to [`Session::starved_reruns`] rounds), each rerun's result in its slot: a starved
    /// killer would make a false survivor, a starved row of a listed equivalent an unfinished check
    /// of its listing.
    pub async fn rerun_starved_unkilled(
        &mut self,
        units: &[Unit],
        slots: &mut [Option<ExperimentResult>],
        kills: impl Fn(Outcome) -> bool,
    ) -> Result<(), HarnessError> {
        for round in 1..=self.starved_reruns {
            let killed = |g: usize| {
                units
                    .iter()
                    .zip(slots.iter())
                    .any(|(u, r)| u.group == g && r.as_ref().is_some_and(|r| kills(r.outcome)))
            };
            let starved = |i: usize| slots[i].as_ref().is_some_and(|r| r.outcome == Outcome::Starved);
            let again: Vec<usize> = (0..units.len()).filter(|&i| starved(i) && !killed(units[i].group)).collect();
            if again.is_empty() {
                break;
            }
            let (ran, died) = self.rerun_alone(units, &again, &format!("rerun{round}")).await?;
            let mut results: Vec<ExperimentResult> = again.iter().filter_map(|&i| slots[i].clone()).collect();
            let all: Vec<usize> = (0..results.len()).collect();
            adopt_reruns(&mut results, &all, ran);
            for (&i, r) in again.iter().zip(results) {
                slots[i] = Some(r);
            }
            if died.is_some() {
                break;
            }
        }
        Ok(())
    }

    /// The units `which` (indices into `units`) run again one at a time, each one's evidence under
    /// `<its label>/<again>/<row>/`: each one's result (`None`: not run) and the server's death, if
    /// it died.
    pub async fn rerun_alone(
        &mut self,
        units: &[Unit],
        which: &[usize],
        again: &str,
    ) -> Result<(Vec<Option<ExperimentResult>>, Option<String>), HarnessError> {
        let relabel = |u: &Unit| if u.label.is_empty() { again.to_string() } else { format!("{}/{again}", u.label) };
        let todo: Vec<Unit> = which.iter().map(|&i| Unit { label: relabel(&units[i]), ..units[i].clone() }).collect();
        eprintln!(
            "fenceproof: {} row(s) STARVED; running them again one at a time ({again}): {}",
            todo.len(),
            todo.iter().map(|u| u.exp.id).collect::<Vec<_>>().join(", ")
        );
        let jobs = std::mem::replace(&mut self.jobs, 1);
        let order: Vec<usize> = (0..todo.len()).collect();
        let ran = self.units(&todo, &order, |_| false).await;
        self.jobs = jobs;
        ran
    }

    /// Run `units`, up to [`Session::jobs`] at once, starting them in `order` (indices into
    /// `units`). When a finished row makes `stop` true, the rows of its group not yet started are
    /// skipped (a mutant killed at its first row). Returns each unit's result (`None`: not run) and
    /// the server's death, if it died (no row starts after it).
    pub async fn units(
        &mut self,
        units: &[Unit],
        order: &[usize],
        stop: impl Fn(&ExperimentResult) -> bool,
    ) -> Result<(Vec<Option<ExperimentResult>>, Option<String>), HarnessError> {
        let mut slots: Vec<Option<ExperimentResult>> = vec![None; units.len()];
        let mut stopped = std::collections::HashSet::new();
        let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
        let mut sched = Scheduler::new(self.connections.map(|b| b.for_rows()));
        let mut died: Option<String> = None;
        let mut done = 0;
        let watch = tokio::spawn(watch_stalls(self.run.path.join("harness-stalls.txt")));
        loop {
            while let Some(&i) = order.get(sched.next).filter(|_| died.is_none()) {
                let u = &units[i];
                if stopped.contains(&u.group) {
                    sched.next += 1;
                    continue;
                }
                if !sched.may_start(&u.exp, running.len(), self.jobs.max(1)) {
                    break;
                }
                sched.alone_running = u.exp.runs_alone();
                sched.held += u.exp.connections();
                progress(&u.label, done, units.len(), u.exp.id);
                let plan = self.unit_context(u)?;
                let end = RowEnd {
                    run_path: self.run.path.clone(),
                    reproduce: self.reproduce(u.exp.id),
                    judging: self.judging,
                };
                running.push(execute(i, u.clone(), plan, end));
                sched.next += 1;
            }
            let Some(ran) = running.next().await else { break };
            sched.alone_running = sched.alone_running && !running.is_empty();
            let u = &units[ran.index];
            sched.held = sched.held.saturating_sub(u.exp.connections());
            if let Ok(r) = &ran.result {
                log_finished(&u.label, r);
            }
            let r = self.judged_alive(&u.exp, ran.result, &mut died).await?;
            if stop(&r) {
                stopped.insert(u.group);
            }
            slots[ran.index] = Some(r);
            done += 1;
            if self.keep_partial {
                let finished = slots.iter().flatten().cloned().collect();
                let mut m = self.matrix_of(finished, Instant::now());
                m.duration_ms = self.elapsed_ms();
                fenceproof_harness::report::partial::record(&self.run.path, m);
            }
        }
        watch.abort();
        progress("", units.len(), units.len(), "");
        Ok((slots, died))
    }

    /// The context plan of `u`: its worker program and SQL patch for this one database.
    fn unit_context(&mut self, u: &Unit) -> Result<ContextPlan, HarnessError> {
        let (bin, patch) = (self.worker_bin.clone(), self.sql_patch.clone());
        if let Some(b) = &u.worker_bin {
            self.worker_bin = b.clone();
        }
        self.sql_patch = u.sql_patch.clone();
        let plan = self.plan_context(&u.label, u.exp.id, &u.args);
        (self.worker_bin, self.sql_patch) = (bin, patch);
        plan
    }

    /// A finished row, unless the server died: then an ERROR saying so (and `died` remembers it, so
    /// no further row starts). A row's own error with the server alive ends the whole matrix.
    async fn judged_alive(
        &mut self,
        exp: &Experiment,
        r: Result<ExperimentResult, HarnessError>,
        died: &mut Option<String>,
    ) -> Result<ExperimentResult, HarnessError> {
        let mut death = self.server_death();
        // An error can be the server's death seen by a connection before the kernel has let the
        // harness reap the process: look again, for at most 5 s, before calling it the run's own
        // error (which would lose the matrix).
        let until = Instant::now() + Duration::from_secs(5);
        while r.is_err() && death.is_none() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
            death = self.server_death();
        }
        let Some(death) = death.or_else(|| died.clone()) else { return r };
        let why = match &r {
            Ok(r) => r.error.clone().unwrap_or_else(|| format!("{} of its checks failed", r.outcome.label())),
            Err(e) => e.to_string(),
        };
        let mut row = r.unwrap_or_else(|_| self.not_run(exp, ""));
        row.outcome = Outcome::Error;
        row.error = Some(format!("{death}; what the experiment saw: {why}"));
        row.observations = "the server died while this experiment ran".into();
        *died = Some(death);
        Ok(row)
    }
}

/// How late the session's thread may run a timer before it counts as held.
const STALL: Duration = Duration::from_millis(500);

/// Every row runs on the session's one thread: anything that blocks it (a server's shutdown, a
/// folder copied or removed) stops every row's clock of events at once, so a worker's answer
/// reaches its row late and a short lease lapses unseen. This watch wakes every 100 ms and
/// records every delay in the harness's measure of its own lag (`fenceproof_harness::lag`, which
/// the waits grant themselves and which tells a STARVED row from an ERROR); when it wakes more
/// than [`STALL`] late it says so in `harness-stalls.txt` of the run (the rows' evidence then
/// explains itself) and in the log.
async fn watch_stalls(file: std::path::PathBuf) {
    fenceproof_harness::lag::watch(Duration::from_millis(100), |late| {
        if late <= STALL {
            return;
        }
        let line = format!(
            "{} the session's thread ran {} ms late (a blocking call on it, or a starved machine)",
            chrono::Utc::now().format("%H:%M:%S%.3f"),
            late.as_millis()
        );
        tracing::warn!("{line}");
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&file) {
            let _ = writeln!(f, "{line}");
        }
    })
    .await
}

/// Each rerun's result in place of the starved row it ran again (`again[k]` is the row of
/// `slots[k]`), its observations saying it ran alone after STARVED, why, and where that attempt's
/// evidence is. A rerun that did not run (`None`) leaves the row as it was.
fn adopt_reruns(results: &mut [ExperimentResult], again: &[usize], slots: Vec<Option<ExperimentResult>>) {
    for (&i, slot) in again.iter().zip(slots) {
        let Some(mut r) = slot else { continue };
        let first = &results[i];
        r.observations = format!(
            "run again alone after STARVED ({}; evidence {}); {}",
            first.error.as_deref().map(first_line).unwrap_or_default(),
            first.evidence,
            r.observations
        );
        results[i] = r;
    }
}

/// The first line of a starved row's error, at most 160 characters (its whole text stays in the
/// starved attempt's evidence).
fn first_line(e: &str) -> String {
    let line = e.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(160).collect();
    if line.chars().count() > 160 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    /// A starved row's rerun takes its place and says what happened to the first attempt; a row
    /// whose rerun did not run keeps its STARVED; the other rows are untouched.
    #[test]
    fn a_rerun_replaces_the_starved_row_and_says_so() {
        let row = |id: &str, outcome: Outcome, error: Option<&str>, evidence: &str| ExperimentResult {
            id: id.into(),
            title: String::new(),
            outcome,
            duration_ms: 1,
            observations: "seen".into(),
            checks: Vec::new(),
            error: error.map(str::to_string),
            reproduce: String::new(),
            evidence: evidence.into(),
        };
        let mut results = vec![
            row("A", Outcome::Pass, None, "A"),
            row("B", Outcome::Starved, Some("a wait timed out\nsecond line"), "B"),
            row("C", Outcome::Starved, Some("ceiling"), "C"),
        ];
        let slots = vec![Some(row("B", Outcome::Pass, None, "rerun1/B")), None];
        adopt_reruns(&mut results, &[1, 2], slots);
        assert_eq!(results[0].observations, "seen");
        assert_eq!(results[1].outcome, Outcome::Pass);
        assert_eq!(results[1].evidence, "rerun1/B");
        assert_eq!(results[1].observations, "run again alone after STARVED (a wait timed out; evidence B); seen");
        assert_eq!(results[2].outcome, Outcome::Starved, "a rerun that did not run leaves the row");
        assert_eq!(first_line(&"x".repeat(200)).chars().count(), 161);
    }

    use super::*;

    /// A story slower than its ceiling ends at the ceiling on a quiet harness, and finishes when
    /// the harness measured a delay at least as long meanwhile (the delay is recorded by hand).
    #[tokio::test]
    async fn the_ceiling_is_granted_the_measured_delay() {
        let ceiling = Duration::from_millis(150);
        let slow = || Box::pin(tokio::time::sleep(Duration::from_millis(250)));
        let t0 = Instant::now();
        assert!(within_granted(ceiling, t0, slow()).await.is_err(), "no delay recorded: cut at the ceiling");
        let t0 = Instant::now();
        fenceproof_harness::lag::record(t0 + Duration::from_millis(10), Duration::from_millis(300));
        assert!(within_granted(ceiling, t0, slow()).await.is_ok(), "a 300 ms delay grants the story its time");
    }

    fn row(id: &'static str, alone: bool) -> Experiment {
        let mut e = crate::all().into_iter().find(|e| !e.runs_alone()).unwrap();
        e.id = id;
        if alone {
            e.needs = &[crate::experiment::Need::ServerFreeze];
        }
        e
    }

    #[test]
    fn a_row_that_must_be_alone_waits_for_an_empty_field_and_keeps_it() {
        let s = Scheduler::new(None);
        assert!(s.may_start(&row("x", false), 1, 4), "room for another");
        assert!(!s.may_start(&row("x", false), 4, 4), "all jobs taken");
        assert!(!s.may_start(&row("f", true), 1, 4), "an alone row waits for the others");
        assert!(s.may_start(&row("f", true), 0, 4), "and starts on an empty field");
        let during = Scheduler { alone_running: true, ..Scheduler::new(None) };
        assert!(!during.may_start(&row("x", false), 1, 4), "nothing starts beside it");
        assert!(s.may_start(&row("x", false), 0, 1) && !s.may_start(&row("x", false), 1, 1), "--jobs 1: one at a time");
    }

    /// A row starts only while the connections the running rows hold and its own fit the budget;
    /// a row on an empty field starts whatever it holds; without a budget only the jobs count.
    #[test]
    fn a_row_is_admitted_only_while_its_connections_fit_the_server() {
        let (plain, paths) = (row("x", false), crate::model_paths::EXPERIMENT);
        let (p, m) = (plain.connections(), paths.connections());
        assert!(m > p, "Model-paths declares more than a plain row ({m} against {p})");
        let budget = 2 * p + m;
        let mut s = Scheduler::new(Some(budget));
        s.held = p + m;
        assert!(s.may_start(&plain, 2, 8), "{} + {p} fits {budget}", s.held);
        assert!(!s.may_start(&paths, 2, 8), "{} + {m} is more than {budget}", s.held);
        s.held = 2 * p + m;
        assert!(!s.may_start(&plain, 3, 8), "the budget is spent, jobs or not");
        assert!(Scheduler::new(Some(1)).may_start(&paths, 0, 8), "an empty field admits any row");
        let free = Scheduler { held: 10_000, ..Scheduler::new(None) };
        assert!(free.may_start(&paths, 3, 8), "no budget read: only the jobs count");
        assert!(!free.may_start(&paths, 8, 8));
    }

    #[test]
    fn alone_rows_start_first_and_one_job_keeps_the_order() {
        let rows = [row("a", false), row("f", true), row("b", false)];
        let none = BTreeMap::new();
        assert_eq!(start_order(&rows, 4, &none), vec![1, 0, 2]);
        assert_eq!(start_order(&rows, 1, &none), vec![0, 1, 2]);
    }

    #[test]
    fn rows_start_longest_first_by_their_last_times() {
        let rows = [row("a", false), row("b", false), row("f", true), row("c", false)];
        let history: BTreeMap<String, u64> =
            [("a", 500), ("b", 9_000), ("f", 10), ("c", 2_000)].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        assert_eq!(start_order(&rows, 4, &history), vec![2, 1, 3, 0], "alone first, then 9 s, 2 s, 0.5 s");
        assert_eq!(start_order(&rows, 1, &history), vec![0, 1, 2, 3], "one job: the selection's order");
    }
}
