//! The composite faults of a schedule, each a short script over real processes and real database
//! waits: two writes in flight at one revision, a stale holder, a write held across a takeover, a
//! late dispatcher result, a tool fault, and a rogue session with forged terms. A composite whose
//! precondition is missing (nobody holds the lease, nothing is prepared) says so and does nothing.
//! A worker that ignores the `faults` field is not an error: the barrier is let go and the schedule
//! goes on without that hold.

use std::time::Duration;

use fenceproof_harness::faults::tools::ArmedToolFault;
use fenceproof_harness::faults::{self, DbBarrier, ServerFreeze};
use fenceproof_harness::HarnessError;
use serde_json::json;
use sqlx::Connection;

use super::bodies;
use super::exec::{ask, Exec, ANSWER};
use super::ops::{Body, Forge, LostWrite, Point, RunEnd, Tool, ToolFault, WORKERS};
use fenceproof_scenarios::ctx::{data, outcome};

/// How long a composite waits for a worker to reach a barrier or report on its heartbeat.
const REACH: Duration = Duration::from_secs(5);
/// Barrier keys of schedules (distinct from the experiments').
const BARRIER_BASE: i64 = 0x5CED_0000;

impl Exec<'_> {
    /// Two saves at the current revision in flight at once (from one process or two).
    pub(super) async fn save_twice(&mut self, w: usize, v: usize) -> Result<String, HarnessError> {
        self.ensure(w).await?;
        self.ensure(v).await?;
        let (_, rev) = self.run_state().await?;
        self.reached.insert("writes-in-flight-at-one-revision");
        self.note_write(w, false).await?;
        let n = self.counter + 1;
        let (a, ka) = self.save_cmd(w, rev, bodies::value(Body::Plain, n), None);
        let (b, kb) = self.save_cmd(v, rev, bodies::value(Body::Nested, n + 1), None);
        let ia = self.send(w, a, Some(ka)).await?;
        let ib = self.send(v, b, Some(kb)).await?;
        let mut got = Vec::new();
        for (slot, id) in [(w, ia), (v, ib)] {
            match id {
                Some(id) if self.slots[slot].paused.is_none() => {
                    got.push(outcome(&self.answer(slot, id).await?).to_string())
                }
                Some(_) => got.push("queued while paused".into()),
                None => got.push("no process".into()),
            }
        }
        Ok(format!("both at {rev}: {}", got.join(" / ")))
    }

    /// The running, unpaused slot holding the live lease of a running run; when there is none, a
    /// slot other than `not` acquires and starts it. `None` when that fails (the run has ended).
    pub(super) async fn make_holder(&mut self, not: Option<usize>) -> Result<Option<usize>, HarnessError> {
        if let Some(h) = self.holder().await? {
            return Ok(self.slots[h].paused.is_none().then_some(h));
        }
        let Some(w) = (0..WORKERS).find(|w| Some(*w) != not && self.slots[*w].paused.is_none()) else {
            return Ok(None);
        };
        self.ensure(w).await?;
        if self.lease().await?.live {
            return Ok(None);
        }
        let cmd = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": super::exec::TTL_MS, "heartbeat_ms": 100, "renew_timeout_ms": 300});
        if self.tell(w, cmd, None).await? != "ok" {
            return Ok(None);
        }
        self.tell(w, json!({"cmd": "start"}), None).await?;
        let (status, _) = self.run_state().await?;
        Ok((status == "running").then_some(w))
    }

    /// Wait (bounded) for slot `w`'s heartbeat to report that its lease is gone.
    async fn heartbeat_verdict(&mut self, w: usize) -> String {
        let Some(p) = self.slots[w].proc.as_mut() else { return "no process".into() };
        let r = p
            .wait_event("a heartbeat verdict", REACH, |e| {
                matches!(e["event"].as_str(), Some("heartbeat_lost" | "heartbeat_unconfirmed" | "execution_cancelled"))
            })
            .await;
        match r {
            Ok(ev) => format!("heartbeat: {}", ev["event"].as_str().unwrap_or("?")),
            Err(_) => format!("no heartbeat verdict within {}s", REACH.as_secs()),
        }
    }

    /// The holder is paused past its expiry; `by` may take over; the holder resumes, its heartbeat
    /// finds the lease gone; with `then_write` it saves, renews, completes and releases as if
    /// nothing happened.
    pub(super) async fn stale_holder(&mut self, by: Option<usize>, then_write: bool) -> Result<String, HarnessError> {
        let Some(h) = self.make_holder(by).await? else { return Ok("no live holder could be made".into()) };
        self.pause(h).await?;
        if !self.expired().await? {
            self.resume(h).await?;
            return Ok(format!("w{h} paused, but the lease did not expire (someone else renews it)"));
        }
        let mut what = vec![format!("w{h} paused past expiry")];
        if let Some(b) = by.filter(|b| *b != h) {
            self.ensure(b).await?;
            self.reached.insert("takeover-of-expired-lease");
            let cmd = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": super::exec::TTL_MS, "heartbeat_ms": 100, "renew_timeout_ms": 300});
            let got = self.tell(b, cmd, None).await?;
            if got == "ok" {
                self.tell(b, json!({"cmd": "start"}), None).await?;
            }
            what.push(format!("w{b} took over: {got}"));
        }
        self.resume(h).await?;
        self.reached.insert("renewal-after-expiry");
        what.push(self.heartbeat_verdict(h).await);
        if then_write {
            self.note_write(h, false).await?;
            let rev = self.slots[h].known;
            let n = self.counter + 1;
            let (cmd, k) = self.save_cmd(h, rev, bodies::value(Body::Numbers, n), None);
            what.push(format!("stale save: {}", self.tell(h, cmd, Some(k)).await?));
            what.push(format!("stale renew: {}", self.tell(h, json!({"cmd": "renew"}), None).await?));
            what.push(format!("stale succeed: {}", self.tell(h, json!({"cmd": "succeed"}), None).await?));
            what.push(format!("stale release: {}", self.tell(h, json!({"cmd": "release"}), None).await?));
        }
        Ok(what.join(", "))
    }

    /// The holder's save waits on a barrier at `point`; the holder is paused past its expiry and
    /// `by` tries to take over (its acquire may wait on the save's row lock); then the barrier is
    /// let go and the holder resumed.
    pub(super) async fn held_across_takeover(&mut self, by: usize, point: Point) -> Result<String, HarnessError> {
        let Some(h) = self.make_holder(Some(by)).await? else { return Ok("no live holder could be made".into()) };
        let b = if by == h { (h + 1) % WORKERS } else { by };
        self.ensure(b).await?;
        let key = BARRIER_BASE + self.next() as i64;
        let barrier =
            faults::inject(DbBarrier::new(&self.ctx.db_url, key).at(point.name()), &self.ctx.timeline).await?;
        let (_, rev) = self.run_state().await?;
        let faults = json!({"barriers": [{"point": point.name(), "key": key}]});
        let n = self.counter + 1;
        let (cmd, k) = self.save_cmd(h, rev, bodies::value(Body::Unicode, n), Some(faults));
        let Some(save) = self.send(h, cmd, Some(k)).await? else { return Ok("no process".into()) };
        let owner = self.owner(h).unwrap_or_default();
        let mut what = Vec::new();
        let held = barrier.wait_blocked(&self.ctx.pool, &[owner], 1, REACH).await.is_ok();
        if held {
            let pause = self.slots[h].proc.as_ref().expect("holder has a process").pause().await?;
            self.slots[h].paused = Some(pause);
            if !self.expired().await? {
                barrier.heal().await?;
                self.resume(h).await?;
                let ev = self.answer(h, save).await?;
                return Ok(format!(
                    "w{h} paused, but the lease did not expire (someone else renews it); save: {}",
                    outcome(&ev)
                ));
            }
            self.reached.insert("write-held-across-takeover");
            let acq = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": super::exec::TTL_MS, "heartbeat_ms": 100, "renew_timeout_ms": 300});
            let take = self.send(b, acq, None).await?;
            // Let the takeover reach the database (it answers, or it waits on the save's lock).
            if let Some(t) = take {
                if let Some(p) = self.slots[b].proc.as_mut() {
                    if let Ok(ev) = p.reply(t, Duration::from_millis(300)).await {
                        what.push(format!("w{b} acquire while held: {}", outcome(&ev)));
                        self.pending.retain(|p| !(p.slot == b && p.id == t));
                    }
                }
            }
            barrier.heal().await?;
            self.resume(h).await?;
            if let Some(t) = take {
                if self.pending.iter().any(|p| p.slot == b && p.id == t) {
                    what.push(format!("w{b} acquire after the hold: {}", outcome(&self.answer(b, t).await?)));
                }
            }
        } else {
            what.push(format!("w{h} did not stop at {}", point.name()));
            barrier.heal().await?;
        }
        let ev = self.answer(h, save).await?;
        what.insert(0, format!("w{h} save held at {} over revision {rev}: {}", point.name(), outcome(&ev)));
        Ok(what.join(", "))
    }

    /// Arm a fault in the fake tools for the next create of `tool`. It stays armed until a create
    /// fires it; the schedule's heal step disarms what is left ([`Exec::finish`]).
    pub(super) async fn arm_tool_fault(&mut self, tool: Tool, fault: ToolFault) -> Result<String, HarnessError> {
        let armed = ArmedToolFault::new(self.tools.addr, tool.name(), fault.into());
        self.tool_faults.push(faults::inject(armed, &self.ctx.timeline).await?);
        Ok(format!("armed {} on {}", fault.mode(), tool.name()))
    }

    /// A dispatcher is held after its remote call until its claim expires; the schedule's own
    /// dispatcher reconciles and dispatches; then the held one writes its (late) result.
    pub(super) async fn late_result(
        &mut self,
        kill: bool,
        cancel: bool,
        tool: Tool,
        end: Option<RunEnd>,
    ) -> Result<String, HarnessError> {
        let mut what = Vec::new();
        if !self.operation_statuses().await?.iter().any(|s| s == "prepared") {
            // A run about to end plans through its holder (made if need be), so an operation is in
            // flight when it ends.
            let w = if end.is_some() { self.make_holder(None).await?.unwrap_or(0) } else { 0 };
            what.push(format!("plan first: {}", self.plan(w, tool, Body::Plain).await?));
        }
        let n = self.next();
        let key = BARRIER_BASE + n as i64;
        let mut d = self.ctx.spawn_dispatcher(&format!("late{n}"), &self.tools).await?;
        let barrier =
            faults::inject(DbBarrier::new(&self.ctx.db_url, key).at("before_result_write"), &self.ctx.timeline).await?;
        let faults = json!({"barriers": [{"point": "before_result_write", "key": key}]});
        let cmd = d
            .send(json!({"cmd": "dispatch", "claim_ttl_ms": 300, "call_timeout_ms": 400, "limit": 1, "faults": faults}))
            .await?;
        let mut killed = false;
        if barrier.wait_blocked(&self.ctx.pool, &[d.owner.clone()], 1, REACH).await.is_ok() {
            if kill {
                d.kill().await?;
                killed = true;
                what.push("the dispatcher was killed after its remote call".into());
            }
            if cancel {
                self.reached.insert("cancel-with-in-flight");
                let ev = ask(&mut self.cp, json!({"cmd": "cancel", "run_id": self.run_id}), ANSWER).await?;
                what.push(format!("cancel while dispatching: {}", outcome(&ev)));
            }
            if let Some(end) = end {
                what.push(self.end_meanwhile(end).await?);
            }
            let claimed: Option<String> =
                sqlx::query_scalar("SELECT operation_id FROM tool_operations WHERE dispatch_owner = $1 LIMIT 1")
                    .bind(&d.owner)
                    .fetch_optional(&self.ctx.pool)
                    .await?;
            if let Some(op) = &claimed {
                self.ctx.wait_claim_expired(op).await?;
                self.reached.insert("late-result");
            }
            let rec = ask(&mut self.dispatcher, json!({"cmd": "reconcile", "call_timeout_ms": 400}), ANSWER).await?;
            let dis = ask(
                &mut self.dispatcher,
                json!({"cmd": "dispatch", "claim_ttl_ms": 1000, "call_timeout_ms": 400, "limit": 5}),
                ANSWER,
            )
            .await?;
            what.push(format!("meanwhile reconcile {} {}, dispatch {}", outcome(&rec), data(&rec), outcome(&dis)));
        } else {
            what.push("the dispatcher did not stop before its result write".into());
        }
        barrier.heal().await?;
        if !killed {
            let late = match d.reply(cmd, ANSWER).await {
                Ok(ev) => format!("{} {}", outcome(&ev), data(&ev)),
                Err(HarnessError::Timeout { .. } | HarnessError::Starved { .. }) => "no_answer_yet".into(),
                Err(e) => return Err(e),
            };
            what.push(format!("late dispatcher: {late}"));
            d.shutdown(ANSWER).await?;
        }
        Ok(what.join(", "))
    }

    /// While an operation is dispatching: the holder completes or fails the run, releases its
    /// lease, or is paused until the lease lapses on the database clock.
    async fn end_meanwhile(&mut self, end: RunEnd) -> Result<String, HarnessError> {
        let Some(h) = self.make_holder(None).await? else { return Ok("no live holder to end the run".into()) };
        Ok(match end {
            RunEnd::Succeed => format!("the holder succeeds meanwhile: {}", self.complete("succeed", h, false).await?),
            RunEnd::Fail => format!("the holder fails the run meanwhile: {}", self.complete("fail", h, false).await?),
            RunEnd::Release => {
                format!("the holder releases meanwhile: {}", self.tell(h, json!({"cmd": "release"}), None).await?)
            }
            RunEnd::Lapse => {
                self.pause(h).await?;
                let lapsed = self.expired().await?;
                format!("the holder paused meanwhile; its lease lapsed: {lapsed}")
            }
        })
    }

    /// A rogue session (its own application_name, no lease) calls a fenced function with forged
    /// terms. Whatever it is told, the oracle judges whether anything committed.
    pub(super) async fn rogue(&mut self, forge: Forge) -> Result<String, HarnessError> {
        let l = self.lease().await?;
        let (_, rev) = self.run_state().await?;
        let owner = l.owner.clone().unwrap_or_else(|| "worker-nobody".into());
        let n = self.next();
        let mut conn = sqlx::PgConnection::connect(&self.ctx.db_url).await?;
        sqlx::query("SET application_name = 'rogue-session'").execute(&mut conn).await?;
        sqlx::query("SET statement_timeout = '5s'").execute(&mut conn).await?;
        let checkpoint = json!({"rogue": n});
        // (statement, owner, epoch): every forge but the result write is one call with forged terms.
        let transition = "SELECT fp_run_transition($1, $2, $3, $4, 'running', 'running', $5::jsonb, NULL, NULL, NULL, NULL, NULL, NULL, NULL)";
        let renew = "SELECT * FROM fp_lease_renew($1, $2, $3, 60000)";
        let release = "SELECT fp_lease_release($1, $2, $3)";
        let forged = "worker-forged";
        let call = match forge {
            Forge::StaleEpochWrite => Some((transition, owner.as_str(), l.epoch - 1)),
            Forge::ForeignOwnerWrite => Some((transition, forged, l.epoch)),
            Forge::StaleEpochRenew => Some((renew, owner.as_str(), l.epoch - 1)),
            Forge::StaleEpochRelease => Some((release, owner.as_str(), l.epoch - 1)),
            Forge::ForeignOwnerRenew => Some((renew, forged, l.epoch)),
            Forge::ForeignOwnerRelease => Some((release, forged, l.epoch)),
            Forge::ExpiredRenew if l.live || l.owner.is_none() => {
                conn.close().await?;
                return Ok("the lease is live or free: no expired term to resurrect".into());
            }
            Forge::ExpiredRenew => Some((renew, owner.as_str(), l.epoch)),
            Forge::ForeignResult => None,
        };
        let r = match call {
            Some((sql, who, epoch)) => {
                let q = sqlx::query(sql).bind(self.run_id).bind(who).bind(epoch);
                // Only the transition takes the revision it names and a checkpoint.
                let q = if sql == transition { q.bind(rev).bind(&checkpoint) } else { q };
                q.execute(&mut conn).await.map(|r| r.rows_affected())
            }
            None => {
                let op: Option<(String, i64, String)> = sqlx::query_as(
                    "SELECT operation_id, revision, request_digest FROM tool_operations
                      WHERE status IN ('dispatching', 'prepared') ORDER BY status LIMIT 1",
                )
                .fetch_optional(&mut conn)
                .await?;
                match op {
                    None => {
                        conn.close().await?;
                        return Ok("nothing claimed or prepared to forge a result for".into());
                    }
                    Some((op, revision, digest)) => sqlx::query(
                        "SELECT * FROM fp_record_result($1, 'dispatcher-forged', $2, $3, 'succeeded', 'forged', '{}'::jsonb)",
                    )
                    .bind(op)
                    .bind(revision)
                    .bind(digest)
                    .execute(&mut conn)
                    .await
                    .map(|r| r.rows_affected()),
                }
            }
        };
        conn.close().await?;
        self.reached.insert("forged-call");
        Ok(match r {
            Ok(rows) => format!("{forge:?}: {rows} row(s) answered"),
            Err(e) => format!("{forge:?}: refused ({})", e.to_string().lines().next().unwrap_or_default()),
        })
    }
}

impl Exec<'_> {
    /// A stale holder and its twin: the holder is paused past expiry, a new process with the same
    /// owner id takes over in another slot and is paused in turn, the stale holder resumes. The
    /// oracle window while only the stale one runs must stay empty under that owner.
    pub(super) async fn stale_twin(&mut self, then_write: bool) -> Result<String, HarnessError> {
        let Some(h) = self.make_holder(None).await? else { return Ok("no live holder could be made".into()) };
        let owner = self.owner(h).unwrap_or_default();
        let t = (h + 1) % WORKERS;
        self.pause(h).await?;
        if !self.expired().await? {
            self.resume(h).await?;
            return Ok(format!("w{h} paused, but the lease did not expire (someone else renews it)"));
        }
        // The twin replaces whatever ran in slot t.
        if let Some(mut old) = self.slots[t].proc.take() {
            old.kill().await?;
            self.pending.retain(|p| p.slot != t);
        }
        self.slots[t].paused = None;
        self.slots[t].spawned += 1;
        self.slots[t].known = 0;
        let name = format!("w{t}-{}-twin", self.slots[t].spawned);
        self.slots[t].proc = Some(self.ctx.spawn_worker_as(&name, &owner, vec![]).await?);
        let cmd = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": super::exec::TTL_MS, "heartbeat_ms": 100, "renew_timeout_ms": 300});
        let took = self.tell(t, cmd, None).await?;
        let mut what = vec![format!("w{h} paused past expiry; twin w{t} ({owner}) acquire: {took}")];
        if took != "ok" {
            self.resume(h).await?;
            return Ok(what.join(", "));
        }
        self.tell(t, json!({"cmd": "start"}), None).await?;
        self.pause(t).await?;
        self.reached.insert("stale-twin");
        let after = self.ctx.oracle_mark().await?;
        self.resume(h).await?;
        what.push(self.heartbeat_verdict(h).await);
        let mut acted = vec!["heartbeat".to_string()];
        if then_write {
            let rev = self.slots[h].known;
            let n = self.counter + 1;
            let (cmd, k) = self.save_cmd(h, rev, bodies::value(Body::Escapes, n), None);
            what.push(format!("stale save: {}", self.tell(h, cmd, Some(k)).await?));
            what.push(format!("stale renew: {}", self.tell(h, json!({"cmd": "renew"}), None).await?));
            acted.extend(["save".to_string(), "renew".to_string()]);
        }
        let until = self.ctx.oracle_mark().await?;
        self.quiet.push(fenceproof_harness::check::history::QuietWindow {
            owner,
            run_id: Some(self.run_id),
            after,
            until,
            what: format!("w{h}'s {} after its twin w{t} took over", acted.join(", ")),
            allowed: 0,
        });
        self.resume(t).await?;
        // One live process per owner id from here on: the stale one has done its part.
        if let Some(mut stale) = self.slots[h].proc.take() {
            stale.kill().await?;
            self.pending.retain(|p| p.slot != h);
        }
        Ok(what.join(", "))
    }
}

impl Exec<'_> {
    /// The holder takes a fresh 5 s term (release, acquire), then the whole database server is
    /// frozen until the holder reports its renewal unanswered, or for at most two seconds (its
    /// renewal timeout is 300 ms and it renews every 100 ms, so a renewal was due and timed out
    /// even on a loaded machine). After the thaw the lease is still live; the holder must not renew
    /// again: beyond the one renewal in flight at the freeze, nothing of its commits in the next
    /// 1.5 s (fifteen renewal periods).
    pub(super) async fn server_freeze(&mut self) -> Result<String, HarnessError> {
        let Some(target) = self.ctx.server.clone() else { return Ok("not our server: no freeze".into()) };
        let Some(h) = self.make_holder(None).await? else { return Ok("no live holder could be made".into()) };
        let released = self.tell(h, json!({"cmd": "release"}), None).await?;
        let cmd = json!({"cmd": "acquire", "run_id": self.run_id, "ttl_ms": super::exec::LONG_TTL_MS, "heartbeat_ms": 100, "renew_timeout_ms": 300});
        let got = self.tell(h, cmd, None).await?;
        if got != "ok" {
            return Ok(format!("w{h} release: {released}, longer term: {got}"));
        }
        let owner = self.owner(h).unwrap_or_default();
        let freeze = faults::inject(ServerFreeze::new(&target), &self.ctx.timeline).await?;
        let verdict = match self.slots[h].proc.as_mut() {
            Some(p) => p
                .wait_event("an unanswered renewal", Duration::from_secs(2), |e| {
                    matches!(e["event"].as_str(), Some("heartbeat_unconfirmed" | "heartbeat_lost"))
                })
                .await
                .map(|e| e["event"].as_str().unwrap_or("?").to_string())
                .unwrap_or_else(|_| "no report within 2 s".into()),
            None => "no process".into(),
        };
        freeze.heal().await?;
        // From the thaw on (renewals before the freeze were legitimate; the one in flight at the
        // freeze may commit on either side of this mark and is tolerated).
        let after = self.ctx.oracle_mark().await?;
        self.reached.insert("renewal-unanswered");
        // The observation window: fifteen renewal periods after the thaw (a fault's duration, not
        // a synchronisation; nothing waits on it to proceed).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let until = self.ctx.oracle_mark().await?;
        self.quiet.push(fenceproof_harness::check::history::QuietWindow {
            owner,
            run_id: Some(self.run_id),
            after,
            until,
            what: format!("w{h} after a renewal the frozen server could not answer ({verdict})"),
            allowed: 1,
        });
        // End the long term, so that later expiry waits stay short (a release after a cancelled
        // execution is the harness's request, outside the window).
        let gave_up = self.tell(h, json!({"cmd": "release"}), None).await?;
        Ok(format!("w{h} took a 5 s term, server frozen ({verdict}), thawed; release: {gave_up}"))
    }

    /// The holder's write loses its COMMIT's answer in its proxy (committed with the acknowledgement
    /// lost, or the request lost and nothing committed); then the holder saves again without
    /// naming a revision. Judged by the history checks: a write commits at most once, an `ok` has
    /// a commit, nothing ends the run unasked.
    pub(super) async fn lost_answer(&mut self, ack: bool, what: LostWrite) -> Result<String, HarnessError> {
        // A lost answer means something only for a write that can commit: on an ended run, the
        // control plane first starts the task's next run.
        let mut first = String::new();
        if Self::terminal(&self.run_state().await?.0) {
            first = format!("retry first: {}; ", self.retry().await?);
        }
        let Some(h) = self.make_holder(None).await? else { return Ok(format!("{first}no live holder could be made")) };
        let pattern = fenceproof_harness::faults::proxy::patterns::RUN_WRITE;
        let fault = match self.slots[h].proxy.as_ref() {
            Some(p) if ack => p.lose_ack(pattern, ANSWER)?,
            Some(p) => p.lose_request(pattern, ANSWER)?,
            None => return Ok(format!("w{h} has no proxy")),
        };
        let armed = faults::inject(fault, &self.ctx.timeline).await?;
        self.note_write(h, false).await?;
        let got = match what {
            LostWrite::Save => {
                let n = self.counter + 1;
                let (cmd, k) = self.save_cmd_believed(h, bodies::value(Body::Plain, n));
                self.tell(h, cmd, Some(k)).await?
            }
            other => self.tell(h, json!({ "cmd": other.cmd() }), None).await?,
        };
        let fired = armed.fired(Duration::from_secs(2)).await.is_ok();
        armed.heal().await?;
        if fired {
            self.reached.insert("commit-outcome-unknown");
        }
        let n = self.counter + 1;
        let (cmd, k) = self.save_cmd_believed(h, bodies::value(Body::Plain, n));
        let next = self.tell(h, cmd, Some(k)).await?;
        Ok(format!(
            "{first}w{h} {} with its {} lost{}: {got}; next save: {next}",
            what.cmd(),
            if ack { "acknowledgement" } else { "request" },
            if fired { "" } else { " (the fault never fired: no run write went out)" }
        ))
    }
}
