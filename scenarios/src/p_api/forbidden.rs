//! The state table (spec §07) as the fenced functions must keep it, whatever a caller names: a
//! worker starts a pending run, saves a running one, and ends a running one as succeeded or failed;
//! cancelling belongs to the control plane, and a final run (succeeded, failed, cancelled) never
//! moves again and never gets a lease again. One run per status, each under a live lease of the
//! probing owner at its current revision, so nothing but the state table can refuse; then every
//! (from, to) pair the table does not give a worker is tried as the worker role, and a lease on
//! every final run once its holder let go.

use fenceproof_harness::HarnessError;
use uuid::Uuid;

use super::{lease_key, lit, outcome, owner, q, uuid, Answer, Prober, LONG_TTL_MS};
use crate::tags;

/// The run statuses of the schema.
pub const STATUSES: [&str; 5] = ["pending", "running", "succeeded", "failed", "cancelled"];

/// Whether the state table gives a worker the transition `from` -> `to`.
pub fn allowed(from: &str, to: &str) -> bool {
    matches!((from, to), ("pending", "running") | ("running", "running" | "succeeded" | "failed"))
}

/// Every (from, to) pair of statuses that the state table does not give a worker.
pub fn forbidden_pairs() -> Vec<(&'static str, &'static str)> {
    STATUSES.iter().flat_map(|f| STATUSES.iter().map(move |t| (*f, *t))).filter(|(f, t)| !allowed(f, t)).collect()
}

fn is_final(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "cancelled")
}

/// `fp_run_transition` with a checkpoint and no required result or intent.
fn transition(run: Uuid, who: &str, epoch: i64, expected: i64, from: &str, to: &str) -> String {
    let args = [
        uuid(run),
        lit(who),
        epoch.to_string(),
        expected.to_string(),
        lit(from),
        lit(to),
        "'{\"probe\": \"state-table\"}'::jsonb".into(),
    ];
    let nulls = ["NULL::text", "NULL::text", "NULL::text", "NULL::integer", "NULL::text", "NULL::text", "NULL::jsonb"];
    let all: Vec<String> = args.into_iter().chain(nulls.iter().map(|s| s.to_string())).collect();
    q("fp_run_transition", &all, false)
}

/// A setup step the probes rely on: it must be answered `ok`.
async fn step(p: &Prober<'_>, who: &str, what: &str, sql: &str) -> Result<(), HarnessError> {
    match p.call(who, sql).await? {
        Ok(rows) if rows.len() == 1 && (rows[0]["outcome"] == "ok" || rows[0]["epoch"].is_i64()) => Ok(()),
        other => Err(HarnessError::StepRefused { step: what.into(), answer: super::show(&other) }),
    }
}

/// A run in `status` under a live lease of `who` (epoch 1), and its revision.
async fn run_in(p: &Prober<'_>, who: &str, status: &str) -> Result<(Uuid, i64), HarnessError> {
    let run = p.new_run(&format!("task-pc-table-{status}")).await?;
    let acquire = q("fp_lease_acquire", &[uuid(run), lit(who), LONG_TTL_MS.to_string()], false);
    step(p, who, "acquire", &acquire).await?;
    if status != "pending" {
        step(p, who, "start", &transition(run, who, 1, 0, "pending", "running")).await?;
    }
    match status {
        "succeeded" | "failed" => step(p, who, status, &transition(run, who, 1, 1, "running", status)).await?,
        "cancelled" => {
            fenceproof_protocol::runs::cancel(&p.ctx.pool, run)
                .await
                .map_err(|e| HarnessError::Other(format!("cancel by the control plane: {e}")))?;
        }
        _ => {}
    }
    let rev: i64 = sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1")
        .bind(run)
        .fetch_one(&p.ctx.pool)
        .await?;
    Ok((run, rev))
}

/// Every forbidden pair refused as `forbidden_transition` with nothing changed, and no lease taken
/// on a final run.
pub async fn probe_all(p: &mut Prober<'_>) -> Result<(), HarnessError> {
    let a = owner("table");
    let mut runs = Vec::new();
    for status in STATUSES {
        runs.push((status, run_in(p, &a, status).await?));
    }
    for (from, to) in forbidden_pairs() {
        let (run, rev) = runs.iter().find(|(s, _)| *s == from).map(|(_, r)| *r).unwrap_or_default();
        let rule = if is_final(from) { tags::RUNS_TERMINAL_FINAL } else { tags::RUNS_TRANSITION_FROM_STATE };
        let what =
            format!("the lease holder's {from} -> {to} at the current revision is refused as forbidden_transition");
        let ok = |a: &Answer| outcome(a) == "forbidden_transition";
        p.probe(rule, &what, &a, &transition(run, &a, 1, rev, from, to), ok, &[]).await?;
    }
    let b = owner("after");
    for (status, (run, _)) in runs.iter().filter(|(s, _)| is_final(s)) {
        let release = q("fp_lease_release", &[uuid(*run), lit(&a), "1".into()], false);
        p.probe(
            tags::LEASE_RELEASE_OWNER_EPOCH,
            "the holder releases a final run's lease",
            &a,
            &release,
            |x| matches!(x, Ok(rows) if rows.len() == 1 && rows[0].as_i64() == Some(1)),
            &[lease_key(*run)],
        )
        .await?;
        let acquire = q("fp_lease_acquire", &[uuid(*run), lit(&b), LONG_TTL_MS.to_string()], false);
        let what = format!("a lease on a {status} run, free now, is refused (no row)");
        p.probe(tags::RUNS_TERMINAL_FINAL, &what, &b, &acquire, super::refused, &[]).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_a_worker_four_transitions_and_forbids_the_other_twenty_one() {
        assert_eq!(forbidden_pairs().len(), 21);
        for f in ["succeeded", "failed", "cancelled"] {
            assert!(STATUSES.iter().all(|t| !allowed(f, t)), "{f} is final");
        }
        assert!(STATUSES.iter().all(|f| !allowed(f, "cancelled")), "only the control plane cancels");
        assert!(allowed("pending", "running") && !allowed("pending", "succeeded") && !allowed("running", "pending"));
    }
}
