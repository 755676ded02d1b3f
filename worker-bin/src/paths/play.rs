//! One path played: its run, its processes' sessions and beliefs, and each step compared with the
//! model's.

use fenceproof_model::action::Action;
use fenceproof_model::config::Capability;
use fenceproof_model::coverage::{replay, takes};
use fenceproof_model::state::{State, Write, PROCS};
use fenceproof_model::ProtocolModel;
use fenceproof_protocol::dispatch::RemoteAnswer;
use fenceproof_protocol::ids::{Lease, Ttl};
use fenceproof_protocol::operation::Intent;
use fenceproof_protocol::outbox::Claim;
use fenceproof_protocol::{lease, runs, ProtocolError};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use super::held::{self, Commit, Held};
use super::{answered, Driver, PathReport};

/// A grant that outlives any path (the longest term the protocol accepts is 10 minutes).
const LONG_MS: i64 = 300_000;

/// One model process as the driver plays it.
#[derive(Default)]
pub struct Slot {
    /// Acquires so far: each starts a session with an owner id of its own.
    pub session: u8,
    pub lease: Option<Lease>,
    /// The run revision this process expects to write over.
    pub expect: i64,
    pub held: Option<Held>,
    pub claim: Option<Claim>,
    pub answer: Option<RemoteAnswer>,
}

/// What a probe of a refusal found.
enum Probe {
    Refused,
    Committed(String),
    Late(String),
}

/// A path being played.
pub struct Play<'a> {
    pub d: &'a Driver,
    pub idx: usize,
    pub run_id: Uuid,
    pub model: ProtocolModel,
    pub path: &'a [Action],
    /// The step being played.
    pub at: usize,
    pub slots: [Slot; PROCS],
    pub ops: Vec<Intent>,
    /// The term of a grant a clock tick of the path must see lapse.
    grant_ms: i64,
    /// The control plane's session (create, cancel) on the database the path is on.
    pub control: PgPool,
    /// The control plane's session on the row's own database (where the run was created).
    first_control: PgPool,
    /// The run's rows as created (task, run, lease), when the path restores them.
    pub backup: Option<[serde_json::Value; 3]>,
}

/// Play `path` (the path to `transition`) as path number `idx`.
pub async fn play(
    d: &Driver,
    idx: usize,
    transition: String,
    path: &[Action],
    grant_ms: i64,
) -> Result<PathReport, ProtocolError> {
    let (model, states) = replay(path).ok_or_else(|| {
        ProtocolError::InvalidIntent(format!("the path to {transition} is no behaviour of the model's bounds"))
    })?;
    let control_pool = d.pool_as(&d.control_base, &format!("control-plane-{}", d.owner)).await?;
    let run_id = runs::create_run(&control_pool, &format!("{}-path-{idx}", d.owner), json!({})).await?;
    let mut p = Play {
        d,
        idx,
        run_id,
        model,
        path,
        at: 0,
        slots: Default::default(),
        ops: Vec::new(),
        grant_ms,
        control: control_pool.clone(),
        first_control: control_pool,
        backup: None,
    };
    p.ops = p.intents()?;
    if path.contains(&Action::Restore) {
        p.take_backup().await?;
    }
    let mut report = PathReport {
        transition,
        run_id: run_id.to_string(),
        spec_statements: false,
        restored: path.contains(&Action::Restore),
        steps: path.len(),
        played: 0,
        diverged: None,
        refused_by_model: None,
        again_of: None,
    };
    let played = p.steps(&states, &mut report).await;
    let finished = p.finish().await;
    d.on_restored.store(false, std::sync::atomic::Ordering::SeqCst);
    finished?;
    played?;
    Ok(report)
}

impl Play<'_> {
    /// Each step in turn, until the path ends or the database answers otherwise than the model.
    async fn steps(&mut self, states: &[State], report: &mut PathReport) -> Result<(), ProtocolError> {
        for (k, a) in self.path.iter().enumerate() {
            self.at = k;
            let (s, n) = (&states[k], &states[k + 1]);
            let before = self.terms().await?;
            let committed = self.step(*a, s).await?;
            self.follow(*a, n).await?;
            report.played = k + 1;
            match (takes(s, *a, n), committed) {
                (Some(true), false) => {
                    report.diverged =
                        Some(format!("step {} {a:?}: the model takes it, the database refused it", k + 1));
                    return Ok(());
                }
                (Some(false), true) if !self.late(*a, &before).await? => {
                    report.refused_by_model =
                        Some(format!("step {} {a:?}: the database committed it, the model refuses it", k + 1));
                    return Ok(());
                }
                _ => {}
            }
            let grants = matches!(a, Action::Acquire(_) | Action::Renew(_) | Action::Claim(..));
            match if grants { self.probe(n).await? } else { Probe::Refused } {
                Probe::Refused => {}
                Probe::Committed(found) => {
                    report.refused_by_model = Some(format!("after step {}: {found}", k + 1));
                    return Ok(());
                }
                Probe::Late(why) => {
                    report.diverged = Some(format!("after step {}: {why}", k + 1));
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Play one action; whether the database committed it (for the hidden steps, true).
    async fn step(&mut self, a: Action, s: &State) -> Result<bool, ProtocolError> {
        match a {
            Action::Acquire(i) => self.acquire(i).await,
            Action::Renew(i) => self.renew(i).await,
            Action::Release(i) => self.release(i).await,
            Action::Validate(i) => self.validate(i, s).await,
            Action::Commit(i, _) => self.commit(i).await,
            Action::Claim(i, n) => self.claim(i, n).await,
            Action::Call(i) => self.call(i).await,
            Action::WriteResult(i) => self.write_result(i).await,
            Action::GiveUp(i) => self.give_up(i).await,
            Action::MarkUnknown(n) => self.mark_unknown(n).await,
            Action::Reconcile(n) => self.reconcile(n).await,
            Action::Cancel => Ok(answered(runs::cancel(&self.control, self.run_id).await)?.is_ok()),
            Action::Tick => self.tick().await.map(|_| true),
            Action::Kill(i) => {
                self.slots[i as usize] = Slot { session: self.slots[i as usize].session, ..Slot::default() };
                Ok(true)
            }
            Action::Restore => self.restore().await,
            Action::Recover => self.recover(s).await,
            // Lock: the row lock is taken with the validation (nothing of another process's can
            // touch the lease row in between: the model's own lock forbids it). Restart: slot 2.
            _ => Ok(true),
        }
    }

    /// After a step, the beliefs the model's process dropped or re-read.
    async fn follow(&mut self, a: Action, n: &State) -> Result<(), ProtocolError> {
        let Some(i) = a.process() else { return Ok(()) };
        let belief = n.procs[i as usize].lease;
        if belief.is_none() {
            self.slots[i as usize].lease = None;
        }
        if belief.is_some_and(|b| b.expect == n.primary.revision)
            && matches!(a, Action::Acquire(_) | Action::Commit(..))
        {
            self.slots[i as usize].expect = runs::read_run(self.d.observer(), self.run_id).await?.revision;
        }
        Ok(())
    }

    /// Release whatever the path left waiting, then cancel its run so that no later path's claim
    /// takes an operation it left prepared.
    async fn finish(&mut self) -> Result<(), ProtocolError> {
        for i in 0..PROCS {
            if let Some(h) = self.slots[i].held.take() {
                let _ = h.commit(self.d.step_timeout).await?;
            }
        }
        let _ = runs::cancel(&self.control, self.run_id).await;
        if self.backup.is_some() {
            let _ = runs::cancel(&self.first_control, self.run_id).await;
        }
        Ok(())
    }

    /// The operations' intents: one per operation of the bound, each on a tool of its capability.
    fn intents(&self) -> Result<Vec<Intent>, ProtocolError> {
        (0..self.model.cfg.ops as usize)
            .map(|n| {
                let tool = match self.model.cfg.caps[n] {
                    Capability::Idempotent => "idem",
                    Capability::DeterministicId => "detid",
                    Capability::Query => "opquery",
                    Capability::None => "plain",
                };
                let body = json!({ "name": format!("path-{}-{}-op{n}", self.d.owner, self.idx), "path": self.idx });
                Intent::new(&self.d.tenant, self.run_id, &format!("op{n}"), 1, tool, body)
            })
            .collect()
    }

    /// The pool of the session named `app`, opened on first use.
    pub async fn pool(&mut self, app: &str) -> Result<PgPool, ProtocolError> {
        self.d.pool(app).await
    }

    /// The owner id of process `i`'s current session.
    pub fn owner(&self, i: u8) -> String {
        format!("{}.w{i}.{}", self.d.owner, self.slots[i as usize].session)
    }

    /// The term of a grant made now: short when a clock tick of the path follows it.
    pub fn term(&self) -> Result<Ttl, ProtocolError> {
        let ticks_ahead = self.path[self.at..].contains(&Action::Tick);
        Ttl::from_millis(if ticks_ahead { self.grant_ms } else { LONG_MS })
    }

    /// The database clock now (µs since the epoch).
    async fn clock(&self) -> Result<i64, ProtocolError> {
        Ok(sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint")
            .fetch_one(self.d.observer())
            .await?)
    }

    async fn acquire(&mut self, i: u8) -> Result<bool, ProtocolError> {
        self.slots[i as usize].session += 1;
        let owner = self.owner(i);
        let pool = self.pool(&owner).await?;
        match answered(lease::acquire(&pool, self.run_id, &owner, self.term()?).await)? {
            Ok(terms) => {
                self.slots[i as usize].lease = Some(terms.lease);
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    async fn renew(&mut self, i: u8) -> Result<bool, ProtocolError> {
        let Some(l) = self.slots[i as usize].lease.clone() else { return Ok(false) };
        let pool = self.pool(&l.owner).await?;
        Ok(answered(lease::renew(&pool, &l, self.term()?).await)?.is_ok())
    }

    async fn release(&mut self, i: u8) -> Result<bool, ProtocolError> {
        let Some(l) = self.slots[i as usize].lease.clone() else { return Ok(false) };
        let pool = self.pool(&l.owner).await?;
        Ok(answered(lease::release(&pool, &l).await)?.is_ok())
    }

    /// The model's validation: the protected commit starts and waits at its barrier once its lease
    /// is validated. What it writes is the process's next commit on the path (or, when the path
    /// ends first, a checkpoint, or the start of a pending run).
    async fn validate(&mut self, i: u8, s: &State) -> Result<bool, ProtocolError> {
        let Some(l) = self.slots[i as usize].lease.clone() else { return Ok(false) };
        let write = self.path[self.at..]
            .iter()
            .find_map(|a| match a {
                Action::Commit(j, w) if *j == i => Some(*w),
                _ => None,
            })
            .unwrap_or(if s.primary.run == fenceproof_model::state::RunStatus::Pending {
                Write::Start
            } else {
                Write::Checkpoint
            });
        let intent = match write {
            Write::Plan(n) => self.ops.get(n as usize).cloned(),
            _ => None,
        };
        let pool = self.pool(&l.owner).await?;
        let expected = self.slots[i as usize].expect;
        let checkpoint = json!({ "path": self.idx, "step": self.at });
        let c = Commit { pool, lease: l, expected, write, intent, checkpoint };
        let key = 0x4650_0000_i64 + (self.idx as i64) * 4 + i as i64;
        let held = held::validate(self.d, key, c).await?;
        let validated = held.is_some();
        self.slots[i as usize].held = held;
        Ok(validated)
    }

    async fn commit(&mut self, i: u8) -> Result<bool, ProtocolError> {
        let Some(h) = self.slots[i as usize].held.take() else { return Ok(false) };
        match answered(h.commit(self.d.step_timeout).await?)? {
            Ok(revision) => {
                self.slots[i as usize].expect = revision;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    /// The clock's tick: every term of the run granted before it has passed on the database clock.
    async fn tick(&self) -> Result<(), ProtocolError> {
        let deadline = std::time::Instant::now() + self.d.step_timeout;
        loop {
            let passed: bool = sqlx::query_scalar(
                "SELECT NOT EXISTS (SELECT 1 FROM worker_leases WHERE run_id = $1 AND owner IS NOT NULL
                                       AND expires_at > clock_timestamp())
                    AND NOT EXISTS (SELECT 1 FROM tool_operations WHERE run_id = $1 AND status = 'dispatching'
                                       AND dispatch_until > clock_timestamp())",
            )
            .bind(self.run_id)
            .fetch_one(self.d.observer())
            .await?;
            if passed {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(ProtocolError::InvalidIntent("a term of the path did not pass in time".into()));
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// After a step that granted a lease or a claim, what the model refuses there and a database
    /// must refuse too: a takeover of
    /// the live lease by another session, and the reconciler's unknown marking of a live claim. A
    /// probe the database commits is a finding unless a term of the run had passed by then on the
    /// database clock (the driver came late; the database was right).
    async fn probe(&mut self, n: &State) -> Result<Probe, ProtocolError> {
        if self.slots.iter().any(|s| s.held.is_some()) {
            return Ok(Probe::Refused);
        }
        let before = self.terms().await?;
        let l = n.primary.lease;
        if l.owner.is_some() && !l.expired() {
            let probe = format!("{}.probe", self.d.owner);
            let pool = self.pool(&probe).await?;
            if answered(lease::acquire(&pool, self.run_id, &probe, Ttl::from_millis(self.grant_ms)?).await)?.is_ok() {
                return self
                    .committed(Action::Acquire(0), &before, "a takeover of the lease the model holds live")
                    .await;
            }
        }
        for (k, op) in n.primary.ops.iter().enumerate() {
            if op.status == fenceproof_model::state::OpStatus::Dispatching
                && op.until > 0
                && self.mark_unknown(k as u8).await?
            {
                let what = format!("the reconciler's unknown marking of operation {k}'s live claim");
                return self.committed(Action::MarkUnknown(k as u8), &before, &what).await;
            }
        }
        Ok(Probe::Refused)
    }

    /// A probe the database committed: a finding, or the driver's lateness.
    async fn committed(&self, a: Action, before: &Terms, what: &str) -> Result<Probe, ProtocolError> {
        Ok(if self.late(a, before).await? {
            Probe::Late(format!("{what} committed after a term had passed (the driver came late)"))
        } else {
            Probe::Committed(format!("{what} committed"))
        })
    }

    /// The terms of the run's grants before a step: its lease's expiry (when held) and each
    /// dispatching operation's claim deadline, as µs of the database clock.
    async fn terms(&self) -> Result<Terms, ProtocolError> {
        let lease: Option<i64> = sqlx::query_scalar(
            "SELECT (extract(epoch FROM expires_at) * 1e6)::bigint FROM worker_leases
              WHERE run_id = $1 AND owner IS NOT NULL",
        )
        .bind(self.run_id)
        .fetch_optional(self.d.observer())
        .await?;
        let claims: Vec<(String, i64)> = sqlx::query_as(
            "SELECT operation_id, (extract(epoch FROM dispatch_until) * 1e6)::bigint FROM tool_operations
              WHERE run_id = $1 AND status = 'dispatching'",
        )
        .bind(self.run_id)
        .fetch_all(self.d.observer())
        .await?;
        Ok(Terms { lease, claims })
    }

    /// Whether a takeover or an unknown marking the model refuses (the lease, or that operation's
    /// claim, is still live there) came after that very term had passed on the database clock:
    /// the driver was late, and the database was right to commit it. Any other refusal does not
    /// hang on time.
    async fn late(&self, a: Action, before: &Terms) -> Result<bool, ProtocolError> {
        let term = match a {
            Action::Acquire(_) => before.lease,
            Action::MarkUnknown(n) => {
                let id = self.ops.get(n as usize).map(|o| o.operation_id.as_str());
                before.claims.iter().find(|(op, _)| Some(op.as_str()) == id).map(|(_, t)| *t)
            }
            _ => return Ok(false),
        };
        let now = self.clock().await?;
        Ok(term.is_some_and(|t| t <= now))
    }
}

/// The terms of a run's grants before a step (see [`Play::terms`]).
pub struct Terms {
    lease: Option<i64>,
    claims: Vec<(String, i64)>,
}
