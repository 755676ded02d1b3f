//! One worker session: the owner id, the lease it believes it holds, the last revision it knows,
//! its heartbeat and its execution token, and the handling of each command through the protocol.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenceproof_protocol::heartbeat::{Heartbeat, HeartbeatEnd};
use fenceproof_protocol::mutant::{self, Mutant};
use fenceproof_protocol::operation::Intent;
use fenceproof_protocol::retry::RetryBudget;
use fenceproof_protocol::secrets::{mask, SecretStore};
use fenceproof_protocol::{
    dispatch, lease, outbox, protected_transition, FaultPoint, FaultPoints, Lease, ProtocolError, Transition, Ttl,
};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::adapter::FakeTools;
use crate::commands::Command;
use crate::events::{Event, EventSink};

/// With `FENCEPROOF_IGNORE_FAULTS=1` in its environment the reference worker behaves like a worker
/// that never implemented the harness's `faults` field (the barriers inside its transactions), so
/// that `fenceproof verify --barriers proxy` can be shown to need no cooperation.
fn without_faults(cmd: Command) -> Command {
    static IGNORE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*IGNORE.get_or_init(|| std::env::var("FENCEPROOF_IGNORE_FAULTS").is_ok_and(|v| v == "1")) {
        return cmd;
    }
    match cmd {
        Command::Save { checkpoint, expected_revision, .. } => {
            Command::Save { checkpoint, expected_revision, faults: FaultPoints::none() }
        }
        Command::Start { expected_revision, .. } => Command::Start { expected_revision, faults: FaultPoints::none() },
        Command::Acquire { run_id, ttl_ms, heartbeat_ms, renew_timeout_ms, .. } => {
            Command::Acquire { run_id, ttl_ms, heartbeat_ms, renew_timeout_ms, faults: FaultPoints::none() }
        }
        Command::Succeed { expected_revision, .. } => {
            Command::Succeed { expected_revision, faults: FaultPoints::none() }
        }
        Command::Fail { expected_revision, .. } => Command::Fail { expected_revision, faults: FaultPoints::none() },
        Command::Plan { step_id, tool, request, effect_version, expected_revision, .. } => {
            Command::Plan { step_id, tool, request, effect_version, expected_revision, faults: FaultPoints::none() }
        }
        Command::Dispatch { claim_ttl_ms, call_timeout_ms, limit, .. } => {
            Command::Dispatch { claim_ttl_ms, call_timeout_ms, limit, faults: FaultPoints::none() }
        }
        other => other,
    }
}

/// What a `plan` command registers.
struct PlanStep<'a> {
    step_id: &'a str,
    tool: &'a str,
    request: &'a Value,
    effect_version: i32,
}

#[derive(Default)]
struct Held {
    lease: Option<Lease>,
    ttl: Option<Ttl>,
    revision: Option<i64>,
    heartbeat_stop: Option<CancellationToken>,
    /// A write whose COMMIT got no answer: nothing else is written until the lease and the run
    /// have been read back from the primary.
    unknown: Option<&'static str>,
}

/// Shared by every in-flight command of this process.
pub struct Session {
    pub owner: String,
    /// Correlates the logs of every process of one experiment.
    pub trace_id: String,
    /// Tenant component of the operation_ids this worker plans.
    pub tenant: String,
    /// Where the fake tools listen (dispatcher and reconciler commands).
    pub tools_addr: Option<std::net::SocketAddr>,
    /// Where secret values of planned requests are kept (the ledger holds references only).
    pub secrets: Option<SecretStore>,
    pub pool: PgPool,
    pub sink: Arc<EventSink>,
    /// Cancelled when the heartbeat cannot confirm a renewal: the execution context of the spec.
    pub execution: CancellationToken,
    held: Mutex<Held>,
}

/// The key of a failed answer's data that names the resource the database was out of.
pub const OUT_OF: &str = "out_of";
/// Its value when the database had no connection to give.
pub const CONNECTIONS: &str = "connections";

/// The answer to one command.
pub struct Outcome {
    pub outcome: String,
    pub detail: Option<String>,
    pub data: Option<serde_json::Value>,
}

impl Outcome {
    pub fn ok() -> Outcome {
        Outcome { outcome: "ok".into(), detail: None, data: None }
    }
    pub fn note(outcome: &str, detail: impl Into<String>) -> Outcome {
        Outcome { outcome: outcome.into(), detail: Some(detail.into()), data: None }
    }
    /// The answer of a command that failed with `e`. When the database had no connection to give
    /// (the pool's wait ran out, or SQLSTATE 53300), its data says so as `{"out_of": "connections"}`:
    /// the harness's own drivers (`play_paths`) are then out of a resource, not answered.
    fn err(e: &ProtocolError) -> Outcome {
        let data = e.out_of_connections().then(|| serde_json::json!({ OUT_OF: CONNECTIONS }));
        Outcome { outcome: e.kind().into(), detail: Some(e.to_string()), data }
    }
}

impl Session {
    pub fn new(
        owner: String,
        trace_id: String,
        tenant: String,
        tools_addr: Option<std::net::SocketAddr>,
        secrets: Option<SecretStore>,
        pool: PgPool,
        sink: Arc<EventSink>,
    ) -> Arc<Session> {
        Arc::new(Session {
            owner,
            trace_id,
            tenant,
            tools_addr,
            secrets,
            pool,
            sink,
            execution: CancellationToken::new(),
            held: Mutex::new(Held::default()),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Emit an event stamped with what this session currently believes, and log it (JSON on
    /// stderr) with the spec's fields: run_id, owner, epoch, revision, operation_id, trace_id.
    pub fn emit(&self, event: &str, id: Option<u64>, o: Outcome) {
        {
            let h = self.held();
            let operation_id = o.data.as_ref().and_then(|d| d["operation_id"].as_str()).unwrap_or("");
            tracing::info!(
                trace_id = %self.trace_id,
                owner = %self.owner,
                run_id = %h.lease.as_ref().map(|l| l.run_id.to_string()).unwrap_or_default(),
                epoch = h.lease.as_ref().map(|l| l.epoch).unwrap_or(0),
                revision = h.revision.unwrap_or(-1),
                operation_id,
                event,
                outcome = %o.outcome,
                detail = %o.detail.as_deref().unwrap_or(""),
                "worker event"
            );
        }
        let h = self.held();
        let ev = Event {
            time: chrono::Utc::now(),
            owner: self.owner.clone(),
            run_id: h.lease.as_ref().map(|l| l.run_id),
            epoch: h.lease.as_ref().map(|l| l.epoch),
            revision: h.revision,
            event: event.into(),
            id,
            outcome: o.outcome,
            detail: o.detail,
            data: o.data,
        };
        drop(h);
        self.sink.emit(&ev);
    }

    /// Run one command to completion and answer it; true when it succeeded.
    pub async fn handle(self: &Arc<Self>, id: u64, cmd: Command) -> bool {
        let name = cmd.name();
        let (ok, o) = match self.run(cmd).await {
            Ok(data) => (true, Outcome { data, ..Outcome::ok() }),
            Err(e) => (false, Outcome::err(&e)),
        };
        self.emit(name, Some(id), o);
        ok
    }

    async fn run(self: &Arc<Self>, cmd: Command) -> Result<Option<Value>, ProtocolError> {
        let cmd = without_faults(cmd);
        match cmd {
            Command::Plan { step_id, tool, request, effect_version, expected_revision, faults } => {
                let step = PlanStep { step_id: &step_id, tool: &tool, request: &request, effect_version };
                self.plan(step, expected_revision, &faults).await
            }
            Command::Dispatch { claim_ttl_ms, call_timeout_ms, limit, faults } => {
                let tools = self.tools(call_timeout_ms)?;
                let report = dispatch::dispatch_once(
                    &self.pool,
                    &tools,
                    &self.owner,
                    Ttl::from_millis(claim_ttl_ms)?,
                    limit,
                    &faults,
                )
                .await?;
                Ok(Some(json!(report)))
            }
            Command::Reconcile { call_timeout_ms } => {
                let tools = self.tools(call_timeout_ms)?;
                Ok(Some(json!(dispatch::reconcile_once(&self.pool, &tools).await?)))
            }
            Command::Metrics => Ok(Some(json!({ "text": fenceproof_protocol::metrics::METRICS.render() }))),
            Command::CreateRun { task_id } => {
                let run_id = fenceproof_protocol::runs::create_run(&self.pool, &task_id, json!({})).await?;
                Ok(Some(json!({ "run_id": run_id })))
            }
            Command::Cancel { run_id } => {
                let revision = fenceproof_protocol::runs::cancel(&self.pool, run_id).await?;
                Ok(Some(json!({ "revision": revision })))
            }
            Command::Advance { operation_id, expected_revision } => {
                self.advance(&operation_id, expected_revision).await
            }
            Command::Acquire { run_id, ttl_ms, heartbeat_ms, renew_timeout_ms, faults } => {
                // The takeover is one statement: its barrier is right before it.
                faults.pass_outside_tx(FaultPoint::BeforeTakeoverWrite, &self.pool).await?;
                self.acquire(run_id, ttl_ms, heartbeat_ms, renew_timeout_ms).await.map(|_| None)
            }
            Command::Start { expected_revision, faults } => {
                self.transition(Transition::start(None), expected_revision, &faults).await.map(|_| None)
            }
            Command::Save { checkpoint, expected_revision, faults } => {
                self.transition(Transition::save(checkpoint), expected_revision, &faults).await.map(|_| None)
            }
            Command::Succeed { expected_revision, faults } => {
                self.transition(Transition::succeed(None), expected_revision, &faults).await.map(|_| None)
            }
            Command::Fail { expected_revision, faults } => {
                self.transition(Transition::fail(None), expected_revision, &faults).await.map(|_| None)
            }
            Command::Renew => {
                let (l, ttl) = self.lease_and_ttl()?;
                lease::renew(&self.pool, &l, ttl).await.map(|_| None)
            }
            Command::Release => {
                let (l, _) = self.lease_and_ttl()?;
                if let Some(stop) = self.held().heartbeat_stop.take() {
                    stop.cancel();
                }
                lease::release(&self.pool, &l).await.map(|_| None)
            }
            cmd @ Command::PlayPaths { .. } => self.play_paths(cmd).await.map(Some),
            Command::Exit => Ok(None),
        }
    }

    /// The model's paths played on this worker's database (see [`crate::paths`]).
    async fn play_paths(&self, cmd: Command) -> Result<serde_json::Value, ProtocolError> {
        let Command::PlayPaths { control_url, grant_ms, call_timeout_ms, only, direct_url, restored_url, tools_ledger } =
            cmd
        else {
            return Err(ProtocolError::InvalidIntent("play_paths without its arguments".into()));
        };
        let urls = crate::paths::Urls {
            control: control_url.secret.value,
            direct: direct_url.map(|u| u.secret.value),
            restored: restored_url.map(|u| u.secret.value).zip(tools_ledger),
        };
        // A step waits on the database (a commit's flush, a term on its clock): a disk the other work
        // on the machine keeps busy was seen to hold a checkpoint's writes for minutes.
        let step_timeout = Duration::from_millis((grant_ms.max(1) as u64) * 20 + 30_000);
        let base = (*self.pool.connect_options()).clone();
        let observer = format!("{}.paths-observer", self.owner);
        let (control_base, control) = crate::paths::observer(&urls.control, &observer, step_timeout).await?;
        let direct_base = urls.direct.as_deref().map(crate::paths::options).transpose()?;
        let restored = match urls.restored {
            Some((url, ledger)) => {
                let (control_base, observer) = crate::paths::observer(&url, &observer, step_timeout).await?;
                let db = control_base.get_database().unwrap_or_default().to_string();
                Some(crate::paths::Restored {
                    base: base.clone().database(&db),
                    control_base,
                    observer,
                    ledger: ledger.into(),
                })
            }
            None => None,
        };
        let driver = crate::paths::Driver {
            base,
            direct_base,
            on_direct: Default::default(),
            restored,
            on_restored: Default::default(),
            control_base,
            control,
            tools: self.tools(call_timeout_ms)?,
            owner: self.owner.clone(),
            tenant: self.tenant.clone(),
            grant_ms,
            step_timeout,
            pools: Default::default(),
        };
        let paths = crate::paths::selected(only.as_deref())?;
        let r = crate::paths::play_all(&driver, paths).await;
        driver.close().await;
        r
    }

    /// Plan a step: mask the request's secret fields (their values to the secret store first), then
    /// save the "planned" checkpoint and register the intent in one protected transaction.
    async fn plan(
        &self,
        step: PlanStep<'_>,
        expected_revision: Option<i64>,
        faults: &FaultPoints,
    ) -> Result<Option<Value>, ProtocolError> {
        let PlanStep { step_id, tool, request, effect_version } = step;
        let (l, _) = self.lease_and_ttl()?;
        // Secret fields are masked to references; their values go to the secret store
        // before the intent that references them can commit.
        let (request, secrets) = mask(request).map_err(|e| ProtocolError::InvalidIntent(e.to_string()))?;
        let intent = Intent::new(&self.tenant, l.run_id, step_id, effect_version, tool, request)?;
        // MUTANT secrets-after-intent: the values go to the store only once the intent that
        // references them has committed; a crash between the two leaves an intent nobody can send.
        let late = mutant::active(Mutant::SecretsAfterIntent);
        if !late {
            self.store_secrets(&intent.operation_id, &secrets)?;
        }
        self.settle_unknown(&l).await?;
        let expected = expected_revision.or(self.held().revision).unwrap_or(0);
        let checkpoint = json!({ "planned": step_id, "operation_id": intent.operation_id });
        let (revision, reg) =
            outbox::plan_step(&self.pool, &l, expected, checkpoint, &intent, faults, RetryBudget::default()).await?;
        if late {
            self.store_secrets(&intent.operation_id, &secrets)?;
        }
        self.saw_revision(revision);
        Ok(Some(json!({ "operation_id": intent.operation_id, "registration": reg, "revision": revision })))
    }

    /// Put the secret values of a planned request into the secret store, under its operation_id.
    fn store_secrets(
        &self,
        operation_id: &str,
        secrets: &[fenceproof_protocol::secrets::Secret],
    ) -> Result<(), ProtocolError> {
        if secrets.is_empty() {
            return Ok(());
        }
        let store = self
            .secrets
            .as_ref()
            .ok_or_else(|| ProtocolError::InvalidIntent("a request with secret fields needs --secrets-dir".into()))?;
        for s in secrets {
            store.put(operation_id, s).map_err(|e| ProtocolError::InvalidIntent(e.to_string()))?;
        }
        Ok(())
    }

    /// Advance the run on the verified result of `operation_id`.
    async fn advance(
        &self,
        operation_id: &str,
        expected_revision: Option<i64>,
    ) -> Result<Option<Value>, ProtocolError> {
        let (l, _) = self.lease_and_ttl()?;
        self.settle_unknown(&l).await?;
        let expected = expected_revision.or(self.held().revision).unwrap_or(0);
        let checkpoint = json!({ "done": operation_id });
        let revision =
            outbox::advance_on_result(&self.pool, &l, expected, operation_id, checkpoint, RetryBudget::default())
                .await?;
        self.saw_revision(revision);
        Ok(Some(json!({ "revision": revision })))
    }

    /// Take the run's lease and start renewing it; the session now tracks this lease only.
    async fn acquire(
        self: &Arc<Self>,
        run_id: uuid::Uuid,
        ttl_ms: i64,
        heartbeat_ms: u64,
        renew_timeout_ms: u64,
    ) -> Result<(), ProtocolError> {
        let ttl = Ttl::from_millis(ttl_ms)?;
        let terms = lease::acquire(&self.pool, run_id, &self.owner, ttl).await?;
        let run = fenceproof_protocol::runs::read_run(&self.pool, run_id).await?;
        let stop = self.start_heartbeat(terms.lease.clone(), ttl, heartbeat_ms, renew_timeout_ms);
        let mut h = self.held();
        // A session tracks one lease: the one it held before stops being renewed (it is
        // left to expire), so no heartbeat keeps a forgotten lease alive.
        if let Some(previous) = h.heartbeat_stop.take() {
            previous.cancel();
        }
        h.lease = Some(terms.lease);
        h.ttl = Some(ttl);
        h.revision = Some(run.revision);
        h.heartbeat_stop = Some(stop);
        h.unknown = None;
        Ok(())
    }

    fn lease_and_ttl(&self) -> Result<(Lease, Ttl), ProtocolError> {
        let h = self.held();
        match (&h.lease, h.ttl) {
            (Some(l), Some(t)) => Ok((l.clone(), t)),
            _ => Err(ProtocolError::LeaseLost { run_id: uuid::Uuid::nil(), owner: self.owner.clone(), epoch: 0 }),
        }
    }

    async fn transition(
        &self,
        t: Transition,
        expected: Option<i64>,
        faults: &FaultPoints,
    ) -> Result<(), ProtocolError> {
        let (l, _) = self.lease_and_ttl()?;
        self.settle_unknown(&l).await?;
        let expected = expected.or(self.held().revision).unwrap_or(0);
        match protected_transition(&self.pool, &l, expected, &t, faults, RetryBudget::default()).await {
            Ok(revision) => {
                self.saw_revision(revision);
                Ok(())
            }
            Err(e @ ProtocolError::OutcomeUnknown { .. }) => self.after_unknown(&l, expected, &t, faults, e).await,
            Err(e) => Err(e),
        }
    }

    /// A transition's COMMIT got no answer: answer `outcome_unknown` and write nothing more until
    /// [`Session::settle_unknown`] has read the truth back.
    async fn after_unknown(
        &self,
        l: &Lease,
        expected: i64,
        t: &Transition,
        faults: &FaultPoints,
        e: ProtocolError,
    ) -> Result<(), ProtocolError> {
        // MUTANT retry-unknown-commit: the unknown commit is taken as "did not happen" and the
        // write is redone at the run's current revision.
        if mutant::active(Mutant::RetryUnknownCommit) {
            let now = fenceproof_protocol::runs::read_run(&self.pool, l.run_id).await?.revision;
            let r = protected_transition(&self.pool, l, now, t, faults, RetryBudget::default()).await?;
            self.saw_revision(r);
            return Ok(());
        }
        // MUTANT unknown-as-success: the unknown commit is taken as done, without a read-back.
        if mutant::active(Mutant::UnknownAsSuccess) {
            self.saw_revision(expected + 1);
            return Ok(());
        }
        // MUTANT fail-after-unknown: an error handler that marks the run failed on any write error.
        if mutant::active(Mutant::FailAfterUnknown) {
            if let Ok(run) = fenceproof_protocol::runs::read_run(&self.pool, l.run_id).await {
                let fail = Transition::fail(None);
                let _ = protected_transition(
                    &self.pool,
                    l,
                    run.revision,
                    &fail,
                    &FaultPoints::none(),
                    RetryBudget::default(),
                )
                .await;
            }
        }
        self.held().unknown = Some(t.name);
        Err(e)
    }

    /// After an unknown outcome, before the next write: read owner, epoch and revision back from
    /// the primary and continue from what really committed (or stop: the lease is no longer ours).
    async fn settle_unknown(&self, l: &Lease) -> Result<(), ProtocolError> {
        if self.held().unknown.is_none() {
            return Ok(());
        }
        let now = lease::read_back(&self.pool, l.run_id).await?;
        let run = fenceproof_protocol::runs::read_run(&self.pool, l.run_id).await?;
        if !now.holds(l) {
            return Err(ProtocolError::LeaseLost { run_id: l.run_id, owner: l.owner.clone(), epoch: l.epoch });
        }
        let mut h = self.held();
        h.revision = Some(run.revision);
        h.unknown = None;
        Ok(())
    }

    fn saw_revision(&self, revision: i64) {
        let mut h = self.held();
        h.revision = Some(h.revision.map_or(revision, |r| r.max(revision)));
    }

    fn tools(&self, call_timeout_ms: u64) -> Result<FakeTools, ProtocolError> {
        let addr = self
            .tools_addr
            .ok_or_else(|| ProtocolError::InvalidIntent("this worker was started without --tools-addr".into()))?;
        Ok(FakeTools::new(addr, Duration::from_millis(call_timeout_ms.max(1)), self.secrets.clone()))
    }

    fn start_heartbeat(self: &Arc<Self>, l: Lease, ttl: Ttl, every_ms: u64, timeout_ms: u64) -> CancellationToken {
        let hb = Heartbeat::spawn(
            self.pool.clone(),
            l,
            ttl,
            Duration::from_millis(every_ms.max(1)),
            Duration::from_millis(timeout_ms.max(1)),
            self.execution.clone(),
        );
        let me = self.clone();
        let stop = hb.stop.clone();
        tokio::spawn(async move {
            let end = hb.task.await;
            let (event, o) = match end {
                Ok(HeartbeatEnd::Stopped) => return,
                Ok(HeartbeatEnd::Lost(e)) => ("heartbeat_lost", Outcome::err(&e)),
                Ok(HeartbeatEnd::Unconfirmed(why)) => ("heartbeat_unconfirmed", Outcome::note("outcome_unknown", why)),
                Err(join) => ("heartbeat_crashed", Outcome::note("error", join.to_string())),
            };
            me.emit(event, None, o);
            me.emit("execution_cancelled", None, Outcome::ok());
            // MUTANT fail-on-lease-loss: a worker that lost its lease marks the run failed anyway.
            if event == "heartbeat_lost" && mutant::active(Mutant::FailOnLeaseLoss) {
                let run_id = me.held().lease.as_ref().map(|l| l.run_id);
                if let Some(run_id) = run_id {
                    let _ = sqlx::query(
                        "UPDATE agent_runs SET status = 'failed', revision = revision + 1, updated_at = clock_timestamp()
                          WHERE run_id = $1 AND status = 'running'",
                    )
                    .bind(run_id)
                    .execute(&me.pool)
                    .await;
                }
            }
        });
        stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that got no connection says so in its data (the harness's drivers read it); the
    /// database's own refusals carry no such data.
    #[test]
    fn an_answer_without_a_connection_names_the_resource() {
        let o = Outcome::err(&ProtocolError::Database(sqlx::Error::PoolTimedOut));
        assert_eq!(o.outcome, "db_error");
        assert_eq!(o.data, Some(json!({ "out_of": "connections" })));
        let refused = ProtocolError::LeaseBusy { run_id: uuid::Uuid::nil(), holder: "w".into(), epoch: 1 };
        assert_eq!(Outcome::err(&refused).data, None);
    }
}
