//! What an operation_id must never carry (spec §02, §08), judged on the oracle's rows of
//! `tool_operations`, whatever format the worker chose for its ids:
//! - [`operation_ids_name_no_executor`]: no registered operation_id contains the id of an owner
//!   (a worker session) or a timestamp of the moment it was registered. An id that names who
//!   executes it, or when, changes on takeover and retry, and the same intent is then sent again
//!   under a new identity.
//!
//! The id is otherwise opaque: its shape is the team's. That it stays the same for one intent
//! across a takeover and a re-plan, and changes for a new effect_version or a new run, is judged by
//! the experiments that create those moments (E-replan, G) from what the worker does.

use chrono::{DateTime, Utc};

use super::{Check, Found};
use crate::record::oracle::CommitRow;

/// The name of [`operation_ids_name_no_executor`]'s check.
pub const OPERATION_ID_NAMES_NO_EXECUTOR: &str = "no operation_id carries an owner id or the time of its registration";

/// Owner ids shorter than this are not searched for inside operation_ids (too short to tell).
const SHORTEST_OWNER: usize = 8;

/// Every owner id the rows show: lease holders and the sessions that wrote, but the control plane.
fn owners<'a>(rows: &'a [CommitRow], control: &[&str]) -> Vec<&'a str> {
    let mut found: Vec<&str> = rows
        .iter()
        .filter(|r| r.is_leases())
        .filter_map(|r| r.new_str("owner"))
        .chain(rows.iter().map(|r| r.writer.as_str()).filter(|w| !control.contains(w)))
        .filter(|o| o.len() >= SHORTEST_OWNER)
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// No intent a worker registered has an operation_id that contains an owner id or a timestamp
/// within a day of its registration.
pub fn operation_ids_name_no_executor(rows: &[CommitRow], control: &[&str]) -> Check {
    let owners = owners(rows, control);
    let mut bad = Vec::new();
    let mut judged = 0;
    let intents = rows.iter().filter(|r| r.table_name == "tool_operations" && r.op == "INSERT");
    for r in intents.filter(|r| !control.contains(&r.writer.as_str())) {
        let Some(op) = r.new_str("operation_id") else { continue };
        judged += 1;
        if let Some(o) = owners.iter().find(|o| op.contains(**o)) {
            let text = format!("commit #{} by {}: operation_id {op:?} contains the owner id {o}", r.seq, r.writer);
            bad.push(Found::at(r.seq, text));
        } else if let Some(t) = timestamp_in(op, r.committed_at) {
            let text = format!(
                "commit #{} by {}: operation_id {op:?} contains {t:?}, a timestamp of its registration ({})",
                r.seq,
                r.writer,
                r.committed_at.to_rfc3339()
            );
            bad.push(Found::at(r.seq, text));
        }
    }
    Check::from_found(
        OPERATION_ID_NAMES_NO_EXECUTOR,
        bad,
        format!("{judged} operation_id(s), none naming an owner ({} known) or a registration time", owners.len()),
    )
}

/// A part of `op` that reads as a timestamp within a day of `at`: Unix seconds, milliseconds or
/// microseconds (a run of exactly 10, 13 or 16 digits), or an ISO 8601 date and time of day.
fn timestamp_in(op: &str, at: DateTime<Utc>) -> Option<String> {
    let day = 86_400i64;
    let near = |secs: i64| (secs - at.timestamp()).abs() <= day;
    for run in op.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()) {
        let Ok(n) = run.parse::<i64>() else { continue };
        let secs = match run.len() {
            10 => n,
            13 => n / 1_000,
            16 => n / 1_000_000,
            _ => continue,
        };
        if near(secs) {
            return Some(run.to_string());
        }
    }
    let chars: Vec<char> = op.chars().collect();
    for start in 0..chars.len() {
        // YYYY-MM-DDTHH:MM (or a space for the T), then anything.
        let candidate: String = chars[start..].iter().take(16).collect();
        let with_t = candidate.replacen(' ', "T", 1);
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(&format!("{with_t}:00"), "%Y-%m-%dT%H:%M:%S") {
            if near(t.and_utc().timestamp()) {
                return Some(candidate);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::json;

    fn intent(seq: i64, op: &str, writer: &str) -> CommitRow {
        commit_row(seq, "tool_operations", "INSERT").by(writer).change(json!(null), json!({"operation_id": op}))
    }

    fn lease(seq: i64, owner: &str) -> CommitRow {
        commit_row(seq, "worker_leases", "UPDATE").by(owner).change(json!({"owner": null}), json!({"owner": owner}))
    }

    #[test]
    fn any_opaque_id_without_executor_or_time_passes() {
        let rows = [
            lease(1, "worker-a-3f2e1c"),
            intent(2, "tenant1/6f1c3a52-6b9e-4c1e-9d41-0a4f2b9a7c10/pay/v1", "worker-a-3f2e1c"),
            intent(3, "invoice:8842:charge#2", "worker-a-3f2e1c"),
            intent(4, "pay-2026-12-03-order-77", "worker-a-3f2e1c"),
        ];
        let c = operation_ids_name_no_executor(&rows, &[]);
        assert!(c.passed(), "{}", c.evidence);
    }

    #[test]
    fn an_id_with_the_owner_fails() {
        let rows = [lease(1, "worker-b-77aa01"), intent(2, "t/r/pay/worker-b-77aa01", "worker-b-77aa01")];
        let c = operation_ids_name_no_executor(&rows, &[]);
        assert!(!c.passed());
        assert!(c.evidence.contains("contains the owner id worker-b-77aa01"), "{}", c.evidence);
    }

    #[test]
    fn an_id_with_the_registration_time_fails() {
        let at = Utc::now();
        for op in [
            format!("t/r/pay/{}", at.timestamp_millis()),
            format!("t/r/pay/{}", at.timestamp()),
            format!("t/r/pay/{}", at.format("%Y-%m-%dT%H:%M:%S")),
        ] {
            let rows = [intent(1, &op, "worker-a-3f2e1c").at(at)];
            let c = operation_ids_name_no_executor(&rows, &[]);
            assert!(!c.passed(), "{op}");
            assert!(c.evidence.contains("a timestamp of its registration"), "{}", c.evidence);
        }
    }

    #[test]
    fn the_control_plane_and_short_owners_are_not_searched() {
        let rows = [intent(1, "w/pay/v1", "w"), intent(2, "control-plane-1234/x", "control-plane-1234")];
        assert!(operation_ids_name_no_executor(&rows, &["control-plane-1234"]).passed());
    }
}
