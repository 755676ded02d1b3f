//! P-api-team: the team's own fenced lease functions, named by the deployment contract
//! (`[database.functions]`, [`fenceproof_harness::db::team_functions`]), probed at each rule's
//! boundary as P-api-lease probes `fp_lease_*`. A rogue session with the worker's login (the direct
//! login on the direct path) calls them with a live lease of another owner, a terminal run, stale,
//! future and forged terms and an expired lease; each probe is judged from the database alone: the
//! protocol rows that changed must be exactly those the rule allows, whatever the function answers
//! (a row, a count, nothing, or an error). The harness sets each lease up itself as the control
//! plane, so every operation is probed on its own.

use std::collections::BTreeMap;

use fenceproof_harness::check::Check;
use fenceproof_harness::db::databases;
use fenceproof_harness::db::team_functions::{self, TeamFunction};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::WritePath;
use uuid::Uuid;

use super::{lease_key, lit, owner, uuid, Answer, Prober, LONG_TTL_MS};
use crate::ctx::{Ctx, WORKER_LOGIN_EXISTS};
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::tags::{self, tagged};

pub const TITLE: &str = "The team's own lease functions (contract [database.functions]) probed at each rule's boundary";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-api-team",
    title: TITLE,
    section: "05, 12",
    needs: &[Need::WorkerLogin, Need::TeamFunctions],
    judges: Judges::Functions,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

fn any(_: &Answer) -> bool {
    true
}

fn answered(a: &Answer) -> bool {
    a.is_ok()
}

/// The mapped functions, the probes' login and the SQL literal of each argument word.
struct Team {
    f: BTreeMap<String, TeamFunction>,
}

impl Team {
    fn call(&self, op: &str, run: Uuid, owner: &str, epoch: i64) -> String {
        let values: BTreeMap<&str, String> = [
            ("run_id", uuid(run)),
            ("owner", lit(owner)),
            ("epoch", epoch.to_string()),
            ("ttl_ms", LONG_TTL_MS.to_string()),
        ]
        .into();
        self.f[op].call(&values)
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let mapped = ctx.contract.as_ref().map(|c| team_functions::parse_all(&c.database.functions));
    let f = match mapped {
        Some(Ok(f)) if !f.is_empty() => f,
        _ => return Err(HarnessError::Other(
            "P-api-team probes the functions a contract's [database.functions] names; this run's contract names none"
                .into(),
        )),
    };
    let login = match (&ctx.worker_login, ctx.write_path) {
        (Some(l), WritePath::Direct) => databases::url_as(l, databases::DIRECT_LOGIN)?,
        (Some(l), WritePath::Api) => l.clone(),
        (None, _) => {
            ctx.check(Check::fail(WORKER_LOGIN_EXISTS, "this backend gives the harness no worker login"));
            return Ok(());
        }
    };
    let names: Vec<String> = f.iter().map(|(op, t)| format!("{op} = {}", t.name)).collect();
    ctx.note(format!("the team's functions: {}", names.join(", ")));
    let team = Team { f };
    let mut p = Prober::with_login(ctx, login);
    let runs = [p.new_run("task-pt-1").await?, p.new_run("task-pt-2").await?, p.new_run("task-pt-3").await?];
    let terminal = p.new_run("task-pt-4").await?;
    p.admin(&format!(
        "UPDATE agent_runs SET status = 'cancelled', revision = revision + 1 WHERE run_id = '{terminal}'"
    ))
    .await?;
    let (a, b) = (owner("a"), owner("b"));
    acquires(&mut p, &team, (runs[0], terminal), (&a, &b)).await?;
    renewals(&mut p, &team, (runs[0], runs[2]), (&a, &b)).await?;
    releases(&mut p, &team, runs[1], (&a, &b)).await?;
    p.finish().await
}

/// The control plane releases `run`'s lease and hands it to `owner` at the next epoch, live for
/// [`LONG_TTL_MS`] (as every takeover, a free lease, epoch + 1); returns that epoch.
async fn hold(p: &Prober<'_>, run: Uuid, owner: &str) -> Result<i64, HarnessError> {
    // Released first: a takeover, the control plane's too, takes only a free or expired lease.
    p.admin(&format!(
        "UPDATE worker_leases SET owner = NULL, expires_at = clock_timestamp(), updated_at = clock_timestamp()
          WHERE run_id = '{run}' AND owner IS NOT NULL"
    ))
    .await?;
    Ok(sqlx::query_scalar(
        "UPDATE worker_leases SET owner = $2, epoch = epoch + 1, updated_at = clock_timestamp(),
                expires_at = clock_timestamp() + $3 * interval '1 millisecond' WHERE run_id = $1 RETURNING epoch",
    )
    .bind(run)
    .bind(owner)
    .bind(LONG_TTL_MS as f64)
    .fetch_one(&p.ctx.pool)
    .await?)
}

/// The lease of `run` as (owner, epoch).
async fn lease(p: &Prober<'_>, run: Uuid) -> Result<(Option<String>, i64), HarnessError> {
    Ok(sqlx::query_as("SELECT owner, epoch FROM worker_leases WHERE run_id = $1")
        .bind(run)
        .fetch_one(&p.ctx.pool)
        .await?)
}

/// Acquire takes a free lease at epoch + 1 under its owner, never a live one of another owner, and
/// never the lease of a terminal run.
async fn acquires(
    p: &mut Prober<'_>,
    t: &Team,
    (r1, done): (Uuid, Uuid),
    (a, b): (&str, &str),
) -> Result<(), HarnessError> {
    let rule = tags::LEASE_ACQUIRE_FREE_OR_EXPIRED;
    p.probe(
        rule,
        "acquiring a free lease takes that lease only",
        a,
        &t.call("acquire", r1, a, 0),
        answered,
        &[lease_key(r1)],
    )
    .await?;
    let got = lease(p, r1).await?;
    p.ctx.check(Check::equal(
        tagged(rule, "the acquired lease is at epoch 1 under its owner"),
        got,
        (Some(a.to_string()), 1),
    ));
    p.probe(
        rule,
        "acquiring a live lease held by another owner changes nothing",
        b,
        &t.call("acquire", r1, b, 0),
        any,
        &[],
    )
    .await?;
    p.probe(
        tags::RUNS_TERMINAL_FINAL,
        "acquiring the lease of a cancelled run changes nothing",
        a,
        &t.call("acquire", done, a, 0),
        any,
        &[],
    )
    .await
}

/// Renew extends only the named lease whose owner and epoch match, and only before it expires.
async fn renewals(
    p: &mut Prober<'_>,
    t: &Team,
    (r1, r3): (Uuid, Uuid),
    (a, b): (&str, &str),
) -> Result<(), HarnessError> {
    let rule = tags::LEASE_RENEW_OWNER_EPOCH;
    let e = hold(p, r1, a).await?;
    while hold(p, r3, a).await? < e {}
    for (what, who, epoch) in [
        ("renewing with a stale epoch changes nothing", a, e - 1),
        ("renewing with a future epoch changes nothing", a, e + 1),
        ("renewing under another owner id with the current epoch changes nothing", b, e),
    ] {
        p.probe(rule, what, who, &t.call("renew", r1, who, epoch), any, &[]).await?;
    }
    let what = "renewing extends the named lease only (the owner holds another at the same epoch)";
    p.probe(rule, what, a, &t.call("renew", r1, a, e), answered, &[lease_key(r1)]).await?;
    p.admin(&format!(
        "UPDATE worker_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE run_id = '{r3}'"
    ))
    .await?;
    let what = "renewing an expired lease, owner and epoch matching, changes nothing";
    p.probe(tags::LEASE_RENEW_UNEXPIRED, what, a, &t.call("renew", r3, a, e), any, &[]).await
}

/// Release frees only the named lease under owner + epoch, and keeps its epoch.
async fn releases(p: &mut Prober<'_>, t: &Team, r2: Uuid, (a, b): (&str, &str)) -> Result<(), HarnessError> {
    let rule = tags::LEASE_RELEASE_OWNER_EPOCH;
    let e = hold(p, r2, a).await?;
    p.probe(rule, "releasing with a stale epoch changes nothing", a, &t.call("release", r2, a, e - 1), any, &[])
        .await?;
    p.probe(rule, "releasing under another owner id changes nothing", b, &t.call("release", r2, b, e), any, &[])
        .await?;
    let what = "releasing frees the named lease only";
    p.probe(tags::LEASE_RELEASE_KEEPS_EPOCH, what, a, &t.call("release", r2, a, e), answered, &[lease_key(r2)]).await?;
    let got = lease(p, r2).await?;
    let what = "the released lease is free and keeps its epoch";
    p.ctx.check(Check::equal(tagged(tags::LEASE_RELEASE_KEEPS_EPOCH, what), got, (None, e)));
    Ok(())
}
