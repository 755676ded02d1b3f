//! The remote effects as model actions: a tool creates a resource only for an operation whose
//! intent is registered and whose claim has committed (or that the reconciler retries as unknown
//! under its key). The tools and the database read one clock here, so a resource recorded before
//! the operation's claim committed proves a call made before its claim did (§09.2: the claim's
//! transaction does not span the call).

use super::history::Env;
use super::report::{Report, Unexplained};
use super::rows::Rows;

/// Slack for the tools' and the database's readings of one clock (rounding of their text).
pub const SAME_CLOCK_SLACK_US: i64 = 2_000;

/// Judges every recorded creation against the history's rows at its end.
pub fn judge(rows: &Rows, env: &Env, report: &mut Report) {
    // A second resource for one operation is no behaviour of the model whatever the history
    // lost: `effects.one-per-operation` holds in every state the model reaches, a restore (with
    // its recovery step) included. A promotion is left to the deployment's failover contract.
    if !env.promoted {
        second_resources(env, report);
    }
    // No history, or one a restore or promotion cut short: the calls have nothing to be read
    // against (their intents may be in commits this history lost).
    if report.transactions == 0 || env.rows_may_roll_back {
        return;
    }
    for call in &env.calls {
        let id = &call.operation_id;
        if !rows.ops.contains_key(id) {
            report.unexplained.push(Unexplained {
                seq: 0,
                writer: "tools".into(),
                observed: format!("a resource was created for operation_id {id}, which no intent registered"),
                allowed: "a tool call carries the operation_id of a registered intent (a retry keeps its key)".into(),
                tried: Vec::new(),
                rules: Vec::new(),
            });
            continue;
        }
        if !env.shared_clock || env.clock_moved_back {
            continue;
        }
        match rows.left_prepared_at.get(id) {
            Some(t) if call.at + SAME_CLOCK_SLACK_US >= *t => report.explained += 1,
            claimed => report.unexplained.push(Unexplained {
                seq: 0,
                writer: "tools".into(),
                observed: format!(
                    "a resource was created for {id} at {} {}",
                    super::refine::ts(call.at),
                    match claimed {
                        Some(t) => format!("before its claim committed at {}", super::refine::ts(*t)),
                        None => "and the operation was never claimed".into(),
                    }
                ),
                allowed: "the call only after the claim's transaction committed".into(),
                tried: Vec::new(),
                rules: Vec::new(),
            }),
        }
    }
}

/// Each operation the tools made a second resource for (their ledger records a creation only for
/// a new resource: an idempotent replay or a deterministic id's 409 is none).
fn second_resources(env: &Env, report: &mut Report) {
    let mut seen = std::collections::BTreeSet::new();
    for call in &env.calls {
        if !seen.insert(call.operation_id.as_str()) {
            report.unexplained.push(Unexplained {
                seq: 0,
                writer: "tools".into(),
                observed: format!("a second resource was created for operation_id {}", call.operation_id),
                allowed: "at most one resource per operation (the model's effects.one-per-operation holds in every \
                          state it reaches, restores with their recovery included)"
                    .into(),
                tried: Vec::new(),
                rules: Vec::new(),
            });
        }
    }
}
