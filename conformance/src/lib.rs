//! `fenceproof conformance`: each command and role of the worker contract exercised once, on a
//! fresh database, before anyone spends time on the matrix. Every point says what the contract
//! requires and, when the worker deviates, exactly what it did instead ("acquire while another
//! term holds the lease answered `held`; expected `busy`"). Every event the worker prints is also
//! checked against the contract's JSON Schema on the way in (`procs::event_schema`); a violation
//! stops the probe it happened in and is reported as that probe's deviation, naming the field.
//!
//! Probes, one file each: [`lease`] (outcomes and metrics of the lease and the protected writes),
//! [`barriers`] (the fault points inside the protected transaction), [`outbox`] (plan, dispatch,
//! reconcile, advance, secrets), [`control`] (create_run and cancel), [`script`] (scripted mode),
//! [`sync_rep`] (a cancelled synchronous-replication wait) and [`flags`] (`--list-mutants`).

pub mod barriers;
pub mod control;
pub mod flags;
pub mod lease;
pub mod outbox;
pub mod script;
pub mod sync_rep;

use serde::Serialize;
use serde_json::Value;

use fenceproof_scenarios::ctx::outcome;

/// One point of the contract and whether the worker kept it.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The probe it belongs to (`lease`, `outbox`, ...).
    pub probe: String,
    /// What the contract requires, as a sentence.
    pub rule: String,
    /// `None` when the worker kept it; else what it did instead.
    pub deviation: Option<String>,
    /// A point no experiment relies on (the contract's letter, a field nobody reads): its
    /// deviation is advice, printed but never failing conformance or stopping `verify`.
    #[serde(default)]
    pub advisory: bool,
}

/// The points one probe collected.
#[derive(Debug, Default)]
pub struct Points {
    pub probe: String,
    pub list: Vec<Point>,
}

impl Points {
    pub fn new(probe: &str) -> Points {
        Points { probe: probe.to_string(), list: Vec::new() }
    }

    /// A point: kept when `ok`, else `deviation` says what happened.
    pub fn expect(&mut self, rule: impl Into<String>, ok: bool, deviation: impl Into<String>) {
        self.list.push(Point {
            probe: self.probe.clone(),
            rule: rule.into(),
            deviation: (!ok).then(|| deviation.into()),
            advisory: false,
        });
    }

    /// Make the point just added advisory (see [`Point::advisory`]).
    pub fn advisory_last(&mut self) {
        if let Some(p) = self.list.last_mut() {
            p.advisory = true;
        }
    }

    /// An advisory point (see [`Point::advisory`]).
    pub fn advise(&mut self, rule: impl Into<String>, ok: bool, deviation: impl Into<String>) {
        self.expect(rule, ok, deviation);
        if let Some(p) = self.list.last_mut() {
            p.advisory = true;
        }
    }

    /// The answer `ev` to `what` must carry outcome `want`.
    pub fn outcome(&mut self, what: &str, ev: &Value, want: &str) -> bool {
        let got = outcome(ev);
        let detail = ev["detail"].as_str().map(|d| format!(" ({})", d.chars().take(160).collect::<String>()));
        self.expect(
            format!("{what} answers `{want}`"),
            got == want,
            format!("{what} answered `{got}`{}; expected `{want}`", detail.unwrap_or_default()),
        );
        got == want
    }

    /// The probe could not go on (the worker broke the language, exited, or never answered).
    pub fn stopped(&mut self, e: &fenceproof_harness::HarnessError) {
        self.expect("the probe runs to its end", false, format!("the probe stopped: {e}"));
    }
}

/// The probes in the order they run: (name, what it covers).
pub const PROBES: &[(&str, &str)] = &[
    ("flags", "the flags the harness passes; --list-mutants"),
    ("lease", "acquire, start, save, succeed, fail, renew, release: outcomes, heartbeat events, metrics"),
    ("barriers", "the fault points after_begin, after_lease_validated, before_commit"),
    ("outbox", "plan, dispatch (before_result_write, write_rejected), reconcile, advance, secrets"),
    ("control", "create_run and cancel from a control-plane process"),
    ("script", "scripted mode: the whole task alone, and its stop after a cancellation"),
    ("sync_rep", "a commit whose synchronous-replication wait was cancelled"),
];

/// Run probe `name` in `ctx`, collecting its points.
pub async fn run_probe(name: &str, ctx: &mut fenceproof_scenarios::ctx::Ctx) -> Points {
    let mut p = Points::new(name);
    let r = match name {
        "flags" => flags::run(ctx, &mut p).await,
        "lease" => lease::run(ctx, &mut p).await,
        "barriers" => barriers::run(ctx, &mut p).await,
        "outbox" => outbox::run(ctx, &mut p).await,
        "control" => control::run(ctx, &mut p).await,
        "script" => script::run(ctx, &mut p).await,
        "sync_rep" => sync_rep::run(ctx, &mut p).await,
        other => Err(fenceproof_harness::HarnessError::Other(format!("no probe named {other}"))),
    };
    if let Err(e) = r {
        p.stopped(&e);
    }
    p
}

/// The lease row's owner id while the harness has taken a term away from a worker.
pub const THIEF: &str = "conformance-thief";

/// Take the lease of `run_id` away from whoever holds it, as a later term would (epoch + 1, a
/// long expiry), through the harness's own session.
pub async fn steal_lease(
    ctx: &fenceproof_scenarios::ctx::Ctx,
    run_id: uuid::Uuid,
) -> Result<i64, fenceproof_harness::HarnessError> {
    let epoch: i64 = sqlx::query_scalar(
        "UPDATE worker_leases SET owner = $2, epoch = epoch + 1,
                expires_at = clock_timestamp() + interval '10 minutes', updated_at = clock_timestamp()
          WHERE run_id = $1 RETURNING epoch",
    )
    .bind(run_id)
    .bind(THIEF)
    .fetch_one(&ctx.pool)
    .await?;
    Ok(epoch)
}

/// The run's status and revision, read by the harness.
pub async fn run_row(
    ctx: &fenceproof_scenarios::ctx::Ctx,
    run_id: uuid::Uuid,
) -> Result<(String, i64, Value), fenceproof_harness::HarnessError> {
    Ok(sqlx::query_as("SELECT status, revision, checkpoint FROM agent_runs WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(&ctx.pool)
        .await?)
}

/// A fresh run of a fresh task, created by the harness.
pub async fn new_run(
    ctx: &fenceproof_scenarios::ctx::Ctx,
    task: &str,
) -> Result<uuid::Uuid, fenceproof_harness::HarnessError> {
    fenceproof_protocol::runs::create_run(&ctx.pool, task, serde_json::json!({}))
        .await
        .map_err(|e| fenceproof_harness::HarnessError::Other(e.to_string()))
}

/// An acquire command with a long lease and a slow heartbeat (nothing renews on its own).
pub fn acquire(run_id: uuid::Uuid) -> Value {
    serde_json::json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 2000})
}

/// What a conformance run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub worker_bin: String,
    pub contract_version: u32,
    pub server: String,
    pub points: Vec<Point>,
    pub notes: Vec<String>,
    pub duration_ms: u128,
}

impl Report {
    /// The deviations that count: a broken point some experiment or rule relies on.
    pub fn deviations(&self) -> impl Iterator<Item = &Point> {
        self.points.iter().filter(|p| p.deviation.is_some() && !p.advisory)
    }

    /// Advisory points the worker did not keep.
    pub fn advice(&self) -> impl Iterator<Item = &Point> {
        self.points.iter().filter(|p| p.deviation.is_some() && p.advisory)
    }

    /// The report as printed: one line per point, deviations first in their probe's order.
    pub fn render(&self, all: bool) -> String {
        let mut s = format!(
            "fenceproof conformance: {} against worker contract v{} on {}\n",
            self.worker_bin, self.contract_version, self.server
        );
        for p in &self.points {
            match &p.deviation {
                Some(d) if p.advisory => s.push_str(&format!("  advice    {:<9} {d}\n", p.probe)),
                Some(d) => s.push_str(&format!("  DEVIATES  {:<9} {d}\n", p.probe)),
                None if all => s.push_str(&format!("  ok        {:<9} {}\n", p.probe, p.rule)),
                None => {}
            }
        }
        for n in &self.notes {
            s.push_str(&format!("  note      {n}\n"));
        }
        let bad = self.deviations().count();
        let advice = self.advice().count();
        s.push_str(&format!(
            "{} of {} contract points kept, {bad} deviation{}{} in {:.1}s\n",
            self.points.len() - bad - advice,
            self.points.len(),
            if bad == 1 { "" } else { "s" },
            if advice > 0 {
                format!(" ({advice} advisory point{} not kept)", if advice == 1 { "" } else { "s" })
            } else {
                String::new()
            },
            self.duration_ms as f64 / 1000.0
        ));
        s
    }
}

/// Run every probe (or those named in `only`) in `session`, one fresh database each.
pub async fn run(
    session: &mut fenceproof_scenarios::runner::Session,
    only: Option<&[String]>,
) -> Result<Report, fenceproof_harness::HarnessError> {
    let t0 = std::time::Instant::now();
    let mut points = Vec::new();
    let mut notes = Vec::new();
    for (name, _) in PROBES {
        if only.is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let mut ctx = session.context("conformance", name, &[]).await?;
        let found = run_probe(name, &mut ctx).await;
        ctx.timeline.save(&ctx.dir.join("timeline.jsonl"))?;
        points.extend(found.list);
        notes.append(&mut ctx.notes);
    }
    let report = Report {
        worker_bin: session.worker_bin.display().to_string(),
        contract_version: fenceproof_harness::procs::event_schema::VERSION,
        server: session.server.version(),
        points,
        notes,
        duration_ms: t0.elapsed().as_millis(),
    };
    std::fs::write(session.run.path.join("conformance.json"), serde_json::to_string_pretty(&report).expect("json"))?;
    std::fs::write(session.run.path.join("conformance.txt"), report.render(true))?;
    Ok(report)
}
