//! Playing one schedule against a fresh database with real processes, then judging it by the
//! global invariants of spec section 01 over the oracle rows and the tools' ledger.
//!
//! Commands to a paused worker are sent without waiting: they sit in its stdin and run when it is
//! resumed, exactly like requests a stalled process had in flight. Every wait is bounded.

use std::time::Duration;

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::Pause;
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use serde_json::{json, Value};
use uuid::Uuid;

use super::ops::{Op, WORKERS};
use crate::ctx::{data, outcome, Ctx, CONTROL};

/// Bound on one command's answer inside a schedule.
const ANSWER: Duration = Duration::from_secs(10);
const TTL_MS: i64 = 400;

#[derive(Default)]
struct Slot {
    proc: Option<WorkerProc>,
    paused: Option<Pause>,
    spawned: u32,
}

pub struct Exec<'a> {
    ctx: &'a Ctx,
    run_id: Uuid,
    tools: ToolsProc,
    cp: WorkerProc,
    dispatcher: WorkerProc,
    slots: Vec<Slot>,
    planned: Vec<String>,
    steps: u32,
    /// One line per operation: what happened.
    pub log: Vec<String>,
}

impl<'a> Exec<'a> {
    pub async fn new(ctx: &'a Ctx) -> Result<Exec<'a>, HarnessError> {
        let tools = ctx.spawn_tools().await?;
        let mut cp = ctx.spawn_control_plane().await?;
        let created = cp.request(json!({"cmd": "create_run", "task_id": "task-sched"}), ANSWER).await?;
        let run_id = data(&created)["run_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HarnessError::Other(format!("create_run: {created}")))?;
        let dispatcher = ctx.spawn_dispatcher("d", &tools).await?;
        Ok(Exec {
            ctx,
            run_id,
            tools,
            cp,
            dispatcher,
            slots: (0..WORKERS).map(|_| Slot::default()).collect(),
            planned: Vec::new(),
            steps: 0,
            log: Vec::new(),
        })
    }

    /// Send `cmd` to worker `w`: wait for the answer when it runs, just queue it when paused.
    async fn tell(&mut self, w: usize, cmd: Value) -> Result<String, HarnessError> {
        let slot = &mut self.slots[w];
        let Some(p) = slot.proc.as_mut() else { return Ok("no process".into()) };
        if slot.paused.is_some() {
            p.send(cmd).await?;
            return Ok("queued while paused".into());
        }
        let ev = p.request(cmd, ANSWER).await?;
        if let Some(op) = data(&ev)["operation_id"].as_str() {
            self.planned.push(op.to_string());
        }
        Ok(outcome(&ev).to_string())
    }

    async fn current_revision(&self) -> Result<i64, HarnessError> {
        Ok(sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1")
            .bind(self.run_id)
            .fetch_one(&self.ctx.pool)
            .await?)
    }

    pub async fn apply(&mut self, op: &Op) -> Result<(), HarnessError> {
        // A command to an empty slot starts a fresh process (a new owner) for it first.
        if let Some(w) = op.worker().filter(|_| !matches!(op, Op::Pause { .. } | Op::Resume { .. } | Op::Kill { .. })) {
            if self.slots[w].proc.is_none() {
                let slot = &mut self.slots[w];
                slot.spawned += 1;
                let name = format!("w{w}-{}", slot.spawned);
                slot.proc = Some(self.ctx.spawn_worker(&name, vec![]).await?);
            }
        }
        let what = match op {
            Op::Acquire { w } => {
                let got = self.tell(*w, json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": TTL_MS, "heartbeat_ms": 100, "renew_timeout_ms": 300})).await?;
                if got == "ok" {
                    let started = self.tell(*w, json!({"cmd": "start"})).await?;
                    format!("ok, start: {started}")
                } else {
                    got
                }
            }
            Op::Renew { w } => self.tell(*w, json!({"cmd": "renew"})).await?,
            Op::Save { w } => {
                self.steps += 1;
                self.tell(*w, json!({"cmd": "save", "checkpoint": {"step": self.steps}})).await?
            }
            Op::SaveCurrent { w } => {
                self.steps += 1;
                let rev = self.current_revision().await?;
                self.tell(*w, json!({"cmd": "save", "checkpoint": {"step": self.steps}, "expected_revision": rev}))
                    .await?
            }
            Op::Release { w } => self.tell(*w, json!({"cmd": "release"})).await?,
            Op::Succeed { w } => self.tell(*w, json!({"cmd": "succeed"})).await?,
            Op::Plan { w } => {
                self.steps += 1;
                let step = format!("s{}", self.steps);
                self.tell(*w, json!({"cmd": "plan", "step_id": step, "tool": "idem", "request": {"step": step}}))
                    .await?
            }
            Op::Advance { w } => match self.planned.last().cloned() {
                Some(op) => self.tell(*w, json!({"cmd": "advance", "operation_id": op})).await?,
                None => "nothing planned".into(),
            },
            Op::Pause { w } => {
                let slot = &mut self.slots[*w];
                match (&slot.proc, &slot.paused) {
                    (Some(p), None) => {
                        slot.paused = Some(p.pause().await?);
                        "paused".into()
                    }
                    _ => "not running".into(),
                }
            }
            Op::Resume { w } => {
                let slot = &mut self.slots[*w];
                match (slot.proc.as_ref(), slot.paused.take()) {
                    (Some(p), Some(pause)) => {
                        p.resume(pause).await?;
                        "resumed".into()
                    }
                    _ => "not paused".into(),
                }
            }
            Op::Kill { w } => {
                let slot = &mut self.slots[*w];
                slot.paused = None;
                match slot.proc.take() {
                    Some(mut p) => {
                        p.kill().await?;
                        "killed".into()
                    }
                    None => "no process".into(),
                }
            }
            Op::Expire => {
                let owner: Option<String> = sqlx::query_scalar(
                    "SELECT owner FROM worker_leases WHERE run_id = $1 AND expires_at > clock_timestamp()",
                )
                .bind(self.run_id)
                .fetch_optional(&self.ctx.pool)
                .await?
                .flatten();
                let holder_can_renew = owner.as_ref().is_some_and(|o| {
                    self.slots.iter().any(|s| s.paused.is_none() && s.proc.as_ref().is_some_and(|p| &p.owner == o))
                });
                match owner {
                    None => "already free or expired".into(),
                    Some(_) if holder_can_renew => "holder is renewing; not waiting".into(),
                    Some(o) => {
                        self.ctx.wait_lease_expired(self.run_id).await?;
                        format!("expired the lease of {o}")
                    }
                }
            }
            Op::Cancel => {
                outcome(&self.cp.request(json!({"cmd": "cancel", "run_id": self.run_id}), ANSWER).await?).to_string()
            }
            Op::Dispatch => {
                let ev = self
                    .dispatcher
                    .request(json!({"cmd": "dispatch", "claim_ttl_ms": 300, "limit": 5}), ANSWER)
                    .await?;
                format!("{} {}", outcome(&ev), data(&ev))
            }
            Op::Reconcile => {
                let ev = self.dispatcher.request(json!({"cmd": "reconcile"}), ANSWER).await?;
                format!("{} {}", outcome(&ev), data(&ev))
            }
        };
        self.log.push(format!("{} -> {what}", serde_json::to_string(op).expect("json")));
        Ok(())
    }

    /// Resume everyone (their queued commands run), stop every process, and judge.
    pub async fn finish(mut self) -> Result<(Vec<Check>, Vec<String>), HarnessError> {
        for slot in &mut self.slots {
            if let (Some(p), Some(pause)) = (slot.proc.as_ref(), slot.paused.take()) {
                p.resume(pause).await?;
            }
        }
        for slot in &mut self.slots {
            if let Some(mut p) = slot.proc.take() {
                p.shutdown(ANSWER).await?;
            }
        }
        self.dispatcher.shutdown(ANSWER).await?;
        self.cp.shutdown(ANSWER).await?;
        let rows = self.ctx.commits().await?;
        let entries = ledger::entries(&self.tools.ledger)?;
        let worker_writes =
            rows.iter().filter(|r| r.is_runs() && r.op == "UPDATE" && r.writer.starts_with("worker-")).count();
        self.log.push(format!("committed worker writes of the run: {worker_writes}"));
        let mut checks = invariants::all(&rows, &[CONTROL, self.cp.owner.as_str()]);
        checks.push(invariants::one_effect_per_operation(&entries, &["idem"]));
        Ok((checks, self.log))
    }
}
