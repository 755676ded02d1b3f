//! The spec's acceptance experiments (section 11) on top of the harness, and the runner that puts
//! them into a matrix. Each experiment reads as setup, fault, check, and gets a fresh database
//! cloned from the migrated template, so order never matters.

pub mod a_continuous_checkpoints;
pub mod answers;
pub mod b_database_freeze;
pub mod b_loss_while_running;
pub mod b_old_owner_resumes;
pub mod binaries;
pub mod c_same_epoch_reorder;
pub mod catalogue;
pub mod coverage;
pub mod ctx;
pub mod d_race_after_validation;
pub mod e_crash_between_commits;
pub mod e_remote_success_then_crash;
pub mod e_unverified_answers;
pub mod experiment;
pub mod f_cancel_race;
pub mod frozen_clock;
pub mod g_retry_isolation;
pub mod h_failover;
pub mod h_lease_params;
pub mod i_lost_ack;
pub mod invariants_judge;
pub mod j_partition;
pub mod jobs;
pub mod k_clock_jump;
pub mod l_rollout;
pub mod lock_waits;
pub mod m_redis_prefilter;
pub mod measured;
pub mod model_paths;
pub mod n_restore;
pub mod outbox_setup;
pub mod own_server;
pub mod p_api;
pub mod p_role_boundary;
pub mod p_secret_masking;
pub mod preflight;
pub mod reproduce;
pub mod row_times;
pub mod runner;
pub mod s_serialization;
pub mod tags;
pub mod trace_check;
pub mod unreached;
pub mod w_boundaries;
pub mod worker_paths;

pub use experiment::{Experiment, ExperimentFuture};

/// Every experiment, in the spec's order: one registration line each.
pub fn all() -> Vec<Experiment> {
    vec![
        a_continuous_checkpoints::EXPERIMENT,
        b_old_owner_resumes::SIGSTOP,
        b_old_owner_resumes::FREEZE,
        b_database_freeze::EXPERIMENT,
        b_old_owner_resumes::SAME_OWNER,
        b_loss_while_running::EXPERIMENT,
        c_same_epoch_reorder::EXPERIMENT,
        d_race_after_validation::EXPERIMENT,
        e_remote_success_then_crash::IDEM,
        e_remote_success_then_crash::DETID,
        e_remote_success_then_crash::OPQUERY,
        e_remote_success_then_crash::PLAIN,
        e_remote_success_then_crash::IDEM_PAUSE,
        e_crash_between_commits::EXPERIMENT,
        e_unverified_answers::NO_ANSWER,
        e_unverified_answers::CONFLICT,
        e_unverified_answers::REPLAN,
        f_cancel_race::PREPARED,
        f_cancel_race::DISPATCHING,
        f_cancel_race::UNKNOWN,
        g_retry_isolation::EXPERIMENT,
        h_failover::ASYNC,
        h_failover::SYNC,
        h_failover::patroni::ASYNC,
        h_failover::patroni::SYNC,
        h_failover::patroni::CRASH_ASYNC,
        h_failover::patroni::CRASH_SYNC,
        h_failover::partition::EXPERIMENT,
        h_failover::switchover::EXPERIMENT,
        h_lease_params::EXPERIMENT,
        i_lost_ack::SAVE,
        i_lost_ack::TERMINAL,
        i_lost_ack::RENEW,
        j_partition::EXPERIMENT,
        s_serialization::EXPERIMENT,
        k_clock_jump::FORWARD,
        k_clock_jump::BACKWARD,
        l_rollout::EXPERIMENT,
        m_redis_prefilter::REDIS_EXPIRY,
        m_redis_prefilter::REDIS_RESTART,
        n_restore::EXPERIMENT,
        worker_paths::EXPERIMENT,
        model_paths::EXPERIMENT,
        p_role_boundary::EXPERIMENT,
        p_secret_masking::EXPERIMENT,
        p_api::lease::EXPERIMENT,
        p_api::commit::EXPERIMENT,
        p_api::ledger::EXPERIMENT,
        p_api::clock::EXPERIMENT,
        p_api::team::EXPERIMENT,
        w_boundaries::lease::EXPERIMENT,
        w_boundaries::commit::EXPERIMENT,
        w_boundaries::ledger::EXPERIMENT,
        w_boundaries::clock::EXPERIMENT,
        w_boundaries::clock_behind::EXPERIMENT,
        w_boundaries::control::EXPERIMENT,
    ]
}

/// The experiment that performs the operator step operator-side mutant `m` breaks, if any.
pub fn operator_experiment(m: fenceproof_protocol::mutant::Mutant) -> Option<Experiment> {
    all().into_iter().find(|e| e.operator_of.contains(&m))
}

/// Ids that were renamed: each old spelling with the id of the row it names now.
pub const RENAMED: &[(&str, &str)] = &[(model_paths::FORMER_ID, model_paths::EXPERIMENT.id)];

/// The id of the row that `want` (case-insensitive) named before it was renamed, if it is an old
/// spelling.
pub fn renamed(want: &str) -> Option<&'static str> {
    RENAMED.iter().find(|(old, _)| old.eq_ignore_ascii_case(want)).map(|(_, new)| *new)
}

/// The experiments named in `only` (case-insensitive ids, old spellings of renamed ones included;
/// a family, the part of an id before its first `-` such as `B`, names every row of the family:
/// B-sigstop, B-freeze, B-dbfreeze, B-same-owner; so does a longer prefix such as `P-api`), or
/// all of them.
pub fn select(only: Option<&[String]>) -> Result<Vec<Experiment>, String> {
    let all = all();
    // The opt-in rows (Patroni's) run only when `--only` names them.
    let Some(only) = only else { return Ok(all.into_iter().filter(|e| !e.opt_in()).collect()) };
    let only: Vec<String> = only.iter().map(|w| renamed(w).map_or_else(|| w.clone(), str::to_string)).collect();
    let matches = |want: &str, id: &str| {
        id.eq_ignore_ascii_case(want)
            || (id.len() > want.len() + 1
                && id[..want.len()].eq_ignore_ascii_case(want)
                && id.as_bytes()[want.len()] == b'-'
                && !all_ids().iter().any(|k| k.eq_ignore_ascii_case(want)))
    };
    let known: Vec<&str> = all.iter().map(|e| e.id).collect();
    for want in &only {
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
    fn selection_is_case_insensitive_and_rejects_unknown_ids() {
        use b_old_owner_resumes::{FREEZE, SAME_OWNER, SIGSTOP};
        let picked = select(Some(&[SIGSTOP.id.to_lowercase(), c_same_epoch_reorder::EXPERIMENT.id.into()])).unwrap();
        assert_eq!(
            picked.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![SIGSTOP.id, c_same_epoch_reorder::EXPERIMENT.id]
        );
        // A bare family letter names every row of the family.
        let family = select(Some(&[SIGSTOP.id[..1].to_string()])).unwrap();
        let ids = family.iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(
            ids,
            vec![
                SIGSTOP.id,
                FREEZE.id,
                b_database_freeze::EXPERIMENT.id,
                SAME_OWNER.id,
                b_loss_while_running::EXPERIMENT.id
            ]
        );
        let h = select(Some(&[h_lease_params::EXPERIMENT.id.to_lowercase()])).unwrap();
        assert_eq!(h.iter().map(|e| e.id).collect::<Vec<_>>(), vec![h_lease_params::EXPERIMENT.id]);
        assert!(select(Some(&["Z".to_string()])).unwrap_err().contains("unknown experiment 'Z'"));
        assert_eq!(select(None).unwrap().len(), all().iter().filter(|e| !e.opt_in()).count());
        assert!(all().iter().any(|e| e.opt_in()), "the Patroni rows are opt-in");
    }

    /// A family is the part of an id before its first `-`, and no two families share it: `M` is
    /// the Redis pre-filter rows alone, the model's paths are a family of their own, and the old
    /// spelling of a renamed id still selects its row.
    #[test]
    fn a_family_selects_its_own_rows_only() {
        let family = |id: &str| id.split('-').next().unwrap().to_string();
        let redis = [m_redis_prefilter::REDIS_EXPIRY.id, m_redis_prefilter::REDIS_RESTART.id];
        let picked = select(Some(&[family(redis[0])])).unwrap();
        assert_eq!(picked.iter().map(|e| e.id).collect::<Vec<_>>(), redis);
        assert_ne!(family(model_paths::EXPERIMENT.id), family(redis[0]), "the model's paths are not a Redis row");
        // `Model` is the model's paths: driving the worker, and probing the database's functions.
        let paths = select(Some(&[family(model_paths::EXPERIMENT.id)])).unwrap();
        let ids = paths.iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(ids, vec![worker_paths::EXPERIMENT.id, model_paths::EXPERIMENT.id]);
        let one = select(Some(&[worker_paths::EXPERIMENT.id.to_string()])).unwrap();
        assert_eq!(one.len(), 1, "Model-paths selects itself, not the database's probe");
        // One family, one subject: every row `M` selects is a Redis pre-filter row.
        assert!(picked.iter().all(|e| e.needs(experiment::Need::Redis)), "{:?}", picked.iter().map(|e| e.id));
        for e in all() {
            let rows = select(Some(&[family(e.id)])).unwrap();
            assert!(rows.iter().all(|r| family(r.id) == family(e.id)), "{}: {:?}", e.id, rows.iter().map(|r| r.id));
        }
        for (old, new) in RENAMED {
            assert_eq!(renamed(&old.to_lowercase()), Some(*new));
            let by_old = select(Some(&[old.to_string()])).unwrap();
            assert_eq!(by_old.iter().map(|e| e.id).collect::<Vec<_>>(), vec![*new], "{old} still selects {new}");
            assert!(!all_ids().contains(old), "{old} is no longer an id");
        }
    }

    #[test]
    fn ids_are_unique_and_every_row_declares_a_section() {
        let mut seen = std::collections::BTreeSet::new();
        for e in all() {
            assert!(seen.insert(e.id), "{} registered twice", e.id);
            assert!(!e.section.is_empty() && !e.title.is_empty(), "{} declares no section or title", e.id);
        }
    }

    /// The matrix shows a row by its id and title: two rows with one title could not be told apart.
    #[test]
    fn every_row_has_a_title_of_its_own() {
        let mut by_title = std::collections::BTreeMap::new();
        for e in all() {
            if let Some(other) = by_title.insert(e.title, e.id) {
                panic!("{other} and {} share the title {:?}", e.id, e.title);
            }
        }
    }

    #[test]
    fn a_rows_ceiling_holds_what_its_own_waits_allow() {
        use fenceproof_harness::db::patroni::{rest::SWITCHOVER, BOOTSTRAP};
        for e in all() {
            let ceiling = e.ceiling();
            assert!(ceiling >= experiment::BASE_CEILING, "{}: {ceiling:?}", e.id);
            if e.opt_in() && !e.needs(experiment::Need::TeamFunctions) {
                // A Patroni row's bootstrap alone may take BOOTSTRAP; then a failover or switchover.
                assert!(ceiling > BOOTSTRAP + SWITCHOVER, "{}: {ceiling:?} cuts its own waits short", e.id);
            } else if e.needs(experiment::Need::ModelPaths) {
                assert_eq!(ceiling, experiment::BASE_CEILING + experiment::MODEL_PATHS_CEILING, "{}", e.id);
            } else {
                assert_eq!(ceiling, experiment::BASE_CEILING, "{}", e.id);
            }
        }
    }
}
