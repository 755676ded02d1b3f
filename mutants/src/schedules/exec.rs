//! Playing one schedule against a fresh database with real processes, then judging it by every
//! checker that applies to a history: the global invariants and state machines over the oracle
//! rows, the harness's own client history (what it sent, what came back) against the oracle, and
//! the operation ledger against the tools' ledger.
//!
//! Commands to a paused worker are sent without waiting: they sit in its stdin and run when it is
//! resumed, exactly like requests a stalled process had in flight; their answers are collected at
//! the end. Every wait is bounded. The composite faults live in [`super::composite`].

use std::collections::BTreeSet;
use std::time::Duration;

use fenceproof_harness::check::history::{QuietWindow, SentWrite};
use fenceproof_harness::check::remote::OperationRow;
use fenceproof_harness::check::{history, invariants, remote, serialization, Check};
use fenceproof_harness::faults::tools::ArmedToolFault;
use fenceproof_harness::faults::{Injected, Pause};
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use serde_json::{json, Value};
use uuid::Uuid;

use super::bodies;
use super::ops::{Body, Op, Rev, Tool, ToolFault, WORKERS};
use fenceproof_scenarios::ctx::{data, outcome, Ctx, CONTROL};

/// Bound on one command's answer inside a schedule.
pub(super) const ANSWER: Duration = Duration::from_secs(10);
pub(super) const TTL_MS: i64 = 400;
/// The lease the holder takes again before a server freeze (it must outlast the freeze).
pub(super) const LONG_TTL_MS: i64 = 5000;
/// The tools every schedule may call (all four capability classes).
pub(super) const TOOLS: &[&str] = &["idem", "detid", "opquery", "plain"];

#[derive(Default)]
pub(super) struct Slot {
    pub proc: Option<WorkerProc>,
    /// The process's own wire-protocol proxy (a same-owner twin has none).
    pub proxy: Option<fenceproof_harness::faults::proxy::Proxy>,
    pub paused: Option<Pause>,
    pub spawned: u32,
    /// The last revision this worker was told.
    pub known: i64,
}

/// Ask a service process (the control plane, the dispatcher) and wait for its answer; one that
/// does not come within [`ANSWER`] reads as `no_answer_yet` (it may wait on a lock a paused process
/// holds); `exit` at the end waits for it.
pub(super) async fn ask(p: &mut WorkerProc, cmd: Value, timeout: Duration) -> Result<Value, HarnessError> {
    let id = p.send(cmd).await?;
    match p.reply(id, timeout).await {
        Ok(ev) => Ok(ev),
        Err(HarnessError::Timeout { .. } | HarnessError::Starved { .. }) => {
            Ok(json!({"outcome": "no_answer_yet", "id": id}))
        }
        Err(e) => Err(e),
    }
}

/// A command sent but not yet answered: (slot, command id, index in `sent` if it is a write).
pub(super) struct Pending {
    pub slot: usize,
    pub id: u64,
    pub write: Option<usize>,
}

/// The lease row as the harness reads it.
pub(super) struct LeaseNow {
    pub owner: Option<String>,
    pub epoch: i64,
    pub live: bool,
}

pub struct Exec<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) task_id: String,
    pub(super) run_id: Uuid,
    pub(super) tools: ToolsProc,
    pub(super) cp: WorkerProc,
    pub(super) dispatcher: WorkerProc,
    pub(super) slots: Vec<Slot>,
    pub(super) planned: Vec<String>,
    pub(super) counter: u32,
    pub(super) pending: Vec<Pending>,
    /// Every write the harness sent, with its answer.
    pub sent: Vec<SentWrite>,
    /// Windows of the oracle in which only a stale process of an owner acted.
    pub quiet: Vec<QuietWindow>,
    /// The situations this schedule reached (see [`super::coverage`]).
    pub reached: BTreeSet<&'static str>,
    /// One line per operation: what happened.
    pub log: Vec<String>,
    /// Tool faults armed and not yet healed (a create may still fire them).
    pub(super) tool_faults: Vec<Injected<ArmedToolFault>>,
    /// Each save the server answered with 40001, and whether the holder's lease was unchanged
    /// and live after it.
    pub(super) serialization: Vec<(serialization::Episode, bool)>,
    /// The secret values planned (judged absent from the ledger rows and the oracle at the end).
    pub(super) secrets: Vec<String>,
    /// The steps planned by a holder killed right after the plan's commit, with their secret values.
    pub(super) crash_planned: Vec<(String, Vec<String>)>,
}

impl<'a> Exec<'a> {
    pub async fn new(ctx: &'a Ctx) -> Result<Exec<'a>, HarnessError> {
        let tools = ctx.spawn_tools().await?;
        let mut cp = ctx.spawn_control_plane().await?;
        let task_id = "task-sched".to_string();
        let created = cp.request(json!({"cmd": "create_run", "task_id": task_id}), ANSWER).await?;
        let run_id = data(&created)["run_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HarnessError::Other(format!("create_run: {created}")))?;
        let dispatcher = ctx.spawn_dispatcher("d", &tools).await?;
        Ok(Exec {
            ctx,
            task_id,
            run_id,
            tools,
            cp,
            dispatcher,
            slots: (0..WORKERS).map(|_| Slot::default()).collect(),
            planned: Vec::new(),
            counter: 0,
            pending: Vec::new(),
            sent: Vec::new(),
            quiet: Vec::new(),
            reached: BTreeSet::new(),
            log: Vec::new(),
            tool_faults: Vec::new(),
            serialization: Vec::new(),
            secrets: Vec::new(),
            crash_planned: Vec::new(),
        })
    }

    pub(super) fn next(&mut self) -> u32 {
        self.counter += 1;
        self.counter
    }

    /// Make sure slot `w` has a process (a fresh owner when it had none).
    pub(super) async fn ensure(&mut self, w: usize) -> Result<(), HarnessError> {
        if self.slots[w].proc.is_none() {
            let slot = &mut self.slots[w];
            slot.spawned += 1;
            slot.known = 0;
            let name = format!("w{w}-{}", slot.spawned);
            let (p, proxy) = self.ctx.spawn_worker_proxied(&name, vec![]).await?;
            let slot = &mut self.slots[w];
            slot.proc = Some(p);
            slot.proxy = Some(proxy);
        }
        Ok(())
    }

    pub(super) fn owner(&self, w: usize) -> Option<String> {
        self.slots[w].proc.as_ref().map(|p| p.owner.clone())
    }

    /// Send `cmd` to slot `w` without waiting; `None` when the slot has no process.
    pub(super) async fn send(
        &mut self,
        w: usize,
        cmd: Value,
        write: Option<usize>,
    ) -> Result<Option<u64>, HarnessError> {
        let Some(p) = self.slots[w].proc.as_mut() else { return Ok(None) };
        let id = p.send(cmd).await?;
        self.pending.push(Pending { slot: w, id, write });
        Ok(Some(id))
    }

    /// Wait for the answer to command `id` of slot `w` and note what it says. A command still
    /// unanswered after [`ANSWER`] stays pending (a process the harness paused may hold a lock it
    /// waits for; that is allowed) and reads as the outcome `no_answer_yet`; its answer is
    /// collected at the end, when every process runs again.
    pub(super) async fn answer(&mut self, w: usize, id: u64) -> Result<Value, HarnessError> {
        let p = self.slots[w].proc.as_mut().ok_or_else(|| HarnessError::Other(format!("slot {w} has no process")))?;
        match p.reply(id, ANSWER).await {
            Ok(ev) => {
                self.settle(w, id, &ev);
                Ok(ev)
            }
            Err(HarnessError::Timeout { .. } | HarnessError::Starved { .. }) => {
                Ok(json!({"outcome": "no_answer_yet", "id": id}))
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn settle(&mut self, w: usize, id: u64, ev: &Value) {
        if let Some(r) = ev["revision"].as_i64() {
            self.slots[w].known = r;
        }
        if let Some(op) = data(ev)["operation_id"].as_str() {
            self.planned.push(op.to_string());
        }
        if let Some(i) = self.pending.iter().position(|p| p.slot == w && p.id == id) {
            if let Some(k) = self.pending.remove(i).write {
                self.sent[k].outcome = Some(outcome(ev).to_string());
            }
        }
    }

    /// Send `cmd` to worker `w`: wait for the answer when it runs, leave it queued when paused.
    pub(super) async fn tell(&mut self, w: usize, cmd: Value, write: Option<usize>) -> Result<String, HarnessError> {
        let paused = self.slots[w].paused.is_some();
        // Completions and failures enter the history too: a worker may end a run only when told.
        let write = match (write, cmd["cmd"].as_str()) {
            (None, Some(c @ ("succeed" | "fail"))) if self.slots[w].proc.is_some() => {
                self.sent.push(SentWrite {
                    owner: self.owner(w).unwrap_or_default(),
                    cmd: c.into(),
                    expected_revision: cmd["expected_revision"].as_i64(),
                    checkpoint: Value::Null,
                    outcome: None,
                });
                Some(self.sent.len() - 1)
            }
            _ => write,
        };
        let Some(id) = self.send(w, cmd, write).await? else { return Ok("no process".into()) };
        if paused {
            return Ok("queued while paused".into());
        }
        let ev = self.answer(w, id).await?;
        Ok(outcome(&ev).to_string())
    }

    pub(super) async fn lease(&self) -> Result<LeaseNow, HarnessError> {
        let row: Option<(Option<String>, i64, bool)> = sqlx::query_as(
            "SELECT owner, epoch, owner IS NOT NULL AND expires_at > clock_timestamp() FROM worker_leases WHERE run_id = $1",
        )
        .bind(self.run_id)
        .fetch_optional(&self.ctx.pool)
        .await?;
        let (owner, epoch, live) = row.unwrap_or((None, 0, false));
        Ok(LeaseNow { owner, epoch, live })
    }

    pub(super) async fn run_state(&self) -> Result<(String, i64), HarnessError> {
        Ok(sqlx::query_as("SELECT status, revision FROM agent_runs WHERE run_id = $1")
            .bind(self.run_id)
            .fetch_one(&self.ctx.pool)
            .await?)
    }

    pub(super) fn terminal(status: &str) -> bool {
        matches!(status, "succeeded" | "failed" | "cancelled")
    }

    /// The slot holding the live lease, if one of ours does.
    pub(super) async fn holder(&self) -> Result<Option<usize>, HarnessError> {
        let l = self.lease().await?;
        if !l.live {
            return Ok(None);
        }
        Ok((0..WORKERS).find(|w| self.owner(*w).is_some() && self.owner(*w) == l.owner))
    }

    /// Note the situations a write by slot `w` meets right now.
    pub(super) async fn note_write(&mut self, w: usize, stale_revision: bool) -> Result<(), HarnessError> {
        let l = self.lease().await?;
        let (status, _) = self.run_state().await?;
        if !(l.live && l.owner.is_some() && l.owner == self.owner(w)) {
            self.reached.insert("stale-term-write");
        }
        if stale_revision {
            self.reached.insert("stale-revision-write");
        }
        if Self::terminal(&status) {
            self.reached.insert("write-on-terminal-run");
        }
        Ok(())
    }

    /// A save by slot `w` naming revision `rev`, recorded in the history; returns its index.
    pub(super) fn save_cmd(&mut self, w: usize, rev: i64, body: Value, faults: Option<Value>) -> (Value, usize) {
        let n = self.next();
        let checkpoint = json!({"mark": format!("c{n}"), "step": n, "data": body});
        let mut cmd = json!({"cmd": "save", "checkpoint": checkpoint, "expected_revision": rev});
        if let Some(f) = faults {
            cmd["faults"] = f;
        }
        self.sent.push(SentWrite {
            owner: self.owner(w).unwrap_or_default(),
            cmd: "save".into(),
            expected_revision: Some(rev),
            checkpoint,
            outcome: None,
        });
        (cmd, self.sent.len() - 1)
    }

    /// A save by slot `w` that names no revision (the worker uses what it believes), recorded in
    /// the history; returns the command and its index.
    pub(super) fn save_cmd_believed(&mut self, w: usize, body: Value) -> (Value, usize) {
        let n = self.next();
        let checkpoint = json!({"mark": format!("c{n}"), "step": n, "data": body});
        self.sent.push(SentWrite {
            owner: self.owner(w).unwrap_or_default(),
            cmd: "save".into(),
            expected_revision: None,
            checkpoint: checkpoint.clone(),
            outcome: None,
        });
        (json!({"cmd": "save", "checkpoint": checkpoint}), self.sent.len() - 1)
    }

    async fn acquire(&mut self, w: usize) -> Result<String, HarnessError> {
        let l = self.lease().await?;
        let me = self.owner(w);
        if l.live && l.owner != me {
            self.reached.insert("acquire-of-live-lease");
        } else if l.owner.is_some() && !l.live && l.owner != me {
            self.reached.insert("takeover-of-expired-lease");
        } else if l.owner.is_none() && l.epoch > 0 {
            self.reached.insert("acquire-after-release");
        }
        let cmd = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": TTL_MS, "heartbeat_ms": 100, "renew_timeout_ms": 300});
        let got = self.tell(w, cmd, None).await?;
        if got == "ok" {
            let started = self.tell(w, json!({"cmd": "start"}), None).await?;
            Ok(format!("ok, start: {started}"))
        } else {
            Ok(got)
        }
    }

    pub async fn apply(&mut self, op: &Op) -> Result<(), HarnessError> {
        // A command to an empty slot starts a fresh process (a new owner) for it first.
        if let Some(w) = op.worker() {
            self.ensure(w).await?;
        }
        let what = match op {
            Op::Acquire { w } => self.acquire(*w).await?,
            Op::Renew { w } => self.tell(*w, json!({"cmd": "renew"}), None).await?,
            Op::Save { w, holder, at, body } => self.save(*w, *holder, *at, *body).await?,
            Op::SaveTwice { w } => match self.make_holder(None).await? {
                Some(h) => self.save_twice(h, *w).await?,
                None => "no live holder could be made".into(),
            },
            Op::Release { w } => self.tell(*w, json!({"cmd": "release"}), None).await?,
            Op::Succeed { w, holder } => self.complete("succeed", *w, *holder).await?,
            Op::Fail { w, holder } => self.complete("fail", *w, *holder).await?,
            Op::Plan { w, tool, body } => self.plan(*w, *tool, *body).await?,
            Op::Advance { w } => match self.planned.last().cloned() {
                Some(op) => self.tell(*w, json!({"cmd": "advance", "operation_id": op}), None).await?,
                None => "nothing planned".into(),
            },
            Op::Pause { w } => match (&self.slots[*w].proc, &self.slots[*w].paused) {
                (Some(_), None) => {
                    self.pause(*w).await?;
                    "paused".into()
                }
                _ => "not running".into(),
            },
            Op::Resume { w } => self.resume(*w).await?,
            Op::Kill { w } => self.kill(*w).await?,
            Op::Expire => self.expire().await?,
            Op::StaleHolder { by, then_write } => self.stale_holder(*by, *then_write).await?,
            Op::StaleTwin { then_write } => self.stale_twin(*then_write).await?,
            Op::ServerFreeze => self.server_freeze().await?,
            Op::HeldAcrossTakeover { by, point } => self.held_across_takeover(*by, *point).await?,
            Op::Cancel { plan_first, tool } => self.cancel(*plan_first, *tool).await?,
            Op::Retry => self.retry().await?,
            Op::ArmToolFault { fault } => {
                for tool in [Tool::Idem, Tool::Detid, Tool::Opquery, Tool::Plain] {
                    self.arm_tool_fault(tool, *fault).await?;
                }
                format!("armed {} on every tool", fault.mode())
            }
            Op::Dispatch { tool, body, fault } => self.dispatch(*tool, *body, *fault).await?,
            Op::LateResult { kill, cancel, tool } => self.late_result(*kill, *cancel, *tool, None).await?,
            Op::EndedInFlight { end, kill, tool } => self.late_result(*kill, false, *tool, Some(*end)).await?,
            Op::Reconcile => self.reconcile().await?,
            Op::Rogue { forge } => self.rogue(*forge).await?,
            Op::LostAnswer { ack, what } => self.lost_answer(*ack, *what).await?,
            Op::Serialization { failures } => self.serialization(*failures).await?,
            Op::PlanSecret { tool } => self.plan_secret(*tool).await?,
            Op::PlanCrash { tool } => self.plan_crash(*tool).await?,
        };
        self.log.push(format!("{} -> {what}", serde_json::to_string(op).expect("json")));
        Ok(())
    }

    /// A save by slot `w` (or by the holder, made if need be), naming the revision `at` says.
    async fn save(&mut self, w: usize, holder: bool, at: Rev, body: Body) -> Result<String, HarnessError> {
        let w = if holder { self.make_holder(None).await?.unwrap_or(w) } else { w };
        let (_, current) = self.run_state().await?;
        let rev = match at {
            Rev::Known => self.slots[w].known,
            Rev::Current => current,
            // A run at revision 0 has no earlier revision: the save names 0 (the contract
            // allows no negative revision), and is judged as a current one.
            Rev::Stale => (current - 1).max(0),
        };
        self.note_write(w, rev < current).await?;
        let n = self.counter + 1;
        let (cmd, k) = self.save_cmd(w, rev, bodies::value(body, n), None);
        Ok(format!("at {rev}: {}", self.tell(w, cmd, Some(k)).await?))
    }

    /// `succeed` or `fail` by slot `w` (or by the holder, made if need be).
    pub(super) async fn complete(&mut self, cmd: &str, w: usize, holder: bool) -> Result<String, HarnessError> {
        let w = if holder { self.make_holder(None).await?.unwrap_or(w) } else { w };
        self.note_write(w, false).await?;
        self.tell(w, json!({ "cmd": cmd }), None).await
    }

    /// SIGKILL to slot `w`'s process; its unanswered commands are forgotten.
    pub(super) async fn kill(&mut self, w: usize) -> Result<String, HarnessError> {
        let slot = &mut self.slots[w];
        slot.paused = None;
        Ok(match slot.proc.take() {
            Some(mut p) => {
                p.kill().await?;
                self.pending.retain(|p| p.slot != w);
                "killed".into()
            }
            None => "no process".into(),
        })
    }

    /// The control plane cancels the run (after a plan, when asked for one and nothing is prepared).
    async fn cancel(&mut self, plan_first: bool, tool: Tool) -> Result<String, HarnessError> {
        let mut first = String::new();
        if plan_first && !self.operation_statuses().await?.iter().any(|s| s == "prepared") {
            first = format!("plan first: {}; ", self.plan(0, tool, Body::Plain).await?);
        }
        let ops = self.operation_statuses().await?;
        if ops.iter().any(|s| s == "prepared") {
            self.reached.insert("cancel-with-prepared");
        }
        if ops.iter().any(|s| s == "dispatching" || s == "unknown") {
            self.reached.insert("cancel-with-in-flight");
        }
        let ev = ask(&mut self.cp, json!({"cmd": "cancel", "run_id": self.run_id}), ANSWER).await?;
        Ok(format!("{first}{}", outcome(&ev)))
    }

    /// A dispatcher pass, with `fault` armed on every tool first.
    async fn dispatch(&mut self, tool: Tool, body: Body, fault: Option<ToolFault>) -> Result<String, HarnessError> {
        // Something to dispatch: when nothing of the run is prepared, the holder plans first.
        let mut what = String::new();
        if !self.operation_statuses().await?.iter().any(|s| s == "prepared") {
            what = format!("plan first: {}; ", self.plan(0, tool, body).await?);
        }
        if let Some(f) = fault {
            for t in [Tool::Idem, Tool::Detid, Tool::Opquery, Tool::Plain] {
                self.arm_tool_fault(t, f).await?;
            }
            what.push_str(&format!("armed {}; ", f.mode()));
        }
        let (status, _) = self.run_state().await?;
        if Self::terminal(&status) && self.operation_statuses().await?.iter().any(|s| s == "prepared") {
            self.reached.insert("claim-of-ended-run");
        }
        let ev = ask(
            &mut self.dispatcher,
            json!({"cmd": "dispatch", "claim_ttl_ms": 1000, "call_timeout_ms": 400, "limit": 5}),
            ANSWER,
        )
        .await?;
        let lost = data(&ev).as_array().is_some_and(|a| a.iter().any(|d| d["outcome"] == "unknown"));
        if lost || self.operation_statuses().await?.iter().any(|s| s == "unknown") {
            self.reached.insert("remote-answer-lost");
        }
        Ok(format!("{what}{} {}", outcome(&ev), data(&ev)))
    }

    /// A reconciler pass.
    async fn reconcile(&mut self) -> Result<String, HarnessError> {
        if self.operation_statuses().await?.iter().any(|s| s == "unknown") {
            self.reached.insert("unknown-reconciled");
        }
        let ev = ask(&mut self.dispatcher, json!({"cmd": "reconcile", "call_timeout_ms": 400}), ANSWER).await?;
        Ok(format!("{} {}", outcome(&ev), data(&ev)))
    }

    /// The holder (made when there is none; slot `w` otherwise) plans a step for `tool`.
    pub(super) async fn plan(&mut self, w: usize, tool: Tool, body: Body) -> Result<String, HarnessError> {
        // Intents are what the outbox rows need: the plan goes to the holder; stale writers are
        // the saves' business.
        let w = self.make_holder(None).await?.unwrap_or(w);
        self.ensure(w).await?;
        self.note_write(w, false).await?;
        let n = self.next();
        let step = format!("s{n}");
        let name = format!("res-{}-{step}", &self.run_id.simple().to_string()[..8]);
        let request = json!({"name": name, "size": n, "data": bodies::value(body, n)});
        let got = self
            .tell(w, json!({"cmd": "plan", "step_id": step, "tool": tool.name(), "request": request}), None)
            .await?;
        if got == "ok" {
            self.reached.insert("intent-registered");
        }
        Ok(got)
    }

    /// SIGSTOP slot `w` between its transactions: wait (bounded, 2 s) until none of its sessions
    /// is inside one, so that a pause does not hold row locks everyone else then waits on until
    /// the end of the schedule (a pause inside a transaction is `held_across_takeover`'s business).
    pub(super) async fn pause(&mut self, w: usize) -> Result<(), HarnessError> {
        let Some(owner) = self.owner(w) else { return Ok(()) };
        let pool = self.ctx.pool.clone();
        let _ = fenceproof_harness::wait::until(
            "the worker's sessions to be between transactions",
            Duration::from_secs(2),
            || {
                let (pool, owner) = (pool.clone(), owner.clone());
                async move {
                    let busy: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1
                            AND (state LIKE 'idle in transaction%' OR (state = 'active' AND xact_start IS NOT NULL))",
                    )
                    .bind(owner)
                    .fetch_one(&pool)
                    .await?;
                    Ok((busy == 0).then_some(()))
                }
            },
        )
        .await;
        let p = self.slots[w].proc.as_ref().ok_or_else(|| HarnessError::Other(format!("slot {w} has no process")))?;
        self.slots[w].paused = Some(p.pause().await?);
        Ok(())
    }

    pub(super) async fn resume(&mut self, w: usize) -> Result<String, HarnessError> {
        let slot = &mut self.slots[w];
        match (slot.proc.as_ref(), slot.paused.take()) {
            (Some(p), Some(pause)) => {
                p.resume(pause).await?;
                Ok("resumed".into())
            }
            _ => Ok("not paused".into()),
        }
    }

    async fn expire(&mut self) -> Result<String, HarnessError> {
        let l = self.lease().await?;
        let holder_can_renew = l.owner.as_ref().is_some_and(|o| {
            self.slots.iter().any(|s| s.paused.is_none() && s.proc.as_ref().is_some_and(|p| &p.owner == o))
        });
        Ok(match l.owner {
            _ if !l.live => "already free or expired".into(),
            Some(_) if holder_can_renew => "holder is renewing; not waiting".into(),
            o if self.expired().await? => format!("expired the lease of {}", o.unwrap_or_default()),
            _ => "the lease did not expire (someone else renews it)".into(),
        })
    }

    /// Wait (bounded) until the lease has expired on the database clock; false when it did not
    /// (a process the harness did not pause keeps renewing it).
    pub(super) async fn expired(&self) -> Result<bool, HarnessError> {
        match self.ctx.wait_lease_expired(self.run_id).await {
            Ok(()) => Ok(true),
            Err(HarnessError::Timeout { .. } | HarnessError::Starved { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn retry(&mut self) -> Result<String, HarnessError> {
        let (status, _) = self.run_state().await?;
        self.reached.insert(if Self::terminal(&status) { "retry-after-terminal" } else { "retry-while-live" });
        let ev = ask(&mut self.cp, json!({"cmd": "create_run", "task_id": self.task_id}), ANSWER).await?;
        match data(&ev)["run_id"].as_str().and_then(|s| s.parse::<Uuid>().ok()) {
            Some(run) if outcome(&ev) == "ok" => {
                let was = self.run_id;
                self.run_id = run;
                Ok(format!("ok: new run {run} (was {was})"))
            }
            _ => Ok(outcome(&ev).to_string()),
        }
    }

    async fn operation_statuses_all(&self) -> Result<Vec<String>, HarnessError> {
        Ok(sqlx::query_scalar("SELECT status FROM tool_operations").fetch_all(&self.ctx.pool).await?)
    }

    pub(super) async fn operation_statuses(&self) -> Result<Vec<String>, HarnessError> {
        Ok(sqlx::query_scalar("SELECT status FROM tool_operations WHERE run_id = $1")
            .bind(self.run_id)
            .fetch_all(&self.ctx.pool)
            .await?)
    }

    /// Resume everyone (their queued commands run), collect the answers still owed, stop every
    /// process, and judge.
    pub async fn finish(mut self) -> Result<(Vec<Check>, Vec<String>), HarnessError> {
        for w in 0..WORKERS {
            self.resume(w).await?;
        }
        let owed: Vec<(usize, u64)> = self.pending.iter().map(|p| (p.slot, p.id)).collect();
        for (w, id) in owed {
            match self.answer(w, id).await {
                Ok(_) => {}
                Err(e) => self.log.push(format!("no answer to a queued command of w{w}: {e}")),
            }
        }
        // The heal step's final read: with every fault healed, one reconciler pass meets whatever
        // the schedule left unknown (a reconciler that declares it failed is judged below).
        if self.operation_statuses_all().await?.iter().any(|s| s == "unknown") {
            self.reached.insert("unknown-reconciled");
        }
        let ev = ask(&mut self.dispatcher, json!({"cmd": "reconcile", "call_timeout_ms": 400}), ANSWER).await?;
        self.log.push(format!("final reconcile -> {} {}", outcome(&ev), data(&ev)));
        for f in std::mem::take(&mut self.tool_faults) {
            f.heal().await?;
        }
        self.send_crash_planned().await?;
        for slot in &mut self.slots {
            if let Some(mut p) = slot.proc.take() {
                p.shutdown(ANSWER).await?;
            }
        }
        self.dispatcher.shutdown(ANSWER).await?;
        self.cp.shutdown(ANSWER).await?;
        let rows = self.ctx.commits().await?;
        let entries = ledger::entries(&self.tools.ledger)?;
        let ops: Vec<OperationRow> = sqlx::query_as(
            "SELECT operation_id, tool_name, status, request_digest,
                        request_body::text LIKE '%\"$secret\"%' AS carries_secrets FROM tool_operations",
        )
        .fetch_all(&self.ctx.pool)
        .await?;
        let worker_writes =
            rows.iter().filter(|r| r.is_runs() && r.op == "UPDATE" && r.writer.starts_with("worker-")).count();
        self.log.push(format!("committed worker writes of the runs: {worker_writes}"));
        let mut checks = invariants::all(&rows, &[CONTROL, self.cp.owner.as_str()]);
        checks.push(invariants::one_effect_per_operation(&entries, TOOLS));
        checks.extend(history::all(&rows, &self.sent));
        checks.push(history::quiet_windows_stay_quiet(&rows, &self.quiet));
        checks.extend(remote::all(&entries, &ops));
        let callers = fenceproof_harness::check::callers::Callers::from_timeline(&self.ctx.timeline.entries());
        checks.push(fenceproof_harness::check::claims::no_transaction_across_call(&entries, &rows, &callers));
        checks.extend(serialization::in_schedule(&self.serialization));
        let bodies: Vec<String> =
            sqlx::query_scalar("SELECT request_body::text FROM tool_operations").fetch_all(&self.ctx.pool).await?;
        checks.extend(super::masking::judge(&self.secrets, &bodies, &rows));
        let steps: Vec<(String, String, String)> =
            sqlx::query_as("SELECT step_id, operation_id, status FROM tool_operations")
                .fetch_all(&self.ctx.pool)
                .await?;
        checks.extend(super::crash_judge::judge(&self.crash_planned, &steps, &entries));
        checks.extend(super::lease_terms::judge(&rows, &[TTL_MS, LONG_TTL_MS]));
        checks.push(fenceproof_scenarios::trace_check::judge_with_ledger(
            &self.ctx.dir,
            &rows,
            &self.ctx.timeline.entries(),
            &[],
            self.ctx.server.is_some(),
            &entries,
        )?);
        Ok((checks, self.log))
    }
}
