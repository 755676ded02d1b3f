//! P-api-clock: the boundary instants of spec §05 and §09, made exact by freezing the database
//! server's own clock (libfaketime, see [`fenceproof_harness::faults::clock`]). A lease whose
//! `expires_at` equals the clock at the check has expired: it can be taken over, but neither
//! renewed nor written under; a claim whose `dispatch_until` equals the clock has expired and may be
//! moved to unknown. With a running clock these instants last a microsecond and no test can hit
//! them; with a frozen one every probe lands exactly on them.
//!
//! The experiment starts its own native server (the clock is that server's alone), migrates it
//! like the session's template, and judges from that server's oracle, which it saves as its
//! `oracle.json`.

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use uuid::Uuid;

use super::{lease_key, lit, op_key, outcome, owner, refused, uuid, Answer, Prober};
use crate::ctx::Ctx;
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::frozen_clock::FrozenServer;
use crate::tags;

pub const TITLE: &str = "Fenced functions at the exact instant of expiry (database clock frozen with libfaketime)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-api-clock",
    title: TITLE,
    section: "05, 09, 10",
    needs: &[Need::WorkerLogin, Need::ClockServer],
    judges: Judges::Functions,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The name of its own check beside the probes (the rule catalogue links rules to it).
pub const CLOCK_STAYED_FROZEN: &str = "the server's clock stayed frozen where the harness set it";

const T0: &str = "2030-01-01 00:00:00";
const T1: &str = "2030-01-01 00:00:01";
const T2: &str = "2030-01-01 00:00:02";

fn took(epoch: i64) -> impl Fn(&Answer) -> bool {
    move |a| matches!(a, Ok(rows) if rows.len() == 1 && rows[0]["epoch"].as_i64() == Some(epoch))
}

fn one_row(a: &Answer) -> bool {
    matches!(a, Ok(rows) if rows.len() == 1 && rows[0].as_i64() != Some(0))
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let server = FrozenServer::enter(ctx, T0).await?;
    let res = probes(ctx, &server).await;
    server.leave(ctx).await?;
    res
}

async fn probes(ctx: &mut Ctx, server: &FrozenServer) -> Result<(), HarnessError> {
    let Some(mut p) = Prober::new(ctx) else { return Ok(()) };
    let (r1, r2) = (p.new_run("task-clock-1").await?, p.new_run("task-clock-2").await?);
    let (a, b) = (owner("a"), owner("b"));
    let rule = tags::LEASE_ACQUIRE_FREE_OR_EXPIRED;
    p.probe(
        rule,
        &format!("at {T0}, A takes a 1 s lease (until {T1})"),
        &a,
        &acquire(r1, &a),
        took(1),
        &[lease_key(r1)],
    )
    .await?;
    p.probe(rule, &format!("at {T0}, A takes a second 1 s lease"), &a, &acquire(r2, &a), took(1), &[lease_key(r2)])
        .await?;

    server.set(T1)?;
    at_lease_expiry(&mut p, r1, (&a, &b)).await?;

    // A claim due at T2, and the clock moved exactly there.
    let op = format!("clock-op-{}", &r2.simple().to_string()[..8]);
    let d = owner("d");
    p.admin(&format!(
        "UPDATE agent_runs SET status = 'running', revision = 1 WHERE run_id = '{r2}';
         INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body,
                                      status, revision, dispatch_owner, dispatch_until)
         VALUES ({}, '{r2}', 's', 1, 'idem', 'digest-1', '{{}}', 'dispatching', 1, {}, '{T2}+00')",
        lit(&op),
        lit(&d)
    ))
    .await?;
    server.set(T2)?;
    p.probe(
        tags::UNKNOWN_EXPIRED_CLAIM_AS_SEEN,
        &format!("at {T2}, the instant the claim is due, a reconciler moves it to unknown"),
        &d,
        &format!("SELECT to_jsonb(fp_mark_expired_unknown({}, {}, 1))", lit(&op), lit(&d)),
        one_row,
        &[op_key(&op)],
    )
    .await?;
    let read: String = sqlx::query_scalar("SELECT clock_timestamp()::text").fetch_one(&p.ctx.pool).await?;
    p.ctx.check(Check::expect(CLOCK_STAYED_FROZEN, read.starts_with(T2), format!("the server reads {read}")));
    p.finish().await
}

/// A's 1 s lease of `r1`, as the fp_lease_acquire call of `o`.
fn acquire(r: Uuid, o: &str) -> String {
    format!("SELECT to_jsonb(x) FROM fp_lease_acquire({}, {}, 1000) x", uuid(r), lit(o))
}

/// At T1, the instant A's leases expire: a renewal, single or batched, and a protected write are
/// refused; B's takeover succeeds at epoch 2.
async fn at_lease_expiry(p: &mut Prober<'_>, r1: Uuid, (a, b): (&str, &str)) -> Result<(), HarnessError> {
    let at = format!("at {T1}, the instant the leases expire,");
    p.probe(
        tags::LEASE_RENEW_UNEXPIRED,
        &format!("{at} a renewal is refused (expired when expires_at = clock)"),
        a,
        &format!("SELECT to_jsonb(x) FROM fp_lease_renew({}, {}, 1, 1000) x", uuid(r1), lit(a)),
        refused,
        &[],
    )
    .await?;
    p.probe(
        tags::LEASE_RENEW_UNEXPIRED,
        &format!("{at} a batched renewal is refused"),
        a,
        &format!(
            "SELECT to_jsonb(x) FROM fp_lease_renew_many({}, ARRAY['{r1}']::uuid[], ARRAY[1]::bigint[], 1000) x",
            lit(a)
        ),
        refused,
        &[],
    )
    .await?;
    let start = format!(
        "SELECT to_jsonb(x) FROM fp_run_transition({}, {}, 1, 0, 'pending', 'running', '{{}}'::jsonb, NULL, NULL, NULL, NULL, NULL, NULL, NULL) x",
        uuid(r1),
        lit(a)
    );
    p.probe(
        tags::COMMIT_LEASE_OWNER_EPOCH_LIVE,
        &format!("{at} a protected write is refused as lease_lost"),
        a,
        &start,
        |x| outcome(x) == "lease_lost",
        &[],
    )
    .await?;
    p.probe(
        tags::LEASE_ACQUIRE_FREE_OR_EXPIRED,
        &format!("{at} a takeover succeeds at epoch 2"),
        b,
        &acquire(r1, b),
        took(2),
        &[lease_key(r1)],
    )
    .await
}
