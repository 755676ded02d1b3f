//! H-patroni-partition: the split-brain window of section 10 under Patroni. The leader is cut off
//! etcd (its etcd proxy drops every connection) while worker A, connected to it, keeps saving
//! checkpoints. Patroni on the old leader should demote it once it cannot renew the leader key;
//! the replica is promoted once the key expires. The row records every save A got acknowledged by
//! the old leader and the moment the new leader first took a write (the harness's probe), and
//! judges that the old leader acknowledged nothing after that moment. Opt-in, as the other
//! Patroni rows.

use std::time::{Duration, Instant};

use fenceproof_harness::check::Check;
use fenceproof_harness::contract::ReplicationMode;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use serde_json::json;
use tokio::sync::watch;

use super::pair::{Pair, Servers};
use super::{snapshot, start_task, wait_caught_up};
use crate::ctx::{outcome, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "H-patroni-partition",
    title: "Failover under Patroni: the leader is cut off etcd while a worker still writes to it",
    section: "11 H; 10",
    needs: &[Need::Patroni(ReplicationMode::Async)],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The name of its check.
pub const NO_SPLIT_BRAIN: &str = "split brain: the old leader acknowledged no write after the new leader took writes";

/// How long A keeps writing to the old leader after the new leader took its first write.
const AFTER_PROMOTION: Duration = Duration::from_secs(5);

/// One save A sent to the old leader: its number (`checkpoint.n`), when it was answered (since
/// the fault) and whether it was acknowledged.
pub(super) struct Save {
    pub n: u64,
    /// The worker's outcome word (or the harness's error when the request itself failed).
    pub outcome: String,
    pub at: Duration,
    pub ok: bool,
}

async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let contract = super::patroni::contract_for(ctx, ReplicationMode::Async);
    let settings = contract.patroni().expect("a Patroni contract");
    let mut servers: Servers = super::patroni::start(ctx, settings, ReplicationMode::Async).await?;
    let tools = ctx.spawn_tools().await?;
    let mut task = start_task(ctx, &servers.url, &tools).await?;
    wait_caught_up(&servers.p_pool, &servers.s_pool).await?;
    let Pair::Patroni(m) = &mut servers.pair else { unreachable!("the Patroni pair") };
    let t0 = Instant::now();
    m.partition_leader(ctx);
    let (tx, rx) = watch::channel(None::<Duration>);
    let (saves, promoted) = tokio::join!(keep_saving(&mut task.a, rx, t0), async {
        let r = m.await_promotion(ctx).await;
        let _ = tx.send(Some(t0.elapsed()));
        r
    });
    let (n_pool, _) = promoted?;
    let promoted_at = m.promoted_after().unwrap_or_default();
    let acked: Vec<&Save> = saves.iter().filter(|s| s.ok).collect();
    let late = acknowledged_after(&saves, promoted_at);
    let last_ack = acked.last().map(|s| s.at.as_secs_f64());
    let after = snapshot(&n_pool, task.run_id).await?;
    ctx.check(Check::expect(
        NO_SPLIT_BRAIN,
        late.is_empty(),
        format!(
            "new leader writable {:.1} s after the partition; the old leader acknowledged {} of {} saves, the last at {}, after the promotion: {late:?}",
            promoted_at.as_secs_f64(),
            acked.len(),
            saves.len(),
            last_ack.map(|t| format!("{t:.1} s")).unwrap_or_else(|| "never".into()),
        ),
    ));
    let rows = oracle::commits_in(&n_pool, oracle::DEFAULT_SCHEMA).await?;
    std::fs::write(ctx.dir.join("oracle.json"), serde_json::to_string_pretty(&rows).expect("json"))?;
    ctx.invariants.control.push(task.cp.owner.clone());
    let record = json!({
        "partition_to_writable_s": promoted_at.as_secs_f64(), "saves": saves.iter().map(|s| json!({"n": s.n, "at_s": s.at.as_secs_f64(), "acknowledged": s.ok, "outcome": s.outcome})).collect::<Vec<_>>(),
        "acknowledged_after_promotion_s": late, "after_on_new_leader": after,
    });
    std::fs::write(ctx.dir.join("partition.json"), serde_json::to_string_pretty(&record).expect("json"))?;
    ctx.note(format!(
        "Patroni, leader cut off etcd: the replica took writes {:.1} s later; the old leader acknowledged {} save(s), the last at {}; {} after the promotion; revision {} on the new leader",
        promoted_at.as_secs_f64(),
        acked.len(),
        last_ack.map(|t| format!("{t:.1} s")).unwrap_or_else(|| "never".into()),
        late.len(),
        after.revision,
    ));
    for w in [&mut task.a, &mut task.b, &mut task.d, &mut task.cp] {
        w.kill().await?;
    }
    n_pool.close().await;
    servers.s_pool.close().await;
    super::patroni::stop_and_judge(ctx, &mut servers.pair);
    Ok(())
}

/// The saves the old leader acknowledged after `promoted` (seconds since the partition): each one
/// is a write of a split brain.
pub(super) fn acknowledged_after(saves: &[Save], promoted: Duration) -> Vec<f64> {
    saves.iter().filter(|s| s.ok && s.at > promoted).map(|s| s.at.as_secs_f64()).collect()
}

/// A saves checkpoints to the old leader, one after another, until `AFTER_PROMOTION` past the
/// moment `promoted` carries (or, bounded, a minute and a half).
pub(super) async fn keep_saving(
    a: &mut WorkerProc,
    promoted: watch::Receiver<Option<Duration>>,
    t0: Instant,
) -> Vec<Save> {
    let mut saves = Vec::new();
    let mut n = 0;
    while t0.elapsed() < Duration::from_secs(90) {
        if let Some(p) = *promoted.borrow() {
            if t0.elapsed() > p + AFTER_PROMOTION {
                break;
            }
        }
        n += 1;
        let answer = a.request(json!({"cmd": "save", "checkpoint": {"n": n}}), STEP).await;
        let word = match &answer {
            Ok(v) => outcome(v).to_string(),
            Err(e) => format!("no answer: {e}"),
        };
        saves.push(Save { n, ok: word == "ok", outcome: word, at: t0.elapsed() });
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    saves
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acknowledgement_after_the_promotion_is_a_split_brain_and_a_refusal_is_not() {
        let at = |ms| Duration::from_millis(ms);
        let saves = [
            Save { n: 1, outcome: "ok".into(), at: at(500), ok: true },
            Save { n: 2, outcome: "outcome_unknown".into(), at: at(9000), ok: false },
            Save { n: 3, outcome: "ok".into(), at: at(21_000), ok: true },
        ];
        assert_eq!(acknowledged_after(&saves, at(20_000)), vec![21.0]);
        assert!(acknowledged_after(&saves[..2], at(20_000)).is_empty());
        assert!(acknowledged_after(&saves, at(30_000)).is_empty());
    }
}
