//! The spec's acceptance experiments (section 11) on top of the harness, and the runner that puts
//! them into a matrix. Each experiment reads as setup, fault, check, and gets a fresh database
//! cloned from the migrated template, so order never matters.

pub mod a_continuous_checkpoints;
pub mod answers;
pub mod b_database_freeze;
pub mod b_old_owner_resumes;
pub mod c_same_epoch_reorder;
pub mod ctx;
pub mod d_race_after_validation;
pub mod e_remote_success_then_crash;
pub mod e_unverified_answers;
pub mod f_cancel_race;
pub mod frozen_clock;
pub mod g_retry_isolation;
pub mod h_failover;
pub mod h_lease_params;
pub mod i_lost_ack;
pub mod j_partition;
pub mod k_clock_jump;
pub mod l_rollout;
pub mod m_redis_prefilter;
pub mod n_restore;
pub mod outbox_setup;
pub mod p_api;
pub mod p_role_boundary;
pub mod p_secret_masking;
pub mod preflight;
pub mod runner;
pub mod w_boundaries;

use std::future::Future;
use std::pin::Pin;

use fenceproof_harness::HarnessError;

pub type ExperimentFuture<'a> = Pin<Box<dyn Future<Output = Result<(), HarnessError>> + 'a>>;

/// One experiment of the matrix.
#[derive(Debug)]
pub struct Experiment {
    /// The spec's letter (suffixes for variants).
    pub id: &'static str,
    pub title: &'static str,
    pub run: for<'a> fn(&'a mut ctx::Ctx) -> ExperimentFuture<'a>,
}

/// Every experiment, in the spec's order.
pub fn all() -> Vec<Experiment> {
    use e_remote_success_then_crash::Stop;
    use f_cancel_race::At;
    use fenceproof_harness::contract::ReplicationMode;
    use fenceproof_harness::faults::PauseKind;
    let x = |id, title, run: for<'a> fn(&'a mut ctx::Ctx) -> ExperimentFuture<'a>| Experiment { id, title, run };
    vec![
        x("A", a_continuous_checkpoints::TITLE, |c| Box::pin(a_continuous_checkpoints::run(c))),
        x("B-sigstop", b_old_owner_resumes::TITLE, |c| {
            Box::pin(b_old_owner_resumes::run(c, false, PauseKind::Sigstop))
        }),
        x("B-freeze", b_old_owner_resumes::TITLE_FREEZE, |c| {
            Box::pin(b_old_owner_resumes::run(c, false, PauseKind::Freeze))
        }),
        x("B-dbfreeze", b_database_freeze::TITLE, |c| Box::pin(b_database_freeze::run(c))),
        x("B-same-owner", b_old_owner_resumes::TITLE_SAME_OWNER, |c| {
            Box::pin(b_old_owner_resumes::run(c, true, PauseKind::Sigstop))
        }),
        x("C", c_same_epoch_reorder::TITLE, |c| Box::pin(c_same_epoch_reorder::run(c))),
        x("D", d_race_after_validation::TITLE, |c| Box::pin(d_race_after_validation::run(c))),
        x("E-idem", e_remote_success_then_crash::TITLE, |c| {
            Box::pin(e_remote_success_then_crash::run(c, "idem", Stop::Kill))
        }),
        x("E-detid", e_remote_success_then_crash::TITLE, |c| {
            Box::pin(e_remote_success_then_crash::run(c, "detid", Stop::Kill))
        }),
        x("E-opquery", e_remote_success_then_crash::TITLE, |c| {
            Box::pin(e_remote_success_then_crash::run(c, "opquery", Stop::Kill))
        }),
        x("E-plain", e_remote_success_then_crash::TITLE, |c| {
            Box::pin(e_remote_success_then_crash::run(c, "plain", Stop::Kill))
        }),
        x("E-idem-pause", e_remote_success_then_crash::TITLE, |c| {
            Box::pin(e_remote_success_then_crash::run(c, "idem", Stop::Pause))
        }),
        x("E-no-answer", e_unverified_answers::TITLE_NO_ANSWER, |c| Box::pin(e_unverified_answers::no_answer(c))),
        x("E-conflict", e_unverified_answers::TITLE_CONFLICT, |c| Box::pin(e_unverified_answers::conflict(c))),
        x("E-replan", e_unverified_answers::TITLE_REPLAN, |c| Box::pin(e_unverified_answers::replan(c))),
        x("F-prepared", f_cancel_race::TITLE, |c| Box::pin(f_cancel_race::run(c, At::Prepared))),
        x("F-dispatching", f_cancel_race::TITLE, |c| Box::pin(f_cancel_race::run(c, At::Dispatching))),
        x("F-unknown", f_cancel_race::TITLE, |c| Box::pin(f_cancel_race::run(c, At::Unknown))),
        x("G", g_retry_isolation::TITLE, |c| Box::pin(g_retry_isolation::run(c))),
        x("H-async", h_failover::TITLE, |c| Box::pin(h_failover::run(c, ReplicationMode::Async))),
        x("H-sync", h_failover::TITLE, |c| Box::pin(h_failover::run(c, ReplicationMode::Sync))),
        x("H-lease", h_lease_params::TITLE, |c| Box::pin(h_lease_params::run(c))),
        x("I-save", i_lost_ack::TITLE_SAVE, |c| Box::pin(i_lost_ack::save(c))),
        x("I-terminal", i_lost_ack::TITLE_TERMINAL, |c| Box::pin(i_lost_ack::terminal(c))),
        x("I-renew", i_lost_ack::TITLE_RENEW, |c| Box::pin(i_lost_ack::renew(c))),
        x("J-partition", j_partition::TITLE, |c| Box::pin(j_partition::run(c))),
        x("K-forward", k_clock_jump::TITLE_FORWARD, |c| Box::pin(k_clock_jump::forward(c))),
        x("K-backward", k_clock_jump::TITLE_BACKWARD, |c| Box::pin(k_clock_jump::backward(c))),
        x("L-rollout", l_rollout::TITLE, |c| Box::pin(l_rollout::run(c))),
        x("M-redis-expiry", m_redis_prefilter::TITLE_EXPIRY, |c| {
            Box::pin(m_redis_prefilter::run(c, m_redis_prefilter::Loss::Expiry))
        }),
        x("M-redis-restart", m_redis_prefilter::TITLE_RESTART, |c| {
            Box::pin(m_redis_prefilter::run(c, m_redis_prefilter::Loss::Restart))
        }),
        x("N-restore", n_restore::TITLE, |c| Box::pin(n_restore::run(c))),
        x("P-role", p_role_boundary::TITLE, |c| Box::pin(p_role_boundary::run(c))),
        x("P-secret", p_secret_masking::TITLE, |c| Box::pin(p_secret_masking::run(c))),
        x("P-api-lease", p_api::lease::TITLE, |c| Box::pin(p_api::lease::run(c))),
        x("P-api-commit", p_api::commit::TITLE, |c| Box::pin(p_api::commit::run(c))),
        x("P-api-ledger", p_api::ledger::TITLE, |c| Box::pin(p_api::ledger::run(c))),
        x("P-api-clock", p_api::clock::TITLE, |c| Box::pin(p_api::clock::run(c))),
        x("W-lease", w_boundaries::lease::TITLE, |c| Box::pin(w_boundaries::lease::run(c))),
        x("W-commit", w_boundaries::commit::TITLE, |c| Box::pin(w_boundaries::commit::run(c))),
        x("W-ledger", w_boundaries::ledger::TITLE, |c| Box::pin(w_boundaries::ledger::run(c))),
        x("W-clock", w_boundaries::clock::TITLE, |c| Box::pin(w_boundaries::clock::run(c))),
        x("W-control", w_boundaries::control::TITLE, |c| Box::pin(w_boundaries::control::run(c))),
    ]
}

/// The experiments named in `only` (case-insensitive ids; a bare letter such as `B` names every
/// row of its family: B-sigstop, B-freeze, B-dbfreeze, B-same-owner), or all of them.
pub fn select(only: Option<&[String]>) -> Result<Vec<Experiment>, String> {
    let all = all();
    let Some(only) = only else { return Ok(all) };
    let matches = |want: &str, id: &str| {
        id.eq_ignore_ascii_case(want)
            || (id.len() > want.len() + 1
                && id[..want.len()].eq_ignore_ascii_case(want)
                && id.as_bytes()[want.len()] == b'-'
                && !all_ids().iter().any(|k| k.eq_ignore_ascii_case(want)))
    };
    let known: Vec<&str> = all.iter().map(|e| e.id).collect();
    for want in only {
        if !known.iter().any(|k| matches(want, k)) {
            return Err(format!("unknown experiment '{want}' (known: {})", known.join(", ")));
        }
    }
    Ok(all.into_iter().filter(|e| only.iter().any(|w| matches(w, e.id))).collect())
}

fn all_ids() -> Vec<&'static str> {
    all().iter().map(|e| e.id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_of_the_catalogue_names_experiments_that_exist() {
        let ids = all_ids();
        for r in fenceproof_harness::check::catalogue::RULES {
            for e in r.experiments {
                assert!(ids.contains(e), "rule {} names experiment {e}, which does not exist", r.id);
            }
        }
        // And every experiment exercises at least one rule.
        for id in &ids {
            assert!(
                fenceproof_harness::check::catalogue::RULES.iter().any(|r| r.experiments.contains(id)),
                "experiment {id} exercises no rule of the catalogue"
            );
        }
    }

    #[test]
    fn selection_is_case_insensitive_and_rejects_unknown_ids() {
        let picked = select(Some(&["b-sigstop".to_string(), "C".to_string()])).unwrap();
        assert_eq!(picked.iter().map(|e| e.id).collect::<Vec<_>>(), vec!["B-sigstop", "C"]);
        let family = select(Some(&["B".to_string()])).unwrap();
        assert_eq!(
            family.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec!["B-sigstop", "B-freeze", "B-dbfreeze", "B-same-owner"]
        );
        let h = select(Some(&["h-lease".to_string()])).unwrap();
        assert_eq!(h.iter().map(|e| e.id).collect::<Vec<_>>(), vec!["H-lease"]);
        assert!(select(Some(&["Z".to_string()])).unwrap_err().contains("unknown experiment 'Z'"));
        assert_eq!(select(None).unwrap().len(), all().len());
    }
}
