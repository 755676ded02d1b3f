//! A team's own Patroni (`failover.rest` in the contract): before a row switches the team's cluster
//! over, the run says in one line exactly what it would do (which node it would demote, which it
//! would promote, read from the cluster's REST API) and does it only with
//! `--yes-fail-over-this-cluster`.

use fenceproof_harness::contract::Contract;
use fenceproof_harness::db::patroni::rest::RestCluster;
use fenceproof_scenarios::experiment::Need;
use fenceproof_scenarios::Experiment;

/// `Ok` when no selected row fails over a team's cluster, or the flag was given; else the usage
/// exit code after the one line.
pub async fn fail_over(contract: Option<&Contract>, experiments: &[Experiment], yes: bool) -> Result<(), u8> {
    let Some(urls) = contract.and_then(Contract::patroni_rest) else { return Ok(()) };
    let rows: Vec<&str> = experiments.iter().filter(|e| e.needs(Need::PatroniSwitchover)).map(|e| e.id).collect();
    if rows.is_empty() {
        return Ok(());
    }
    let cluster = RestCluster::from_urls(&urls).map_err(crate::fail::usage)?;
    let what = match cluster.plan().await {
        Ok(plan) => plan.describe(),
        Err(e) => format!("switch over the Patroni cluster at {} (no plan now: {e})", urls.join(", ")),
    };
    if yes {
        eprintln!("fenceproof: {} will {what} (--yes-fail-over-this-cluster)", rows.join(", "));
        return Ok(());
    }
    Err(crate::fail::usage(format!(
        "{} would {what}, and leave the leader there; nothing done: pass --yes-fail-over-this-cluster to do it (docs/patroni.md)",
        rows.join(", ")
    )))
}
