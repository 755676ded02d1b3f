//! Checkers of registered intents (spec §08, §09.1), judged on the oracle's rows of
//! `tool_operations` and `agent_runs`, whatever the worker says:
//! - [`digests_are_canonical`]: the stored request digest is SHA-256 (hex) of the registered
//!   request body in RFC 8785 canonical JSON, so every implementation that registers or compares the
//!   intent computes the same digest (a digest of a non-canonical text differs between languages,
//!   and a takeover by another implementation would then see an intent mismatch);
//! - [`planned_with_new_checkpoint`]: the intent commits in the transaction that advances its run's
//!   checkpoint to the step planned, not after a checkpoint committed on its own.

use sha2::{Digest, Sha256};

use super::Check;
use crate::record::oracle::CommitRow;

/// The RFC 8785 digest of a request body.
pub fn canonical_digest(body: &serde_json::Value) -> String {
    let canon = serde_json_canonicalizer::to_string(body).expect("a JSON value always canonicalizes");
    Sha256::digest(canon.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn inserted_intents<'a>(rows: &'a [CommitRow], control: &'a [&str]) -> impl Iterator<Item = &'a CommitRow> {
    rows.iter()
        .filter(move |r| r.table_name == "tool_operations" && r.op == "INSERT" && !control.contains(&r.writer.as_str()))
}

/// The name of [`digests_are_canonical`]'s check.
/// The conformance point that judges one registered intent's digest (the worker contract's check
/// of the same rule, before the matrix).
pub const DIGEST_POINT: &str =
    "request_digest is SHA-256 (hex) of the registered request body in RFC 8785 canonical JSON";

pub const DIGESTS_CANONICAL: &str =
    "every registered intent's request_digest is SHA-256 of its request body in RFC 8785 canonical JSON";

/// Every intent a worker registered carries the RFC 8785 digest of its registered body.
pub fn digests_are_canonical(rows: &[CommitRow], control: &[&str]) -> Check {
    let name = DIGESTS_CANONICAL;
    let mut bad = Vec::new();
    let mut judged = 0;
    for r in inserted_intents(rows, control) {
        let (Some(body), Some(stored)) = (r.new_field("request_body"), r.new_str("request_digest")) else {
            continue;
        };
        judged += 1;
        let want = canonical_digest(body);
        if stored != want {
            bad.push(format!(
                "commit #{} by {} registered {} with digest {stored}; its body {body} canonicalizes to {want}",
                r.seq,
                r.writer,
                r.new_str("operation_id").unwrap_or("?")
            ));
        }
    }
    Check::from_violations(name, bad, format!("{judged} registered intent(s), each digest canonical"))
}

/// The name of [`planned_with_new_checkpoint`]'s check.
pub const PLANNED_WITH_CHECKPOINT: &str =
    "an intent commits in the transaction that moves its run's checkpoint to the step planned";

/// Every intent a worker registered committed together with a change of its run's checkpoint by
/// the same writer: the step-planned checkpoint and its intent are one transaction. A run update
/// that leaves the checkpoint as it was (only the revision moved) means the planned checkpoint
/// committed earlier, on its own: a crash between the two leaves "state says call the tool, but
/// the intent is lost".
pub fn planned_with_new_checkpoint(rows: &[CommitRow], control: &[&str]) -> Check {
    let name = PLANNED_WITH_CHECKPOINT;
    let mut bad = Vec::new();
    let mut judged = 0;
    for r in inserted_intents(rows, control) {
        if r.xid.is_empty() {
            continue;
        }
        judged += 1;
        let run_id = r.new_str("run_id").and_then(|s| s.parse::<uuid::Uuid>().ok()).or(r.run_id);
        let together: Vec<&CommitRow> = rows
            .iter()
            .filter(|u| u.is_runs() && u.op == "UPDATE" && u.xid == r.xid && u.run_id == run_id && u.writer == r.writer)
            .collect();
        let op = r.new_str("operation_id").unwrap_or("?");
        if together.is_empty() {
            bad.push(format!(
                "commit #{} by {}: intent {op} committed without a checkpoint of its run",
                r.seq, r.writer
            ));
        } else if together.iter().all(|u| u.old_field("checkpoint") == u.new_field("checkpoint")) {
            // The checkpoint stayed as it was. That is the planned checkpoint committed apart when
            // the last change of the run's checkpoint to this value came in a transaction of its
            // own, with no intent (a worker whose planned checkpoint is the same for every step
            // keeps it unchanged legitimately: its last change came with an earlier intent).
            let cp = together[0].new_field("checkpoint");
            let last_change = rows
                .iter()
                .rev()
                .filter(|u| u.seq < r.seq && u.is_runs() && u.op == "UPDATE" && u.run_id == run_id)
                .find(|u| u.old_field("checkpoint") != u.new_field("checkpoint"));
            if let Some(u) = last_change.filter(|u| u.new_field("checkpoint") == cp) {
                let had_intent =
                    rows.iter().any(|i| i.table_name == "tool_operations" && i.op == "INSERT" && i.xid == u.xid);
                if !had_intent {
                    bad.push(format!(
                        "commit #{} by {}: intent {op} committed with a run update that left the checkpoint as it was ({}); that checkpoint committed at #{} without any intent: the planned checkpoint committed apart from its intent",
                        r.seq,
                        r.writer,
                        cp.cloned().unwrap_or_default(),
                        u.seq
                    ));
                }
            }
        }
    }
    Check::from_violations(
        name,
        bad,
        format!("{judged} intent(s), each with a new checkpoint of its run in its transaction"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::{json, Value};

    fn row(seq: i64, xid: &str, table: &str, op: &str, old: Value, new: Value) -> CommitRow {
        commit_row(seq, table, op).xid(xid).by("w-a").change(old, new)
    }

    fn intent(seq: i64, xid: &str, body: Value, digest: &str) -> CommitRow {
        row(
            seq,
            xid,
            "tool_operations",
            "INSERT",
            Value::Null,
            json!({"operation_id": "t/r/s/v1", "run_id": uuid::Uuid::nil(), "status": "prepared",
                   "request_body": body, "request_digest": digest}),
        )
    }

    fn save(seq: i64, xid: &str, old: Value, new: Value) -> CommitRow {
        row(seq, xid, "agent_runs", "UPDATE", json!({"checkpoint": old}), json!({"checkpoint": new}))
    }

    #[test]
    fn a_digest_of_non_canonical_text_is_caught() {
        let body = json!({"b": 1.0, "a": "é", "\u{10000}": 1, "\u{ffff}": 2});
        let good = canonical_digest(&body);
        assert!(digests_are_canonical(&[intent(1, "7", body.clone(), &good)], &[]).passed());
        // What json.dumps(sort_keys=True) would hash: ASCII escapes, a float spelled 1.0.
        let text = r#"{"a": "\u00e9", "b": 1.0}"#;
        let wrong: String = Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        let c = digests_are_canonical(&[intent(1, "7", body, &wrong)], &[]);
        assert!(!c.passed());
        assert!(c.evidence.contains("canonicalizes to"), "{}", c.evidence);
        // The control plane's rows are not a worker's registration.
        assert!(digests_are_canonical(&[intent(1, "7", json!({}), "x")], &["w-a"]).passed());
    }

    #[test]
    fn an_intent_apart_from_its_planned_checkpoint_is_caught() {
        let planned = json!({"planned": "pay"});
        let together = vec![save(1, "7", json!({}), planned.clone()), intent(2, "7", json!({}), "d")];
        assert!(planned_with_new_checkpoint(&together, &[]).passed());
        // The checkpoint committed first; the intent came with a revision bump only.
        let apart = vec![
            save(1, "7", json!({}), planned.clone()),
            save(2, "8", planned.clone(), planned.clone()),
            intent(3, "8", json!({}), "d"),
        ];
        let c = planned_with_new_checkpoint(&apart, &[]);
        assert!(!c.passed());
        assert!(c.evidence.contains("without any intent"), "{}", c.evidence);
        // A worker whose planned checkpoint is the same for every step: unchanged, but its last
        // change came with the first intent.
        let same_for_every_step = vec![
            save(1, "7", json!({}), planned.clone()),
            intent(2, "7", json!({}), "d"),
            save(3, "8", planned.clone(), planned.clone()),
            intent(4, "8", json!({}), "d"),
        ];
        assert!(planned_with_new_checkpoint(&same_for_every_step, &[]).passed());
        // No run update at all in the intent's transaction.
        assert!(!planned_with_new_checkpoint(&[intent(1, "9", json!({}), "d")], &[]).passed());
    }
}
