//! P-api-lease: fp_lease_acquire, fp_lease_renew, fp_lease_renew_many and fp_lease_release probed
//! at the boundaries of spec §05: only a free or expired lease is taken (epoch + 1, that lease only);
//! renewal and release work only under owner + epoch, renewal only before expiry, judged on the
//! database clock at the moment the function runs; release keeps the epoch.

use fenceproof_harness::HarnessError;
use uuid::Uuid;

use super::{lease_key, lit, owner, q, refused, uuid, Answer, Prober, LONG_TTL_MS, SHORT_TTL_MS};
use crate::ctx::Ctx;
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::tags::{self, tagged};

pub const TITLE: &str = "Fenced lease functions probed at each rule's boundary (acquire, renew, release)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-api-lease",
    title: TITLE,
    section: "05",
    needs: &[Need::WorkerLogin],
    judges: Judges::Functions,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

fn acquire(r: Uuid, o: &str, ttl: i64, held: bool) -> String {
    let who = if held { format!("{} || {{held}}", lit(o)) } else { lit(o) };
    q("fp_lease_acquire", &[uuid(r), who, ttl.to_string()], held)
}

fn renew(r: Uuid, o: &str, epoch: i64, held: bool) -> String {
    let who = if held { format!("{} || {{held}}", lit(o)) } else { lit(o) };
    q("fp_lease_renew", &[uuid(r), who, epoch.to_string(), LONG_TTL_MS.to_string()], held)
}

fn renew_many(o: &str, runs: &[Uuid], epochs: &[i64], held: bool) -> String {
    let who = if held { format!("{} || {{held}}", lit(o)) } else { lit(o) };
    let runs: Vec<String> = runs.iter().map(|r| format!("'{r}'")).collect();
    let epochs: Vec<String> = epochs.iter().map(|e| e.to_string()).collect();
    q(
        "fp_lease_renew_many",
        &[
            who,
            format!("ARRAY[{}]::uuid[]", runs.join(",")),
            format!("ARRAY[{}]::bigint[]", epochs.join(",")),
            LONG_TTL_MS.to_string(),
        ],
        held,
    )
}

fn release(r: Uuid, o: &str, epoch: i64) -> String {
    q("fp_lease_release", &[uuid(r), lit(o), epoch.to_string()], false)
}

/// The answer is one lease row at `epoch`.
fn took(epoch: i64) -> impl Fn(&Answer) -> bool {
    move |a| matches!(a, Ok(rows) if rows.len() == 1 && rows[0]["epoch"].as_i64() == Some(epoch))
}

fn rows_n(n: usize) -> impl Fn(&Answer) -> bool {
    move |a| matches!(a, Ok(rows) if rows.len() == n && rows.iter().all(|r| r.as_i64() != Some(0)))
}

fn count_is(n: i64) -> impl Fn(&Answer) -> bool {
    move |a| matches!(a, Ok(rows) if rows.len() == 1 && rows[0].as_i64() == Some(n))
}

async fn epoch_of(p: &Prober<'_>, r: Uuid) -> Result<i64, HarnessError> {
    Ok(sqlx::query_scalar("SELECT epoch FROM worker_leases WHERE run_id = $1").bind(r).fetch_one(&p.ctx.pool).await?)
}

fn expiry(r: Uuid) -> String {
    format!("(SELECT expires_at FROM worker_leases WHERE run_id = '{r}'::uuid)")
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let Some(mut p) = Prober::new(ctx) else { return Ok(()) };
    let (r1, r2, r3) = (p.new_run("task-pl-1").await?, p.new_run("task-pl-2").await?, p.new_run("task-pl-3").await?);
    let (a, b) = (owner("a"), owner("b"));
    // Acquire: only the named lease, only when free, epoch + 1.
    acquires(&mut p, (r1, r2), (&a, &b)).await?;
    // Renew: owner + epoch, that lease only.
    renewals(&mut p, (r1, r2), (&a, &b)).await?;
    // Release: owner + epoch, that lease only, epoch kept.
    releases(&mut p, r2, (&a, &b)).await?;
    // Expiry, on the database clock at the moment the function runs.
    expiries(&mut p, r3, (&a, &b)).await?;
    p.finish().await
}

/// Acquiring takes a free lease at epoch 1, that lease only, and never a live one of another
/// owner; one owner holds two runs' leases.
async fn acquires(p: &mut Prober<'_>, (r1, r2): (Uuid, Uuid), (a, b): (&str, &str)) -> Result<(), HarnessError> {
    let rule = tags::LEASE_ACQUIRE_FREE_OR_EXPIRED;
    p.probe(
        rule,
        "acquiring a free lease takes epoch 1 of that lease only (two other leases are free)",
        a,
        &acquire(r1, a, LONG_TTL_MS, false),
        took(1),
        &[lease_key(r1)],
    )
    .await?;
    p.probe(
        rule,
        "acquiring a live lease held by another owner is refused",
        b,
        &acquire(r1, b, LONG_TTL_MS, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "the same owner acquires a second run's lease",
        a,
        &acquire(r2, a, LONG_TTL_MS, false),
        took(1),
        &[lease_key(r2)],
    )
    .await
}

/// A renewal, single or batched, extends only the named lease whose owner and epoch match.
async fn renewals(p: &mut Prober<'_>, (r1, r2): (Uuid, Uuid), (a, b): (&str, &str)) -> Result<(), HarnessError> {
    let rule = tags::LEASE_RENEW_OWNER_EPOCH;
    p.probe(rule, "renewing with a stale epoch (0) is refused", a, &renew(r1, a, 0, false), refused, &[]).await?;
    p.probe(rule, "renewing with a future epoch (2) is refused", a, &renew(r1, a, 2, false), refused, &[]).await?;
    p.probe(
        rule,
        "renewing under another owner id with the current epoch is refused",
        b,
        &renew(r1, b, 1, false),
        refused,
        &[],
    )
    .await?;
    p.probe(
        rule,
        "renewing extends the named lease only (the owner holds another at the same epoch)",
        a,
        &renew(r1, a, 1, false),
        rows_n(1),
        &[lease_key(r1)],
    )
    .await?;
    p.probe(
        rule,
        "a batched renewal extends only the leases whose own epoch matches",
        a,
        &renew_many(a, &[r1, r2], &[1, 0], false),
        rows_n(1),
        &[lease_key(r1)],
    )
    .await?;
    p.probe(
        rule,
        "a batched renewal under another owner id extends nothing",
        b,
        &renew_many(b, &[r1, r2], &[1, 1], false),
        refused,
        &[],
    )
    .await
}

/// A release works only under owner + epoch, frees the named lease only and keeps its epoch; the
/// freed lease is then taken at epoch + 1.
async fn releases(p: &mut Prober<'_>, r2: Uuid, (a, b): (&str, &str)) -> Result<(), HarnessError> {
    let rule = tags::LEASE_RELEASE_OWNER_EPOCH;
    p.probe(rule, "releasing with a stale epoch is refused", a, &release(r2, a, 0), count_is(0), &[]).await?;
    p.probe(rule, "releasing under another owner id is refused", b, &release(r2, b, 1), count_is(0), &[]).await?;
    p.probe(
        tags::LEASE_RELEASE_KEEPS_EPOCH,
        "releasing frees the named lease only (the owner holds another at the same epoch)",
        a,
        &release(r2, a, 1),
        count_is(1),
        &[lease_key(r2)],
    )
    .await?;
    let kept = epoch_of(p, r2).await?;
    p.ctx.check(fenceproof_harness::check::Check::equal(
        tagged(tags::LEASE_RELEASE_KEEPS_EPOCH, "the released lease keeps its epoch"),
        kept,
        1,
    ));
    p.probe(
        rule,
        "a free (released) lease is taken at epoch + 1",
        b,
        &acquire(r2, b, LONG_TTL_MS, false),
        took(2),
        &[lease_key(r2)],
    )
    .await
}

/// The held probes across the expiry of `r3`'s lease (a renewal, a batched renewal, a takeover),
/// each retried with a longer lease while inconclusive. A retry starts on a fresh run: the takeover
/// probe leaves `b` holding the lease for [`LONG_TTL_MS`], which no retry could wait out (a batched
/// renewal inconclusive at load made the next round wait 15 s for that lease: an ERROR).
async fn expiries(p: &mut Prober<'_>, r3: Uuid, (a, b): (&str, &str)) -> Result<(), HarnessError> {
    let mut r3 = r3;
    let mut held_renew = false;
    let mut held_many = false;
    let mut held_takeover = false;
    for (attempt, ttl) in [SHORT_TTL_MS, 2_000, 5_000].into_iter().enumerate() {
        if !held_renew {
            held_renew = renewal_across_expiry(p, r3, a, ttl).await?;
        }
        if !held_many {
            held_many = batched_renewal_across_expiry(p, r3, a, ttl).await?;
        }
        if !held_takeover {
            let e = acquire_now(p, r3, a, ttl).await?;
            held_takeover = p
                .probe_held(
                    tags::LEASE_ACQUIRE_FREE_OR_EXPIRED,
                    "a takeover whose statement began before the expiry but runs after it succeeds (the lease has expired when it is checked)",
                    b,
                    &acquire(r3, b, LONG_TTL_MS, true),
                    &expiry(r3),
                    took(e + 1),
                    &[lease_key(r3)],
                )
                .await?
                .is_some();
        }
        if held_renew && held_many && held_takeover {
            return Ok(());
        }
        // A task of its own per retry: the last try's run stays live (one live run per task).
        r3 = p.new_run(&format!("task-pl-3-retry{}", attempt + 1)).await?;
    }
    Err(HarnessError::Inconclusive(
        "the expiry probes stayed inconclusive with a 5 s lease (a very loaded machine)".into(),
    ))
}

/// A renewal that runs after the expiry of a `ttl` lease is refused, and so is one of the expired
/// lease. False when inconclusive.
async fn renewal_across_expiry(p: &mut Prober<'_>, r3: Uuid, a: &str, ttl: i64) -> Result<bool, HarnessError> {
    let e = acquire_now(p, r3, a, ttl).await?;
    let rule = tags::LEASE_RENEW_UNEXPIRED;
    let held = p
        .probe_held(
            rule,
            "a renewal whose statement began before the expiry but runs after it is refused",
            a,
            &renew(r3, a, e, true),
            &expiry(r3),
            refused,
            &[],
        )
        .await?
        .is_some();
    if held {
        p.probe(rule, "renewing an expired lease is refused", a, &renew(r3, a, e, false), refused, &[]).await?;
    }
    Ok(held)
}

/// As [`renewal_across_expiry`], batched.
async fn batched_renewal_across_expiry(p: &mut Prober<'_>, r3: Uuid, a: &str, ttl: i64) -> Result<bool, HarnessError> {
    let e = acquire_now(p, r3, a, ttl).await?;
    let rule = tags::LEASE_RENEW_UNEXPIRED;
    let held = p
        .probe_held(
            rule,
            "a batched renewal that runs after the expiry is refused",
            a,
            &renew_many(a, &[r3], &[e], true),
            &expiry(r3),
            refused,
            &[],
        )
        .await?
        .is_some();
    if held {
        p.probe(
            rule,
            "a batched renewal of an expired lease is refused",
            a,
            &renew_many(a, &[r3], &[e], false),
            refused,
            &[],
        )
        .await?;
    }
    Ok(held)
}

/// Take `r`'s lease for `o` with `ttl` once it is free or expired; its epoch.
async fn acquire_now(p: &mut Prober<'_>, r: Uuid, o: &str, ttl: i64) -> Result<i64, HarnessError> {
    p.until(
        "the probe lease to be free or expired",
        &format!(
            "(SELECT owner IS NULL OR expires_at <= clock_timestamp() FROM worker_leases WHERE run_id = '{r}'::uuid)"
        ),
    )
    .await?;
    let a = p.call(o, &acquire(r, o, ttl, false)).await?;
    match a {
        Ok(rows) if rows.len() == 1 => Ok(rows[0]["epoch"].as_i64().unwrap_or(-1)),
        other => Err(HarnessError::StepRefused {
            step: format!("acquire of an expired lease by {o}"),
            answer: super::show(&other),
        }),
    }
}
