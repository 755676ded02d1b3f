//! P-api-ledger: the outbox functions of spec §09 probed at their boundaries. A claim takes only
//! prepared operations of live runs, skips rows another claim holds (without waiting), and raises
//! the ledger revision by one; a result is written only under the claim's owner, ledger revision
//! and request digest, only as succeeded / failed_final, and only once; an own unknown only under
//! owner + revision; an expired claim moves to unknown only as it was seen and only once expired on
//! the database clock when the function runs; converge moves only unknown rows at the revision read.

use fenceproof_harness::HarnessError;
use serde_json::Value;
use sqlx::Connection;
use uuid::Uuid;

use super::{lit, op_key, owner, q, refused, uuid, Answer, Prober, LONG_TTL_MS, SHORT_TTL_MS};
use crate::ctx::Ctx;

pub const TITLE: &str = "Fenced outbox functions probed at each rule's boundary (claim, result, unknown, converge)";

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
    let live = p.new_run("task-pg-live").await?;
    let gone = p.new_run("task-pg-cancelled").await?;
    let other = p.new_run("task-pg-other").await?;
    p.admin(&format!("UPDATE agent_runs SET status = 'running', revision = 1 WHERE run_id IN ('{live}', '{other}')"))
        .await?;
    fenceproof_protocol::runs::cancel(&p.ctx.pool, gone)
        .await
        .map_err(|e| HarnessError::Other(format!("cancel: {e}")))?;
    let id = |s: &str| format!("pg-{s}-{}", &live.simple().to_string()[..8]);
    let (o_prep, o_gone, o_busy, o_unk) = (id("prepared"), id("of-cancelled-run"), id("dispatching"), id("unknown"));
    let d0 = owner("d0");
    put(&p, &o_prep, live, "prepared", 0, None, None).await?;
    put(&p, &o_gone, gone, "prepared", 0, None, None).await?;
    put(&p, &o_busy, live, "dispatching", 1, Some(&d0), Some(LONG_TTL_MS)).await?;
    put(&p, &o_unk, live, "unknown", 2, None, None).await?;

    // Claim: only prepared operations of live runs, revision + 1.
    let d1 = owner("d1");
    let rule = "claim.prepared-of-live-runs";
    p.probe(rule, "a claim takes the prepared operation of a live run only (not a cancelled run's, not a dispatching or unknown one)", &d1, &claim(&d1, 10), claimed(vec![o_prep.clone()]), &[op_key(&o_prep)]).await?;
    let claimed_rev = revision(&p, &o_prep).await?;
    p.ctx.check(fenceproof_harness::check::Check::equal(
        "[ledger.revision-plus-one] the claim raised the ledger revision by one",
        claimed_rev,
        1,
    ));

    // Claim: a row another claim holds is skipped, without waiting.
    let (o_a, o_b) = (id("queued-a"), id("queued-b"));
    p.admin(&format!(
        "INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status, updated_at)
         VALUES ({}, '{other}', 'queued-a', 1, 'idem', 'digest-1', '{{}}', 'prepared', clock_timestamp() - interval '1 hour')",
        lit(&o_a)
    ))
    .await?;
    put(&p, &o_b, other, "prepared", 0, None, None).await?;
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
            "claim.skip-locked",
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
    p.ctx.check(fenceproof_harness::check::Check::expect(
        "[claim.skip-locked] the first claim took the oldest prepared row",
        got_first == vec![o_a.as_str()],
        format!("first claim answered {got_first:?}"),
    ));

    // Result: owner + ledger revision + digest, succeeded/failed_final only, once.
    let twin = id("twin");
    put(&p, &twin, live, "dispatching", claimed_rev, Some(&d1), Some(LONG_TTL_MS)).await?;
    let rule = "result.claim-owner-revision-digest";
    p.probe(
        rule,
        "a result under another dispatcher's owner id is refused",
        &d0,
        &result(&o_prep, &d0, claimed_rev, "digest-1", "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a result at a stale ledger revision is refused",
        &d1,
        &result(&o_prep, &d1, claimed_rev - 1, "digest-1", "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a result for another request digest is refused",
        &d1,
        &result(&o_prep, &d1, claimed_rev, "digest-2", "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        "result.settled-statuses-only",
        "a 'result' that would set the status back to prepared is refused",
        &d1,
        &result(&o_prep, &d1, claimed_rev, "digest-1", "prepared"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "the claim's own result is written to that operation only (another has the same owner, revision and digest)",
        &d1,
        &result(&o_prep, &d1, claimed_rev, "digest-1", "succeeded"),
        one_row,
        &[op_key(&o_prep)],
    )
    .await?;
    let settled_rev = revision(&p, &o_prep).await?;
    p.probe(
        "ledger.settled-final",
        "a second result at the settled row's new revision is refused",
        &d1,
        &result(&o_prep, &d1, settled_rev, "digest-1", "failed_final"),
        refused,
        &[],
    )
    .await?;

    // Own unknown: owner + revision, dispatching only, that row only.
    let twin2 = id("twin2");
    put(&p, &twin2, live, "dispatching", claimed_rev, Some(&d1), Some(LONG_TTL_MS)).await?;
    let rule = "unknown.own-claim-only";
    p.probe(
        rule,
        "marking another dispatcher's claim unknown is refused",
        &d0,
        &unknown_own(&twin, &d0, claimed_rev),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "marking a claim unknown at a stale revision is refused",
        &d1,
        &unknown_own(&twin, &d1, claimed_rev - 1),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "marking a settled row unknown is refused",
        &d1,
        &unknown_own(&o_prep, &d1, settled_rev),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "the claim's own unknown changes that operation only (another has the same owner and revision)",
        &d1,
        &unknown_own(&twin, &d1, claimed_rev),
        one_row,
        &[op_key(&twin)],
    )
    .await?;

    // Expired claims: as seen, only once expired on the database clock, only dispatching rows.
    let rule = "unknown.expired-claim-as-seen";
    p.probe(
        rule,
        "a claim that has not expired is not moved to unknown",
        &d0,
        &expired(&o_busy, &d0, 1, false),
        refused,
        &[],
    )
    .await?;
    let (late, stale) = (id("late"), id("stale"));
    put(&p, &late, live, "dispatching", 1, Some(&d0), Some(-1000)).await?;
    put(&p, &stale, live, "unknown", 1, Some(&d0), Some(-1000)).await?;
    p.probe(
        rule,
        "an expired claim under another owner id than the one seen is not moved",
        &d1,
        &expired(&late, &d1, 1, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "an expired claim at another revision than the one seen is not moved",
        &d0,
        &expired(&late, &d0, 2, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a row that is no longer dispatching is not moved again",
        &d0,
        &expired(&stale, &d0, 1, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "an expired claim, exactly as seen, moves to unknown (that row only)",
        &d0,
        &expired(&late, &d0, 1, false),
        one_row,
        &[op_key(&late)],
    )
    .await?;
    let mut conclusive = false;
    for ttl in [SHORT_TTL_MS, 2_000, 5_000] {
        let soon = id(&format!("soon-{ttl}"));
        put(&p, &soon, live, "dispatching", 1, Some(&d0), Some(ttl)).await?;
        let moment = format!("(SELECT dispatch_until FROM tool_operations WHERE operation_id = {})", lit(&soon));
        if p.probe_held(
            rule,
            "a reconciler whose statement began before the claim expired but runs after it moves the claim to unknown",
            &d0,
            &expired(&soon, &d0, 1, true),
            &moment,
            one_row,
            &[op_key(&soon)],
        )
        .await?
        .is_some()
        {
            conclusive = true;
            break;
        }
    }
    if !conclusive {
        return Err(HarnessError::Other(
            "the claim-expiry probe stayed inconclusive with a 5 s claim (a very loaded machine)".into(),
        ));
    }

    // Converge: unknown rows only, at the revision read, to a settled status only, that row only.
    let unk2 = id("unknown-twin");
    put(&p, &unk2, live, "unknown", 2, None, None).await?;
    let rule = "converge.unknown-at-revision";
    p.probe(rule, "converging at a stale revision is refused", &d1, &converge(&o_unk, 1, "succeeded"), refused, &[])
        .await?;
    p.probe(
        rule,
        "converging a row that is dispatching is refused",
        &d1,
        &converge(&o_busy, 1, "succeeded"),
        refused,
        &[],
    )
    .await?;
    p.probe(
        "result.settled-statuses-only",
        "converging to prepared is refused",
        &d1,
        &converge(&o_unk, 2, "prepared"),
        refused,
        &[],
    )
    .await?;
    p.probe(rule, "converging an unknown row at the revision read settles that row only (another is unknown at the same revision)", &d1, &converge(&o_unk, 2, "succeeded"), one_row, &[op_key(&o_unk)]).await?;
    p.finish().await
}
