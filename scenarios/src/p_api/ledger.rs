//! P-api-ledger: the outbox functions of spec §09 probed at their boundaries. A claim takes only
//! prepared operations of live runs, skips rows another claim holds (without waiting), and raises
//! the ledger revision by one; a result is written only under the claim's owner, ledger revision
//! and request digest, only as succeeded / failed_final, and only once; an own unknown only under
//! owner + revision; an expired claim moves to unknown only as it was seen and only once expired on
//! the database clock when the function runs; converge moves only unknown rows at the revision read.

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use serde_json::Value;
use sqlx::Connection;
use uuid::Uuid;

use super::{lit, op_key, owner, q, refused, uuid, Answer, Prober, LONG_TTL_MS, SHORT_TTL_MS};
use crate::ctx::Ctx;
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::tags::{self, tagged};

pub const TITLE: &str = "Fenced outbox functions probed at each rule's boundary (claim, result, unknown, converge)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-api-ledger",
    title: TITLE,
    section: "09",
    needs: &[Need::WorkerLogin],
    judges: Judges::Functions,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

fn claim(o: &str, limit: i64) -> String {
    q("fp_claim", &[lit(o), LONG_TTL_MS.to_string(), limit.to_string()], false)
}

fn result(op: &str, o: &str, rev: i64, digest: &str, status: &str) -> String {
    q(
        "fp_record_result",
        &[
            lit(op),
            lit(o),
            rev.to_string(),
            lit(digest),
            lit(status),
            lit("remote-1"),
            "'{\"ok\": true}'::jsonb".into(),
        ],
        false,
    )
}

fn unknown_own(op: &str, o: &str, rev: i64) -> String {
    q("fp_mark_unknown_own", &[lit(op), lit(o), rev.to_string(), lit("probe")], false)
}

fn expired(op: &str, o: &str, rev: i64, held: bool) -> String {
    let who = if held { format!("{} || {{held}}", lit(o)) } else { lit(o) };
    q("fp_mark_expired_unknown", &[lit(op), who, rev.to_string()], held)
}

fn converge(op: &str, rev: i64, status: &str) -> String {
    q("fp_converge", &[lit(op), rev.to_string(), lit(status), lit("remote-1"), "'{\"ok\": true}'::jsonb".into()], false)
}

/// The claim answered exactly these operation ids.
fn claimed(ids: Vec<String>) -> impl Fn(&Answer) -> bool {
    move |a| match a {
        Ok(rows) => {
            let mut got: Vec<String> =
                rows.iter().filter_map(|r| r["operation_id"].as_str().map(String::from)).collect();
            got.sort();
            let mut want = ids.clone();
            want.sort();
            got == want
        }
        Err(_) => false,
    }
}

fn one_row(a: &Answer) -> bool {
    matches!(a, Ok(rows) if rows.len() == 1 && rows[0].as_i64() != Some(0))
}

/// Insert a ledger row as the harness (the control plane's setup), at `status`, `revision`,
/// claimed by `by` until `until_ms` from now when given.
async fn put(
    p: &Prober<'_>,
    op: &str,
    run: Uuid,
    status: &str,
    rev: i64,
    by: Option<&str>,
    until_ms: Option<i64>,
) -> Result<(), HarnessError> {
    let until =
        until_ms.map(|ms| format!("clock_timestamp() + {ms} * interval '1 millisecond'")).unwrap_or("NULL".into());
    p.admin(&format!(
        "INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body,
                                     status, revision, dispatch_owner, dispatch_until)
         VALUES ({}, {}, {}, 1, 'idem', 'digest-1', '{{}}', '{status}', {rev}, {}, {until})",
        lit(op),
        uuid(run),
        lit(op),
        by.map(lit).unwrap_or("NULL".into())
    ))
    .await
}

async fn revision(p: &Prober<'_>, op: &str) -> Result<i64, HarnessError> {
    Ok(sqlx::query_scalar("SELECT revision FROM tool_operations WHERE operation_id = $1")
        .bind(op)
        .fetch_one(&p.ctx.pool)
        .await?)
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let Some(mut p) = Prober::new(ctx) else { return Ok(()) };
    let l = setup(&p).await?;
    // Claim: only prepared operations of live runs, revision + 1; a row another claim holds is
    // skipped, without waiting.
    let claimed_rev = claims_prepared_of_live_runs(&mut p, &l).await?;
    claims_skip_locked(&mut p, &l).await?;
    // Result: owner + ledger revision + digest, succeeded/failed_final only, once.
    let (settled_rev, twin) = results(&mut p, &l, claimed_rev).await?;
    // Own unknown: owner + revision, dispatching only, that row only.
    own_unknown(&mut p, &l, (claimed_rev, settled_rev), &twin).await?;
    // Expired claims: as seen, only once expired on the database clock, only dispatching rows.
    expired_claims(&mut p, &l).await?;
    expired_claim_held_across_expiry(&mut p, &l).await?;
    // Converge: unknown rows only, at the revision read, to a settled status only, that row only.
    converges(&mut p, &l).await?;
    p.finish().await
}

/// The runs and ledger rows the probes start from: a live run and another live run, with a
/// prepared, a dispatching (claimed by `d0`) and an unknown operation; `d1` is the dispatcher that
/// claims.
struct Ledger {
    live: Uuid,
    other: Uuid,
    o_prep: String,
    o_busy: String,
    o_unk: String,
    d0: String,
    d1: String,
}

impl Ledger {
    /// An operation id of this experiment.
    fn id(&self, s: &str) -> String {
        op_id(self.live, s)
    }
}

/// An operation id of the experiment whose live run is `live`.
fn op_id(live: Uuid, s: &str) -> String {
    format!("pg-{s}-{}", &live.simple().to_string()[..8])
}

async fn setup(p: &Prober<'_>) -> Result<Ledger, HarnessError> {
    let live = p.new_run("task-pg-live").await?;
    let gone = p.new_run("task-pg-cancelled").await?;
    let other = p.new_run("task-pg-other").await?;
    p.admin(&format!("UPDATE agent_runs SET status = 'running', revision = 1 WHERE run_id IN ('{live}', '{other}')"))
        .await?;
    fenceproof_protocol::runs::cancel(&p.ctx.pool, gone)
        .await
        .map_err(|e| HarnessError::Other(format!("cancel: {e}")))?;
    let id = |s: &str| op_id(live, s);
    let (o_prep, o_gone, o_busy, o_unk) = (id("prepared"), id("of-cancelled-run"), id("dispatching"), id("unknown"));
    let d0 = owner("d0");
    put(p, &o_prep, live, "prepared", 0, None, None).await?;
    put(p, &o_gone, gone, "prepared", 0, None, None).await?;
    put(p, &o_busy, live, "dispatching", 1, Some(&d0), Some(LONG_TTL_MS)).await?;
    put(p, &o_unk, live, "unknown", 2, None, None).await?;
    Ok(Ledger { live, other, o_prep, o_busy, o_unk, d0, d1: owner("d1") })
}

/// A claim takes the prepared operation of a live run only, and raises its ledger revision by
/// one. Returns that revision.
async fn claims_prepared_of_live_runs(p: &mut Prober<'_>, l: &Ledger) -> Result<i64, HarnessError> {
    let d1 = &l.d1;
    p.probe(tags::CLAIM_PREPARED_OF_LIVE_RUNS, "a claim takes the prepared operation of a live run only (not a cancelled run's, not a dispatching or unknown one)", d1, &claim(d1, 10), claimed(vec![l.o_prep.clone()]), &[op_key(&l.o_prep)]).await?;
    let claimed_rev = revision(p, &l.o_prep).await?;
    p.ctx.check(Check::equal(
        tagged(tags::LEDGER_REVISION_PLUS_ONE, "the claim raised the ledger revision by one"),
        claimed_rev,
        1,
    ));
    Ok(claimed_rev)
}

/// While a first claim (in an open transaction) holds the oldest prepared row, a second claim
/// takes the next one without waiting.
async fn claims_skip_locked(p: &mut Prober<'_>, l: &Ledger) -> Result<(), HarnessError> {
    let (o_a, o_b) = (l.id("queued-a"), l.id("queued-b"));
    let other = l.other;
    p.admin(&format!(
        "INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status, updated_at)
         VALUES ({}, '{other}', 'queued-a', 1, 'idem', 'digest-1', '{{}}', 'prepared', clock_timestamp() - interval '1 hour')",
        lit(&o_a)
    ))
    .await?;
    put(p, &o_b, other, "prepared", 0, None, None).await?;
    let d2 = owner("d2");
    let opts: sqlx::postgres::PgConnectOptions = p.ctx.db_url.parse()?;
    let mut first = sqlx::PgConnection::connect_with(&opts.application_name(&d2)).await?;
    sqlx::query("BEGIN").execute(&mut first).await?;
    let held: Vec<Value> = fenceproof_harness::wait::within("the first claim", crate::ctx::STEP, async {
        Ok(sqlx::query_scalar(&claim(&d2, 1)).fetch_all(&mut first).await?)
    })
    .await?;
    let d3 = owner("d3");
    let second = p
        .probe_with_lock_timeout(
            tags::CLAIM_SKIP_LOCKED,
            "while another claim holds the oldest prepared row, a claim takes the next one without waiting",
            &d3,
            &claim(&d3, 1),
            claimed(vec![o_b.clone()]),
            &[op_key(&o_b)],
        )
        .await;
    sqlx::query("COMMIT").execute(&mut first).await?;
    let _ = first.close().await;
    second?;
    let got_first: Vec<&str> = held.iter().filter_map(|r| r["operation_id"].as_str()).collect();
    p.ctx.check(Check::expect(
        tagged(tags::CLAIM_SKIP_LOCKED, "the first claim took the oldest prepared row"),
        got_first == vec![o_a.as_str()],
        format!("first claim answered {got_first:?}"),
    ));
    Ok(())
}

/// A result is written only under the claim's owner, ledger revision and digest, only as a
/// settled status, to that operation only, and once. Returns the settled row's revision and the
/// twin row (same owner, revision and digest as the claim).
async fn results(p: &mut Prober<'_>, l: &Ledger, claimed_rev: i64) -> Result<(i64, String), HarnessError> {
    let (o_prep, d0, d1) = (&l.o_prep, &l.d0, &l.d1);
    let twin = l.id("twin");
    put(p, &twin, l.live, "dispatching", claimed_rev, Some(d1), Some(LONG_TTL_MS)).await?;
    let rule = tags::RESULT_CLAIM_OWNER_REVISION_DIGEST;
    p.probe(
        rule,
        "a result under another dispatcher's owner id is refused",
        d0,
        &result(o_prep, d0, claimed_rev, "digest-1", "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a result at a stale ledger revision is refused",
        d1,
        &result(o_prep, d1, claimed_rev - 1, "digest-1", "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a result for another request digest is refused",
        d1,
        &result(o_prep, d1, claimed_rev, "digest-2", "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        tags::RESULT_SETTLED_STATUSES_ONLY,
        "a 'result' that would set the status back to prepared is refused",
        d1,
        &result(o_prep, d1, claimed_rev, "digest-1", "prepared"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "the claim's own result is written to that operation only (another has the same owner, revision and digest)",
        d1,
        &result(o_prep, d1, claimed_rev, "digest-1", "succeeded"),
        one_row,
        &[op_key(o_prep)],
    )
    .await?;
    let settled_rev = revision(p, o_prep).await?;
    p.probe(
        tags::LEDGER_SETTLED_FINAL,
        "a second result at the settled row's new revision is refused",
        d1,
        &result(o_prep, d1, settled_rev, "digest-1", "failed_final"),
        refused,
        &[],
    )
    .await?;
    Ok((settled_rev, twin))
}

/// A dispatcher marks unknown only a claim still its own (expired or not), at the revision it claimed, that row only
/// (`twin` is a claim of `d1` beside a second one with the same owner and revision).
async fn own_unknown(
    p: &mut Prober<'_>,
    l: &Ledger,
    (claimed_rev, settled_rev): (i64, i64),
    twin: &str,
) -> Result<(), HarnessError> {
    let (d0, d1) = (&l.d0, &l.d1);
    let twin2 = l.id("twin2");
    put(p, &twin2, l.live, "dispatching", claimed_rev, Some(d1), Some(LONG_TTL_MS)).await?;
    let rule = tags::UNKNOWN_OWN_CLAIM_ONLY;
    p.probe(
        rule,
        "marking another dispatcher's claim unknown is refused",
        d0,
        &unknown_own(twin, d0, claimed_rev),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "marking a claim unknown at a stale revision is refused",
        d1,
        &unknown_own(twin, d1, claimed_rev - 1),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "marking a settled row unknown is refused",
        d1,
        &unknown_own(&l.o_prep, d1, settled_rev),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "the claim's own unknown changes that operation only (another has the same owner and revision)",
        d1,
        &unknown_own(twin, d1, claimed_rev),
        one_row,
        &[op_key(twin)],
    )
    .await
}

/// A reconciler moves a claim to unknown only once it expired, only as it was seen (owner +
/// revision), only while it is dispatching.
async fn expired_claims(p: &mut Prober<'_>, l: &Ledger) -> Result<(), HarnessError> {
    let (d0, d1) = (&l.d0, &l.d1);
    let rule = tags::UNKNOWN_EXPIRED_CLAIM_AS_SEEN;
    p.probe(
        rule,
        "a claim that has not expired is not moved to unknown",
        d0,
        &expired(&l.o_busy, d0, 1, false),
        refused,
        &[],
    )
    .await?;
    let (late, stale) = (l.id("late"), l.id("stale"));
    put(p, &late, l.live, "dispatching", 1, Some(d0), Some(-1000)).await?;
    put(p, &stale, l.live, "unknown", 1, Some(d0), Some(-1000)).await?;
    p.probe(
        rule,
        "an expired claim under another owner id than the one seen is not moved",
        d1,
        &expired(&late, d1, 1, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "an expired claim at another revision than the one seen is not moved",
        d0,
        &expired(&late, d0, 2, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a row that is no longer dispatching is not moved again",
        d0,
        &expired(&stale, d0, 1, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "an expired claim, exactly as seen, moves to unknown (that row only)",
        d0,
        &expired(&late, d0, 1, false),
        one_row,
        &[op_key(&late)],
    )
    .await
}

/// A reconciler whose statement began before the claim expired but runs after it moves the
/// claim: the check is made on the database clock when the function runs. Retried with a longer
/// claim while inconclusive (the statement began after the expiry on a loaded machine).
async fn expired_claim_held_across_expiry(p: &mut Prober<'_>, l: &Ledger) -> Result<(), HarnessError> {
    let d0 = &l.d0;
    for ttl in [SHORT_TTL_MS, 2_000, 5_000] {
        let soon = l.id(&format!("soon-{ttl}"));
        put(p, &soon, l.live, "dispatching", 1, Some(d0), Some(ttl)).await?;
        let moment = format!("(SELECT dispatch_until FROM tool_operations WHERE operation_id = {})", lit(&soon));
        if p.probe_held(
            tags::UNKNOWN_EXPIRED_CLAIM_AS_SEEN,
            "a reconciler whose statement began before the claim expired but runs after it moves the claim to unknown",
            d0,
            &expired(&soon, d0, 1, true),
            &moment,
            one_row,
            &[op_key(&soon)],
        )
        .await?
        .is_some()
        {
            return Ok(());
        }
    }
    Err(HarnessError::Inconclusive(
        "the claim-expiry probe stayed inconclusive with a 5 s claim (a very loaded machine)".into(),
    ))
}

/// Convergence moves only unknown rows, at the revision read, to a settled status, that row only.
async fn converges(p: &mut Prober<'_>, l: &Ledger) -> Result<(), HarnessError> {
    let (o_unk, d1) = (&l.o_unk, &l.d1);
    let unk2 = l.id("unknown-twin");
    put(p, &unk2, l.live, "unknown", 2, None, None).await?;
    let rule = tags::CONVERGE_UNKNOWN_AT_REVISION;
    p.probe(rule, "converging at a stale revision is refused", d1, &converge(o_unk, 1, "succeeded"), refused, &[])
        .await?;
    p.probe(
        rule,
        "converging a row that is dispatching is refused",
        d1,
        &converge(&l.o_busy, 1, "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        tags::RESULT_SETTLED_STATUSES_ONLY,
        "converging to prepared is refused",
        d1,
        &converge(o_unk, 2, "prepared"),
        refused,
        &[],
    )
    .await?;
    p.probe(rule, "converging an unknown row at the revision read settles that row only (another is unknown at the same revision)", d1, &converge(o_unk, 2, "succeeded"), one_row, &[op_key(o_unk)]).await
}
