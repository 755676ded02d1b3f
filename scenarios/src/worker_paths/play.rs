//! One worker path played through the worker contract: each model action becomes the command of
//! the process that takes it, and after each step what the worker answered is compared with what
//! the model does there.
//!
//! A protected write the model holds open between its validation and its commit is sent with a
//! barrier at `after_lease_validated` (a `faults` field) and waits inside the database while the
//! other processes step; a dispatcher the model holds between its call and its result write waits
//! at `before_result_write`. A call that answers no fact is a tool fault armed for that call: a
//! 503 when the request is lost before the call (the model's give-up without a call), a dropped
//! connection after the tool committed (a give-up after it). A tick waits on the database clock
//! until every term of the run has passed; a kill is SIGKILL.

use fenceproof_harness::faults::tools::{ArmedToolFault, ToolFault};
use fenceproof_harness::faults::{self, DbBarrier, Injected};
use fenceproof_harness::HarnessError;
use fenceproof_model::action::Action;
use fenceproof_model::config::Capability;
use fenceproof_model::coverage::{replay, spec_only, takes};
use fenceproof_model::state::{RunStatus, State, Write};
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::lane::{Lane, Who, SLOTS};
use super::wait::{self, Barriers, Waited};
use crate::ctx::{outcome, Ctx, STEP};

/// A grant that outlives any path (a lease or claim with no clock tick of the path after it).
const LONG_MS: i64 = 300_000;

/// The heartbeat asked for: longer than any path, so every renewal is the path's own.
const HEARTBEAT_OFF_MS: u64 = 3_600_000;

/// What one path did.
#[derive(Debug, Clone, Serialize)]
pub struct PathReport {
    pub transition: String,
    pub run_id: String,
    pub steps: usize,
    /// Steps played before the path ended or stopped.
    pub played: usize,
    /// The first step the worker refused where the model takes it.
    pub diverged: Option<String>,
    /// A step the worker answered ok where the model refuses it (on time by the database clock).
    pub refused_by_model: Option<String>,
    /// An interleaving the path asks for that this worker or database could not be held in.
    pub unheld: Option<String>,
    /// A step only the spec's own statements take (a takeover of a finished run's lease), which
    /// this worker refused as the fp_* functions do: a refusal beyond the spec's, no finding.
    pub refuses_more: Option<String>,
    /// The run of the first play, when this is the path played again with longer terms.
    pub again_of: Option<String>,
    /// Each command tried where the model refuses its action (a step of the path, a probe, a
    /// race).
    pub refusals: Vec<Refusal>,
}

/// One command tried where the model refuses its action.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Refusal {
    /// The model's transition it would be.
    pub transition: String,
    /// Whether the worker refused it.
    pub refused: bool,
    /// The outcome word the worker answered.
    pub word: String,
    /// The words the contract gives for that refusal (docs/worker-protocol.md, "Outcomes"); empty
    /// where its answer carries no refusal word (a claim that finds nothing answers ok).
    pub expected: &'static [&'static str],
}

impl Refusal {
    /// The command of `a` from `s` the model refuses, answered `word`.
    fn of(s: &State, a: Action, word: String) -> Refusal {
        Refusal { transition: refusal(s, a), refused: word != "ok", word, expected: refusal_words(s, a) }
    }

    /// A step of the path the model refuses: whether the worker `committed` it, and the word of
    /// the answer the step read (none for a step whose answer carries no word of its own).
    fn of_step(s: &State, a: Action, committed: bool, word: String) -> Refusal {
        let expected = refusal_words(s, a);
        let word = if committed {
            "ok".to_string()
        } else if word.is_empty() {
            "none".into()
        } else {
            word
        };
        Refusal { transition: refusal(s, a), refused: !committed, word, expected }
    }

    /// Whether it was refused with a word the contract does not give for it. Not judged: what
    /// the machine or the server decides rather than the worker's protocol (`outcome_unknown`,
    /// the commit got no answer; `timeout`, the worker's own bound ran out; `db_error`, the server
    /// refused for another reason, a full connection table among them), and `none`, no answer at
    /// all (the command waits at a barrier).
    pub fn wrong_word(&self) -> bool {
        let w = self.word.as_str();
        self.refused
            && !self.expected.is_empty()
            && !self.expected.contains(&w)
            && !matches!(w, "outcome_unknown" | "timeout" | "db_error" | "none")
    }
}

/// Whether the lease is held and unexpired in `s`.
fn live(s: &State) -> bool {
    s.primary.lease.owner.is_some() && !s.primary.lease.expired()
}

/// The contract's words for a refusal of `a` from `s`: a takeover of a live lease is `busy`, of a
/// finished run's `invalid_state` (either, when both hold: the contract orders neither check); a
/// renewal or release of a lease no longer held, `lease_lost`. A protected write's refusal is not
/// judged by its word (its answer is recorded): after serialization failures the contract accepts
/// any word but `ok`, `lease_lost` and `outcome_unknown`, and the answer does not say whether one
/// happened.
fn refusal_words(s: &State, a: Action) -> &'static [&'static str] {
    match a {
        Action::Acquire(_) if s.primary.run.terminal() && live(s) => &["invalid_state", "busy"],
        Action::Acquire(_) if s.primary.run.terminal() => &["invalid_state"],
        Action::Acquire(_) => &["busy"],
        Action::Renew(_) | Action::Release(_) => &["lease_lost"],
        _ => &[],
    }
}

impl PathReport {
    pub fn stopped(&self) -> bool {
        self.diverged.is_some()
            || self.refused_by_model.is_some()
            || self.unheld.is_some()
            || self.refuses_more.is_some()
    }
}

/// A command waiting at its barrier inside the database.
struct Held {
    who: Who,
    id: u64,
    barrier: Injected<DbBarrier>,
    /// The plan's operation, when the held write registers one.
    plan: Option<u8>,
    /// A dispatch held before its result write (else a protected write held after validation).
    dispatch: bool,
}

/// How a step ended the path early.
enum Stop {
    Unheld(String),
}

/// The terms of the grants a clock tick of a path must see lapse: long enough for the steps
/// between the grant and the tick (`step_ms` each, from the worker's measured round trip), at
/// least `floor_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub floor_ms: i64,
    pub step_ms: i64,
}

impl Grant {
    /// Both `k` times as long.
    pub fn longer(self, k: i64) -> Grant {
        Grant { floor_ms: self.floor_ms * k, step_ms: self.step_ms * k }
    }

    /// The term of a grant with `steps` steps before the next tick.
    fn term(self, steps: usize) -> i64 {
        self.floor_ms + self.step_ms * steps as i64
    }
}

/// A path being played.
pub struct Play<'a> {
    ctx: &'a Ctx,
    lane: &'a mut Lane,
    /// An observer on the lane's database, and its owner's URL (barriers are taken there).
    pool: sqlx::PgPool,
    url: String,
    idx: usize,
    run_id: Uuid,
    path: &'a [Action],
    at: usize,
    grant: Grant,
    caps: Vec<Capability>,
    held: Vec<Held>,
    /// Operation n's operation_id, from its plan's answer.
    ops: Vec<Option<String>>,
    /// A dispatch's answer (its one entry), by process, until its result step reads it.
    results: [Option<Value>; 2],
    /// A tool fault armed for a dispatch, healed once its result step is read.
    tool_fault: Option<Injected<ArmedToolFault>>,
    /// The outcome word of the last answer a step read.
    word: String,
    /// The last reconcile pass's answer.
    pass: Option<Value>,
    stop: Option<Stop>,
}

/// Play `path` (the path to `transition`) as path number `idx`, the grants a tick must see lapse
/// lasting as `grant` says.
pub async fn play(
    ctx: &Ctx,
    lane: &mut Lane,
    idx: usize,
    transition: &str,
    path: &[Action],
    grant: Grant,
) -> Result<PathReport, HarnessError> {
    let (model, states) = replay(path).ok_or_else(|| {
        HarnessError::Other(format!("the path to {transition} is no behaviour of the model's bounds"))
    })?;
    let cp = lane.get(ctx, Who::ControlPlane).await?;
    let task = format!("path-{idx}-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let ev = cp.request(json!({"cmd": "create_run", "task_id": task}), STEP).await?;
    crate::ctx::require_ok(&ev, "the control plane's create_run")?;
    let run_id = ev["data"]["run_id"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| HarnessError::Other(format!("create_run answered no run_id: {ev}")))?;
    let caps = model.cfg.caps[..model.cfg.ops as usize].to_vec();
    let (pool, url) = (lane.place.pool.clone(), lane.place.url.clone());
    let mut p = Play {
        ctx,
        lane,
        pool,
        url,
        idx,
        run_id,
        path,
        at: 0,
        grant,
        ops: vec![None; caps.len()],
        caps,
        held: Vec::new(),
        results: [None, None],
        tool_fault: None,
        word: String::new(),
        pass: None,
        stop: None,
    };
    let mut report = PathReport {
        transition: transition.to_string(),
        run_id: run_id.to_string(),
        steps: path.len(),
        played: 0,
        diverged: None,
        refused_by_model: None,
        unheld: None,
        refuses_more: None,
        again_of: None,
        refusals: Vec::new(),
    };
    let played = p.steps(&states, &mut report).await;
    let finished = p.finish().await;
    played?;
    finished?;
    Ok(report)
}

impl Play<'_> {
    /// Each step in turn, until the path ends or the worker answers otherwise than the model.
    async fn steps(&mut self, states: &[State], report: &mut PathReport) -> Result<(), HarnessError> {
        for (k, a) in self.path.iter().enumerate() {
            self.at = k;
            let (s, n) = (&states[k], &states[k + 1]);
            let before = wait::terms(&self.pool, self.run_id).await?;
            self.word.clear();
            let committed = self.step(*a, s).await?;
            report.played = k + 1;
            if let Some(Stop::Unheld(why)) = self.stop.take() {
                report.unheld = Some(format!("step {} {a:?}: {why}", k + 1));
                return Ok(());
            }
            if takes(s, *a, n) == Some(false) {
                report.refusals.push(Refusal::of_step(s, *a, committed, std::mem::take(&mut self.word)));
            }
            match (takes(s, *a, n), committed) {
                (Some(true), false) if spec_only(s, a) => {
                    report.refuses_more =
                        Some(format!("step {} {a:?}: a takeover of a finished run's lease, refused", k + 1));
                    return Ok(());
                }
                (Some(true), false) => {
                    report.diverged = Some(format!("step {} {a:?}: the model takes it, the worker refused it", k + 1));
                    return Ok(());
                }
                (Some(false), true) if !wait::late(&self.pool, *a, &before, &self.ops).await? => {
                    report.refused_by_model =
                        Some(format!("step {} {a:?}: the worker answered ok, the model refuses it", k + 1));
                    return Ok(());
                }
                _ => {}
            }
            if let Some(found) = self.probe(*a, n, report).await? {
                report.refused_by_model = Some(format!("after step {}: {found}", k + 1));
                return Ok(());
            }
            if let Some(found) = self.stale_write(*a, n, committed, report).await? {
                report.refused_by_model = Some(format!("after step {}: {found}", k + 1));
                return Ok(());
            }
        }
        if let Some(found) = self.race(&states[states.len() - 1], report).await? {
            report.refused_by_model = Some(format!("after the path: {found}"));
        }
        Ok(())
    }

    /// Where the path left the lease free or expired (and its run can still be worked on): two
    /// takeovers of it, the first held right before its write (`before_takeover_write`) while the
    /// second takes the lease. The first must then be refused: the lease is live again, and the
    /// model takes no takeover of a live lease. `Some(finding)` when it answered ok.
    async fn race(&mut self, last: &State, report: &mut PathReport) -> Result<Option<String>, HarnessError> {
        let l = last.primary.lease;
        let open = l.owner.is_none() || l.expired();
        if !open || last.primary.run.terminal() || !self.held.is_empty() || self.stop.is_some() {
            return Ok(None);
        }
        let run_id = self.run_id;
        let acquire = |ttl: i64| {
            json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": ttl,
                "heartbeat_ms": HEARTBEAT_OFF_MS, "renew_timeout_ms": STEP.as_millis() as u64})
        };
        let key = self.ctx.lock_key(0x5250_0000 + (self.idx as i64) % 0x0100_0000);
        let mut first = acquire(self.grant.floor_ms);
        first["faults"] = json!({"barriers": [{"point": "before_takeover_write", "key": key}]});
        if self.send_held(Who::Probe, first, key, "before_takeover_write", None).await?.is_some() {
            // It answered without waiting at the point: this worker's takeover is not held there.
            return Ok(None);
        }
        let second = self.simple(Who::Rival, acquire(LONG_MS)).await?;
        let Some(h) = self.held.pop() else { return Ok(None) };
        h.barrier.heal().await?;
        let ev = self.lane.get(self.ctx, h.who).await?.reply(h.id, STEP).await?;
        if second {
            let mut held = last.clone();
            held.primary.lease.owner = Some(PROBE_OWNER);
            held.primary.lease.expires = 1;
            report.refusals.push(Refusal::of(&held, Action::Acquire(0), outcome(&ev).to_string()));
        }
        Ok((second && outcome(&ev) == "ok").then(|| {
            "two takeovers of one expired lease, the first held before its write: the second took it, and the first \
             answered ok over the live lease"
                .to_string()
        }))
    }

    /// Play one action; whether the worker answered that it committed (hidden steps: true).
    async fn step(&mut self, a: Action, s: &State) -> Result<bool, HarnessError> {
        match a {
            Action::Acquire(i) => {
                let ttl = self.term();
                let cmd = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": ttl,
                    "heartbeat_ms": HEARTBEAT_OFF_MS, "renew_timeout_ms": STEP.as_millis() as u64});
                self.simple(Who::Slot(i), cmd).await
            }
            Action::Renew(i) => self.simple(Who::Slot(i), json!({"cmd": "renew"})).await,
            Action::Release(i) => self.simple(Who::Slot(i), json!({"cmd": "release"})).await,
            Action::Validate(i) => self.validate(i, s).await,
            Action::Commit(i, w) => self.commit(i, w).await,
            Action::Claim(i, n) => self.claim(i, n).await,
            Action::WriteResult(i) => self.result(i, false).await,
            Action::GiveUp(i) => self.result(i, true).await,
            Action::MarkUnknown(n) => self.mark_unknown(n).await,
            Action::Reconcile(n) => self.reconcile(n).await,
            Action::Cancel => self.simple(Who::ControlPlane, json!({"cmd": "cancel", "run_id": self.run_id})).await,
            Action::Tick => wait::tick(&self.pool, self.run_id, self.grant.term(self.path.len())).await.map(|_| true),
            Action::Kill(i) => self.kill(i).await.map(|_| true),
            // The row lock is taken with the validation (the model's own lock keeps every other
            // process off the lease row in between); the call is the dispatch's.
            Action::Lock(_) | Action::Call(_) => Ok(true),
            other => {
                Err(HarnessError::Other(format!("a worker path holds {other:?}, which no contract command takes")))
            }
        }
    }

    /// SIGKILL model process `i`, and start its successor now (a later path's, with a new owner
    /// id), so that no process starts in the middle of a path.
    async fn kill(&mut self, i: u8) -> Result<(), HarnessError> {
        self.lane.kill(Who::Slot(i)).await?;
        // What the killed process left waiting at a barrier will never answer: its barriers open
        // after the kill, so nothing of it moves on.
        let (gone, kept): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| h.who == Who::Slot(i));
        self.held = kept;
        for h in gone {
            h.barrier.heal().await?;
        }
        self.lane.warm(self.ctx).await
    }

    /// Send `cmd` to `who` and wait for its answer; whether it was ok. While another command
    /// waits at a barrier, a command that waits on it instead is an interleaving the database
    /// orders otherwise than the path (the path stops there, unheld).
    async fn simple(&mut self, who: Who, cmd: Value) -> Result<bool, HarnessError> {
        let (_, ev) = self.send_and_wait(who, cmd).await?;
        self.word = ev.as_ref().map_or_else(|| "none".to_string(), |e| outcome(e).to_string());
        Ok(ev.is_some_and(|e| outcome(&e) == "ok"))
    }

    /// Send `cmd` to `who`: its id and its answer. A command that waits on another process's open
    /// transaction instead notes the stop, and every held command is released so that it can
    /// answer.
    async fn send_and_wait(&mut self, who: Who, cmd: Value) -> Result<(u64, Option<Value>), HarnessError> {
        let others: Vec<i32> = self.held.iter().map(|h| h.barrier.holder_pid).collect();
        let w = self.lane.get(self.ctx, who).await?;
        let owner = w.owner.clone();
        let id = w.send(cmd).await?;
        if others.is_empty() {
            return Ok((id, Some(w.reply(id, STEP).await?)));
        }
        match wait::answer_or_wait(&self.pool, w, id, &owner, Barriers { own: None, others: &others }).await? {
            Waited::Answered(ev) => Ok((id, Some(ev))),
            Waited::AtBarrier => Ok((id, None)),
            Waited::Blocked(why) => {
                self.stop = Some(Stop::Unheld(why));
                self.release_all().await?;
                let w = self.lane.get(self.ctx, who).await?;
                Ok((id, Some(w.reply(id, STEP).await?)))
            }
        }
    }

    /// The model's validation. When the process's commit is its next step, the command is sent
    /// there; otherwise it is sent now with a barrier and held until the path commits it.
    async fn validate(&mut self, i: u8, s: &State) -> Result<bool, HarnessError> {
        if matches!(self.path.get(self.at + 1), Some(Action::Commit(j, _)) if *j == i) {
            return Ok(true);
        }
        let write = self.next_write(i, s);
        let key = self.key(i);
        let cmd = self.write_cmd(write, Some(("after_lease_validated", key)));
        match self.send_held(Who::Slot(i), cmd, key, "after_lease_validated", plan_of(write)).await? {
            None => Ok(true),
            Some(ev) => {
                if outcome(&ev) == "ok" && self.stop.is_none() {
                    self.stop = Some(Stop::Unheld(format!(
                        "the worker committed its {} without waiting at its after_lease_validated barrier (it ignores `faults` there)",
                        ev["event"].as_str().unwrap_or("write")
                    )));
                }
                Ok(false)
            }
        }
    }

    /// Send `cmd` (armed with barrier `key` at `point`) to `who` and hold it there: `None` once it
    /// waits at the barrier (held until its step), or its answer when it answered first (or,
    /// with the stop noted, when it waited on another process's open transaction instead).
    async fn send_held(
        &mut self,
        who: Who,
        cmd: Value,
        key: i64,
        point: &str,
        plan: Option<u8>,
    ) -> Result<Option<Value>, HarnessError> {
        let dispatch = point == "before_result_write";
        let barrier = faults::inject(DbBarrier::new(&self.url, key).at(point), &self.ctx.timeline).await?;
        let others: Vec<i32> = self.held.iter().map(|h| h.barrier.holder_pid).collect();
        let own = Some(barrier.holder_pid);
        let w = self.lane.get(self.ctx, who).await?;
        let owner = w.owner.clone();
        let id = w.send(cmd).await?;
        match wait::answer_or_wait(&self.pool, w, id, &owner, Barriers { own, others: &others }).await? {
            Waited::AtBarrier => {
                self.held.push(Held { who, id, barrier, plan, dispatch });
                Ok(None)
            }
            Waited::Answered(ev) => {
                barrier.heal().await?;
                Ok(Some(ev))
            }
            Waited::Blocked(why) => {
                self.stop = Some(Stop::Unheld(why));
                barrier.heal().await?;
                self.release_all().await?;
                Ok(Some(self.lane.get(self.ctx, who).await?.reply(id, STEP).await?))
            }
        }
    }

    /// The model's commit: the held write released, or the write's command sent now.
    async fn commit(&mut self, i: u8, write: Write) -> Result<bool, HarnessError> {
        let ev = match self.held.iter().position(|h| h.who == Who::Slot(i) && !h.dispatch) {
            Some(k) => {
                let h = self.held.remove(k);
                h.barrier.heal().await?;
                let ev = self.lane.get(self.ctx, h.who).await?.reply(h.id, STEP).await?;
                self.note_plan(h.plan, &ev);
                ev
            }
            None => {
                let cmd = self.write_cmd(write, None);
                let (_, Some(ev)) = self.send_and_wait(Who::Slot(i), cmd).await? else { return Ok(false) };
                self.note_plan(matches!(write, Write::Plan(_)).then_some(write).and_then(plan_of), &ev);
                ev
            }
        };
        self.word = outcome(&ev).to_string();
        Ok(outcome(&ev) == "ok")
    }

    /// A plan's operation_id, from its ok answer.
    fn note_plan(&mut self, plan: Option<u8>, ev: &Value) {
        if let (Some(n), Some(op)) = (plan, ev["data"]["operation_id"].as_str()) {
            if outcome(ev) == "ok" {
                self.ops[n as usize] = Some(op.to_string());
            }
        }
    }

    /// The claim, with the call after it: one `dispatch`. Its result waits at its barrier when
    /// other steps come before the claim session's next one; a give-up is a tool fault armed for
    /// this call.
    async fn claim(&mut self, i: u8, n: u8) -> Result<bool, HarnessError> {
        let (fault, hold) = self.dispatch_plan(i);
        if let Some(f) = fault {
            let tool = tool_of(self.caps[n as usize]);
            let armed = ArmedToolFault::new(self.lane.tools(), tool, f);
            self.tool_fault = Some(faults::inject(armed, &self.ctx.timeline).await?);
        }
        let mut cmd = json!({"cmd": "dispatch", "claim_ttl_ms": self.term(), "limit": 1});
        if !hold {
            let (_, Some(ev)) = self.send_and_wait(Who::Slot(i), cmd).await? else { return Ok(false) };
            let entry = ev["data"].as_array().and_then(|d| d.first()).cloned();
            let claimed = outcome(&ev) == "ok" && entry.is_some();
            self.results[i as usize] = entry;
            return Ok(claimed);
        }
        let key = self.key(i) + 2;
        cmd["faults"] = json!({"barriers": [{"point": "before_result_write", "key": key}]});
        match self.send_held(Who::Slot(i), cmd, key, "before_result_write", None).await? {
            None => Ok(true),
            Some(ev) => {
                let entry = ev["data"].as_array().and_then(|d| d.first()).cloned();
                if entry.is_some() && self.stop.is_none() {
                    self.stop = Some(Stop::Unheld(
                        "the dispatcher wrote its result without waiting at its before_result_write barrier".into(),
                    ));
                }
                Ok(outcome(&ev) == "ok" && entry.is_some())
            }
        }
    }

    /// For a claim of process `i` at this step: the tool fault its give-up needs, and whether its
    /// result must wait at a barrier (other steps come before the claim session's next one).
    fn dispatch_plan(&self, i: u8) -> (Option<ToolFault>, bool) {
        let rest = &self.path[self.at + 1..];
        if rest.first() == Some(&Action::GiveUp(i)) {
            return (Some(ToolFault::Error5xx), false);
        }
        // rest[0] is the call (a worker path calls at once); then the claim session's next step
        // (the same model process's lease and commit steps are not its claim session's).
        let next = rest
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, a)| matches!(a, Action::WriteResult(j) | Action::GiveUp(j) | Action::Kill(j) if *j == i));
        match next {
            Some((1, Action::WriteResult(_))) => (None, false),
            Some((1, Action::GiveUp(_))) => (Some(ToolFault::DropAfterCommit), false),
            Some((_, Action::GiveUp(_))) => (Some(ToolFault::DropAfterCommit), true),
            Some(_) | None => (None, true),
        }
    }

    /// The claim session's result step: its held dispatch released, or its answer read.
    async fn result(&mut self, i: u8, give_up: bool) -> Result<bool, HarnessError> {
        let entry = match self.held.iter().position(|h| h.who == Who::Slot(i) && h.dispatch) {
            Some(k) => {
                let h = self.held.remove(k);
                h.barrier.heal().await?;
                let ev = self.lane.get(self.ctx, h.who).await?.reply(h.id, STEP).await?;
                ev["data"].as_array().and_then(|d| d.first()).cloned()
            }
            None => self.results[i as usize].take(),
        };
        if let Some(f) = self.tool_fault.take() {
            f.heal().await?;
        }
        let said = entry.as_ref().and_then(|e| e["outcome"].as_str()).unwrap_or("none");
        Ok(if give_up { said == "unknown" } else { matches!(said, "succeeded" | "failed_final") })
    }

    /// One reconciler pass for the reconciler's marking of operation `n`'s expired claim.
    async fn mark_unknown(&mut self, n: u8) -> Result<bool, HarnessError> {
        let ev = self.pass().await?;
        let op = self.ops[n as usize].clone().unwrap_or_default();
        let marked = listed(&ev["data"]["marked_unknown"], &op);
        let converged = ev["data"]["converged"].as_array().is_some_and(|c| c.iter().any(|p| p[0] == json!(op)));
        let next = self.path.get(self.at + 1);
        if marked && converged && next.is_some() && next != Some(&Action::Reconcile(n)) {
            self.stop = Some(Stop::Unheld(format!(
                "the worker's reconcile pass converged operation {n} in the pass that marked it (one pass is the contract's grain)"
            )));
        }
        Ok(marked)
    }

    /// The reconciler converging operation `n`: read from the pass that marked it, or a new pass.
    async fn reconcile(&mut self, n: u8) -> Result<bool, HarnessError> {
        let op = self.ops[n as usize].clone().unwrap_or_default();
        let converged =
            |ev: &Value| ev["data"]["converged"].as_array().is_some_and(|c| c.iter().any(|p| p[0] == json!(op)));
        if matches!(self.path.get(self.at.wrapping_sub(1)), Some(Action::MarkUnknown(m)) if *m == n) {
            if let Some(ev) = self.pass.take() {
                if converged(&ev) {
                    return Ok(true);
                }
            }
        }
        let ev = self.pass().await?;
        Ok(converged(&ev))
    }

    /// One `reconcile` command of the reconciler; its answer kept for the next step.
    async fn pass(&mut self) -> Result<Value, HarnessError> {
        let (_, ev) = self.send_and_wait(Who::Reconciler, json!({"cmd": "reconcile"})).await?;
        let ev = ev.ok_or_else(|| HarnessError::Other("a reconcile pass waited at no barrier it was given".into()))?;
        self.pass = Some(ev.clone());
        Ok(ev)
    }

    /// After a grant the model holds live, the spare worker tries to take the lease over: the
    /// model refuses it, and so must the worker's statements. `Some(finding)` when it committed on
    /// time by the database clock.
    async fn probe(&mut self, a: Action, n: &State, report: &mut PathReport) -> Result<Option<String>, HarnessError> {
        let l = n.primary.lease;
        let grant = matches!(a, Action::Acquire(_) | Action::Renew(_));
        if !grant || l.owner.is_none() || l.expired() || !self.held.is_empty() || self.stop.is_some() {
            return Ok(None);
        }
        let before = wait::terms(&self.pool, self.run_id).await?;
        let cmd = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": self.grant.floor_ms,
            "heartbeat_ms": HEARTBEAT_OFF_MS, "renew_timeout_ms": STEP.as_millis() as u64});
        let took = self.simple(Who::Probe, cmd).await?;
        report.refusals.push(Refusal::of(n, Action::Acquire(PROBE_SLOT), std::mem::take(&mut self.word)));
        if !took {
            return Ok(None);
        }
        if wait::late(&self.pool, Action::Acquire(0), &before, &self.ops).await? {
            self.stop = Some(Stop::Unheld(
                "the spare worker's takeover came after the lease lapsed on the database clock".into(),
            ));
            return Ok(None);
        }
        Ok(Some("a takeover of the lease the model holds live answered ok".into()))
    }

    /// After a takeover, each other process that still believes an older epoch of the lease (and
    /// has no transaction open) is sent a save: the model refuses a write from a stale epoch, and
    /// so must the worker's statement. `Some(finding)` when it answered ok.
    async fn stale_write(
        &mut self,
        a: Action,
        n: &State,
        committed: bool,
        report: &mut PathReport,
    ) -> Result<Option<String>, HarnessError> {
        let Action::Acquire(j) = a else { return Ok(None) };
        if !committed || !self.held.is_empty() || self.stop.is_some() {
            return Ok(None);
        }
        for i in (0..SLOTS as u8).filter(|i| *i != j) {
            let p = n.procs[i as usize];
            let stale = p.lease.is_some_and(|b| b.epoch < n.primary.lease.epoch);
            if !stale || p.txn != fenceproof_model::state::Txn::Idle || p.cond != fenceproof_model::state::Cond::Running
            {
                continue;
            }
            let cmd = json!({"cmd": "save", "checkpoint": {"path": self.idx, "stale": true}});
            let ok = self.simple(Who::Slot(i), cmd).await?;
            report.refusals.push(Refusal::of(n, Action::Commit(i, Write::Checkpoint), std::mem::take(&mut self.word)));
            if ok {
                return Ok(Some(format!("a save by process {i}, whose epoch was taken over, answered ok")));
            }
        }
        Ok(None)
    }

    /// The write process `i` commits next on the path (or, when it commits no more, a checkpoint,
    /// or the start of a pending run).
    fn next_write(&self, i: u8, s: &State) -> Write {
        self.path[self.at..]
            .iter()
            .find_map(|a| match a {
                Action::Commit(j, w) if *j == i => Some(*w),
                _ => None,
            })
            .unwrap_or(if s.primary.run == RunStatus::Pending { Write::Start } else { Write::Checkpoint })
    }

    /// The command that makes `write`, with a barrier at `point` when given.
    fn write_cmd(&self, write: Write, barrier: Option<(&str, i64)>) -> Value {
        let mut cmd = match write {
            Write::Start => json!({"cmd": "start"}),
            Write::Checkpoint => json!({"cmd": "save", "checkpoint": {"path": self.idx, "step": self.at}}),
            Write::Complete => json!({"cmd": "succeed"}),
            Write::Plan(n) => json!({"cmd": "plan", "step_id": format!("op{n}"),
                "tool": tool_of(self.caps[n as usize]),
                "request": {"name": format!("path-{}-op{n}", self.run_id), "path": self.idx}}),
        };
        if let Some((point, key)) = barrier {
            cmd["faults"] = json!({"barriers": [{"point": point, "key": key}]});
        }
        cmd
    }

    /// The term of a grant made now: short when a clock tick of the path follows it.
    fn term(&self) -> i64 {
        match self.path[self.at..].iter().position(|a| *a == Action::Tick) {
            Some(steps) => self.grant.term(steps),
            None => LONG_MS,
        }
    }

    /// This path's barrier key for process `i` (the row's own, see [`Ctx::lock_key`]).
    fn key(&self, i: u8) -> i64 {
        self.ctx.lock_key(0x4D50_0000 + ((self.idx as i64) % 0x0040_0000) * 4 + i as i64)
    }

    /// Release every held command, then read their answers (one may wait on a lock another
    /// held transaction holds: every barrier opens before any answer is awaited).
    async fn release_all(&mut self) -> Result<(), HarnessError> {
        let mut waiting = Vec::new();
        for h in std::mem::take(&mut self.held) {
            waiting.push((h.who, h.id));
            h.barrier.heal().await?;
        }
        for (who, id) in waiting {
            if let Ok(w) = self.lane.get(self.ctx, who).await {
                let _ = w.reply(id, STEP).await;
            }
        }
        Ok(())
    }

    /// Release whatever the path left waiting, then cancel its run so that no later path's claim
    /// takes an operation it left prepared.
    async fn finish(&mut self) -> Result<(), HarnessError> {
        self.release_all().await?;
        if let Some(f) = self.tool_fault.take() {
            f.heal().await?;
        }
        let cp = self.lane.get(self.ctx, Who::ControlPlane).await?;
        cp.request(json!({"cmd": "cancel", "run_id": self.run_id}), STEP).await?;
        Ok(())
    }
}

/// The model process a spare worker stands for in a refusal's key (the other worker).
const PROBE_SLOT: u8 = 1;

/// The owner a rival's lease stands for in a refusal's key (any owner but the taker).
const PROBE_OWNER: u8 = 1;

/// A refused command's key: the model's transition its action would be from `s`.
fn refusal(s: &State, a: Action) -> String {
    fenceproof_model::coverage::key(&fenceproof_model::coverage::classes(s, a).0, a.kind())
}

/// The operation a plan registers.
fn plan_of(w: Write) -> Option<u8> {
    match w {
        Write::Plan(n) => Some(n),
        _ => None,
    }
}

/// Whether `list` (an answer's array of operation_ids) names `op`.
fn listed(list: &Value, op: &str) -> bool {
    list.as_array().is_some_and(|l| l.iter().any(|o| o == op))
}

/// The fake tool of a capability (docs/fake-tools.md).
pub fn tool_of(c: Capability) -> &'static str {
    match c {
        Capability::Idempotent => "idem",
        Capability::DeterministicId => "detid",
        Capability::Query => "opquery",
        Capability::None => "plain",
    }
}
