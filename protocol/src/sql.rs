//! The direct write path's statements, in one place: every statement the protocol runs on the
//! tables themselves (when it is not calling the fenced `fp_*` functions), by name. `fenceproof
//! mutants sql` derives generated mutants from this list, and a `mutants` build of the worker can
//! be told to run one statement in its mutated form (`--sql-mutant FILE`); the reference build
//! always runs these texts as they are.

use std::borrow::Cow;

pub const LEASE_ACQUIRE: &str = "UPDATE worker_leases
    SET owner = $2,
        epoch = epoch + 1,
        expires_at = clock_timestamp() + ($3::bigint * interval '1 millisecond'),
        updated_at = clock_timestamp()
  WHERE run_id = $1
    AND (owner IS NULL OR expires_at <= clock_timestamp())
RETURNING epoch, expires_at";

pub const LEASE_RENEW: &str = "UPDATE worker_leases
    SET expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond'),
        updated_at = clock_timestamp()
  WHERE run_id = $1 AND owner = $2 AND epoch = $3 AND expires_at > clock_timestamp()
RETURNING expires_at";

pub const LEASE_RENEW_MANY: &str = "UPDATE worker_leases l
    SET expires_at = clock_timestamp() + ($4::bigint * interval '1 millisecond'),
        updated_at = clock_timestamp()
   FROM unnest($2::uuid[], $3::bigint[]) AS b(run_id, epoch)
  WHERE l.run_id = b.run_id AND l.owner = $1 AND l.epoch = b.epoch AND l.expires_at > clock_timestamp()
RETURNING l.run_id, l.expires_at";

pub const LEASE_RELEASE: &str = "UPDATE worker_leases
    SET owner = NULL, expires_at = clock_timestamp(), updated_at = clock_timestamp()
  WHERE run_id = $1 AND owner = $2 AND epoch = $3";

pub const COMMIT_LOCK_LEASE: &str = "SELECT owner, epoch, expires_at > clock_timestamp()
   FROM worker_leases WHERE run_id = $1 FOR UPDATE";

pub const COMMIT_UPDATE_RUN: &str = "UPDATE agent_runs
    SET checkpoint = COALESCE($3::jsonb, checkpoint),
        status = $5,
        revision = revision + 1,
        updated_at = clock_timestamp()
  WHERE run_id = $1 AND revision = $2 AND status = $4
RETURNING revision";

pub const INTENT_INSERT: &str = "INSERT INTO tool_operations
     (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status)
 VALUES ($1, $2, $3, $4, $5, $6, $7, 'prepared')
 ON CONFLICT (operation_id) DO NOTHING";

pub const INTENT_READ: &str = "SELECT run_id, tool_name, request_digest FROM tool_operations WHERE operation_id = $1";

pub const REQUIRE_RESULT: &str = "SELECT run_id, status FROM tool_operations WHERE operation_id = $1 FOR SHARE";

pub const CLAIM: &str = "UPDATE tool_operations o
    SET status = 'dispatching', dispatch_owner = $1,
        dispatch_until = clock_timestamp() + ($2::bigint * interval '1 millisecond'),
        revision = o.revision + 1, updated_at = clock_timestamp()
  WHERE o.operation_id = ANY (ARRAY(
          SELECT c.operation_id
            FROM tool_operations c
            JOIN agent_runs r ON r.run_id = c.run_id
           WHERE c.status = 'prepared' AND r.status IN ('pending', 'running')
           ORDER BY c.updated_at
             FOR UPDATE OF c SKIP LOCKED
           LIMIT $3))
RETURNING o.operation_id, o.run_id, o.tool_name, o.request_digest, o.request_body, o.dispatch_owner, o.revision";

pub const RECORD_RESULT: &str = "UPDATE tool_operations
    SET status = $5, remote_id = $6, result = $7::jsonb,
        dispatch_until = NULL, revision = revision + 1, updated_at = clock_timestamp()
  WHERE operation_id = $1 AND status = 'dispatching' AND dispatch_owner = $2 AND revision = $3
    AND request_digest = $4
RETURNING revision";

pub const MARK_UNKNOWN_OWN: &str = "UPDATE tool_operations
    SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,
        result = jsonb_build_object('unknown_because', $4::text, 'claimed_by', $2::text),
        revision = revision + 1, updated_at = clock_timestamp()
  WHERE operation_id = $1 AND status = 'dispatching' AND dispatch_owner = $2 AND revision = $3
RETURNING revision";

pub const EXPIRED_CLAIMS: &str = "SELECT operation_id, dispatch_owner, revision FROM tool_operations
  WHERE status = 'dispatching' AND dispatch_until <= clock_timestamp()
  ORDER BY dispatch_until";

pub const MARK_EXPIRED_UNKNOWN: &str = "UPDATE tool_operations
    SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,
        result = jsonb_build_object('unknown_because', 'claim expired', 'claimed_by', $2::text),
        revision = revision + 1, updated_at = clock_timestamp()
  WHERE operation_id = $1 AND status = 'dispatching' AND dispatch_owner = $2 AND revision = $3
    AND dispatch_until <= clock_timestamp()";

pub const CONVERGE: &str = "UPDATE tool_operations
    SET status = $3, remote_id = $4, result = $5::jsonb, revision = revision + 1, updated_at = clock_timestamp()
  WHERE operation_id = $1 AND status = 'unknown' AND revision = $2
RETURNING revision";

pub const RUN_CREATE_TASK: &str = "INSERT INTO agent_tasks (task_id) VALUES ($1) ON CONFLICT (task_id) DO NOTHING";

pub const RUN_LOCK_TASK: &str = "SELECT active_run_id FROM agent_tasks WHERE task_id = $1 FOR UPDATE";

pub const RUN_INSERT: &str =
    "INSERT INTO agent_runs (run_id, task_id, status, checkpoint) VALUES ($1, $2, 'pending', $3)";

pub const RUN_INSERT_LEASE: &str = "INSERT INTO worker_leases (run_id) VALUES ($1)";

pub const RUN_SET_ACTIVE: &str =
    "UPDATE agent_tasks SET active_run_id = $2, updated_at = clock_timestamp() WHERE task_id = $1";

pub const CANCEL_RUN: &str = "UPDATE agent_runs
    SET status = 'cancelled', revision = revision + 1, updated_at = clock_timestamp()
  WHERE run_id = $1 AND status IN ('pending', 'running')
RETURNING revision";

pub const CANCEL_OPERATIONS: &str = "UPDATE tool_operations
    SET status = 'cancelled', revision = revision + 1, updated_at = clock_timestamp()
  WHERE run_id = $1 AND status = 'prepared'";

/// Every direct-path statement a worker runs, by name. (`LEASE_RENEW_MANY` is a library call no
/// worker command makes; its fenced twin `fp_lease_renew_many` is probed by P-api.)
pub const DIRECT: &[(&str, &str)] = &[
    ("lease_acquire", LEASE_ACQUIRE),
    ("lease_renew", LEASE_RENEW),
    ("lease_release", LEASE_RELEASE),
    ("commit_lock_lease", COMMIT_LOCK_LEASE),
    ("commit_update_run", COMMIT_UPDATE_RUN),
    ("intent_insert", INTENT_INSERT),
    ("intent_read", INTENT_READ),
    ("require_result", REQUIRE_RESULT),
    ("claim", CLAIM),
    ("record_result", RECORD_RESULT),
    ("mark_unknown_own", MARK_UNKNOWN_OWN),
    ("expired_claims", EXPIRED_CLAIMS),
    ("mark_expired_unknown", MARK_EXPIRED_UNKNOWN),
    ("converge", CONVERGE),
    ("run_create_task", RUN_CREATE_TASK),
    ("run_lock_task", RUN_LOCK_TASK),
    ("run_insert", RUN_INSERT),
    ("run_insert_lease", RUN_INSERT_LEASE),
    ("run_set_active", RUN_SET_ACTIVE),
    ("cancel_run", CANCEL_RUN),
    ("cancel_operations", CANCEL_OPERATIONS),
];

/// What each direct-path statement is for: the protocol step (and the worker command that runs
/// it), the transaction it runs in, and what matching no row means. docs/direct-path.md is
/// generated from this list beside the statements' own text (`fenceproof docs`).
pub struct Step {
    /// The statement's name in [`DIRECT`].
    pub name: &'static str,
    /// The protocol step and the command that takes it.
    pub step: &'static str,
    /// The transaction it runs in.
    pub within: &'static str,
    /// What matching no row (or an error) means to the caller.
    pub no_row: &'static str,
}

/// Every statement of [`DIRECT`], in the same order, with its purpose.
pub const STEPS: &[Step] = &[
    Step {
        name: "lease_acquire",
        step: "§05 acquire: take a free lease (`owner IS NULL`) or take over an expired one; `acquire`",
        within: "its own (autocommit)",
        no_row: "no such lease row, or a live lease of anyone (the caller reads the row to answer `busy`); the reference then reads the run, and a final run answers `invalid_state`",
    },
    Step {
        name: "lease_renew",
        step: "§05 renew: extend the term, only this owner and epoch, only before expiry; `renew` and the heartbeat",
        within: "its own (autocommit)",
        no_row: "the lease is lost for good (`lease_lost`): cancel the execution, write nothing more",
    },
    Step {
        name: "lease_release",
        step: "§05 release: clear the owner and end the term now, keeping the epoch; `release`",
        within: "its own (autocommit)",
        no_row: "this owner and epoch no longer hold the lease (answered `lease_lost`); nothing changed",
    },
    Step {
        name: "commit_lock_lease",
        step: "§06 protected commit, first statement: row-lock the lease and read owner, epoch and liveness on the database clock; `start`, `save`, `succeed`, `fail`, `plan`, `advance`",
        within: "the protected transaction (BEGIN … COMMIT), first",
        no_row: "no lease row; a row whose owner or epoch differs from the worker's, or whose third column is false (expired), is `lease_lost`: roll back, write nothing",
    },
    Step {
        name: "commit_update_run",
        step: "§06/§07 the revision compare-and-set with the transition (`$4` the status it leaves, `$5` the one it enters; the same word for a checkpoint save)",
        within: "the protected transaction, after the lease is locked and validated",
        no_row: "another revision (`conflict`: re-read, do not overwrite) or another status (`invalid_state`); roll back",
    },
    Step {
        name: "intent_insert",
        step: "§09.1 register the intent as `prepared`; `plan`",
        within: "the protected transaction, after the run's compare-and-set",
        no_row: "the operation_id exists: read it (`intent_read`); SQLSTATE 23505 on `(run_id, step_id, effect_version)` is another operation_id for the same step (`invalid_intent`)",
    },
    Step {
        name: "intent_read",
        step: "§09.1 the existing intent under this operation_id, after an insert that inserted nothing; `plan`",
        within: "the protected transaction",
        no_row: "(never: the insert just found it) same run, tool and digest is `already_registered`; anything else is `invalid_intent`",
    },
    Step {
        name: "require_result",
        step: "§09.3 the verified result an `advance` depends on, share-locked until the commit",
        within: "the protected transaction, after the lease is validated",
        no_row: "no such operation, another run's, or not `succeeded` (`operation_not_settled`): roll back",
    },
    Step {
        name: "claim",
        step: "§09.2 claim prepared operations of pending or running runs, oldest first, skipping locked rows; `dispatch`",
        within: "its own (autocommit); the remote call comes after it commits, never inside it",
        no_row: "nothing to dispatch",
    },
    Step {
        name: "record_result",
        step: "§09.3 write the verified result of this session's claim (`$5` is `succeeded` or `failed_final`); `dispatch`",
        within: "its own (autocommit)",
        no_row: "the claim moved on (a reconciler marked it unknown, a cancel, another revision): the answer is evidence only (`write_rejected`); never a new operation_id",
    },
    Step {
        name: "mark_unknown_own",
        step: "§09.2/§09.3 the dispatcher gives its own claim up as `unknown` after a call that timed out or answered no fact, keeping the evidence (`$4`) in `result`; `dispatch`",
        within: "its own (autocommit)",
        no_row: "the claim moved on (a reconciler marked it, a result, another revision); leave it",
    },
    Step {
        name: "expired_claims",
        step: "§09.2 the reconciler's list of expired claims on the database clock; `reconcile`",
        within: "its own",
        no_row: "nothing expired",
    },
    Step {
        name: "mark_expired_unknown",
        step: "§09.2 the reconciler marks an expired claim `unknown`, exactly as it read it (owner and revision); `reconcile`",
        within: "its own (autocommit)",
        no_row: "the claim moved on (re-claimed, a result was written) or was renewed: leave it",
    },
    Step {
        name: "converge",
        step: "§09.3 the reconciler settles an `unknown` operation to the remote fact (`succeeded` or `failed_final`), at the revision it read; `reconcile`",
        within: "its own (autocommit)",
        no_row: "another process settled or moved it first: leave it",
    },
    Step {
        name: "run_create_task",
        step: "§02 create the task if new; `create_run` (control plane)",
        within: "the create_run transaction, first",
        no_row: "the task exists",
    },
    Step {
        name: "run_lock_task",
        step: "§02 lock the task and read its active run; `create_run` (control plane)",
        within: "the create_run transaction",
        no_row: "(never) an active run that is not final refuses the new run (`invalid_state`)",
    },
    Step {
        name: "run_insert",
        step: "§02 a new run, always a new run_id (a retry is a new run); `create_run` (control plane)",
        within: "the create_run transaction",
        no_row: "-",
    },
    Step {
        name: "run_insert_lease",
        step: "§02 the run's lease row: no owner, epoch 0, already expired (the column defaults); `create_run` (control plane)",
        within: "the create_run transaction",
        no_row: "-",
    },
    Step {
        name: "run_set_active",
        step: "§02 point the task at its new run; `create_run` (control plane)",
        within: "the create_run transaction, last",
        no_row: "-",
    },
    Step {
        name: "cancel_run",
        step: "§09.3 cancel a pending or running run (no lease needed: the control plane); `cancel`",
        within: "the cancel transaction, first",
        no_row: "the run is final already (`invalid_state`)",
    },
    Step {
        name: "cancel_operations",
        step: "§09.3 the run's `prepared` operations become `cancelled`; `dispatching` and `unknown` ones keep their status; `cancel`",
        within: "the cancel transaction, after the run's",
        no_row: "nothing was prepared",
    },
];

#[cfg(feature = "mutants")]
static OVERRIDE: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();

/// Run statement `name` as `text` in this process from now on (mutants build only). False when an
/// override was already set or `name` is not a direct-path statement.
#[cfg(feature = "mutants")]
pub fn set_override(name: &str, text: &str) -> bool {
    DIRECT.iter().any(|(n, _)| *n == name) && OVERRIDE.set((name.to_string(), text.to_string())).is_ok()
}

#[cfg(feature = "mutants")]
static REPORTED: std::sync::Mutex<Option<std::collections::BTreeSet<String>>> = std::sync::Mutex::new(None);

/// From now on, say on stderr the first time this process runs each direct-path statement, as
/// `fenceproof-worker: direct statement <name>` (mutants build only): `fenceproof mutants sql`
/// reads the reference's lines to run a statement's mutants only through the rows that reach it.
#[cfg(feature = "mutants")]
pub fn report_statements() {
    let mut seen = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    seen.get_or_insert_with(Default::default);
}

/// Say that statement `name` is about to run, the first time, when asked to (see [`report_statements`]).
#[cfg(feature = "mutants")]
fn reported(name: &str) {
    let mut seen = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(seen) = seen.as_mut() {
        if seen.insert(name.to_string()) {
            eprintln!("fenceproof-worker: direct statement {name}");
        }
    }
}

/// The text to run for statement `name`, whose reference text (after any named mutant's change)
/// is `text`: the override for `name` in a mutants build that was given one, else `text`.
pub fn stmt<'a>(name: &str, text: impl Into<Cow<'a, str>>) -> Cow<'a, str> {
    #[cfg(feature = "mutants")]
    reported(name);
    #[cfg(feature = "mutants")]
    if let Some((n, t)) = OVERRIDE.get() {
        if n == name {
            return Cow::Owned(t.clone());
        }
    }
    let _ = name;
    text.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_reference_build_runs_the_texts_as_they_are() {
        let mut names: Vec<&str> = DIRECT.iter().map(|(n, _)| *n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DIRECT.len());
        let steps: Vec<&str> = STEPS.iter().map(|s| s.name).collect();
        let direct: Vec<&str> = DIRECT.iter().map(|(n, _)| *n).collect();
        assert_eq!(steps, direct, "every direct statement has its step, in the same order");
        #[cfg(not(feature = "mutants"))]
        assert_eq!(stmt("lease_renew", LEASE_RENEW), LEASE_RENEW);
    }
}
