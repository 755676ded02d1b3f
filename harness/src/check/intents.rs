//! Checkers of registered intents (spec §08, §09.1), judged on the oracle's rows of
//! `tool_operations` and `agent_runs`, whatever the worker says:
//! - [`digests_are_canonical`]: the stored request digest is SHA-256 (hex) of the registered
//!   request body in RFC 8785 canonical JSON, so every implementation that registers or compares the
//!   intent computes the same digest (a digest of a non-canonical text differs between languages,
//!   and a takeover by another implementation would then see an intent mismatch);
//! - [`planned_with_new_checkpoint`]: the intent commits in the transaction that advances its run's
//!   checkpoint to the step planned, not after a checkpoint committed on its own.

use sha2::{Digest, Sha256};

use super::{Check, Found};
use crate::record::oracle::CommitRow;

/// The RFC 8785 digest of a request body.
pub fn canonical_digest(body: &serde_json::Value) -> String {
    sha256_hex(&canonical_text(body))
}

/// The RFC 8785 canonical text of a request body: what a worker must hash.
pub fn canonical_text(body: &serde_json::Value) -> String {
    serde_json_canonicalizer::to_string(body).expect("a JSON value always canonicalizes")
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Where two texts first differ: the byte offset and a short excerpt of each around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub offset: usize,
    pub expected: String,
    pub actual: String,
}

/// The first byte at which `actual` differs from `expected` (one ending early counts), with up to
/// 16 bytes before and 24 after it in each (widened to whole characters); `None` when equal.
pub fn first_difference(expected: &str, actual: &str) -> Option<Difference> {
    let (a, b) = (expected.as_bytes(), actual.as_bytes());
    let offset = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    if offset == a.len() && offset == b.len() {
        return None;
    }
    let excerpt = |t: &str| {
        let mut from = offset.saturating_sub(16).min(t.len());
        while !t.is_char_boundary(from) {
            from -= 1;
        }
        let mut to = (offset + 24).min(t.len());
        while !t.is_char_boundary(to) {
            to += 1;
        }
        let (head, tail) = (if from > 0 { "…" } else { "" }, if to < t.len() { "…" } else { "" });
        format!("{head}{}{tail}", &t[from..to])
    };
    Some(Difference { offset, expected: excerpt(expected), actual: excerpt(actual) })
}

/// `text` cut to about `max` bytes (at a character boundary) with an ellipsis and its full length.
pub fn capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut to = max;
    while !text.is_char_boundary(to) {
        to -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..to], text.len())
}

/// JSON text of `v` with keys sorted by code point, as common libraries spell it: `spaced` puts
/// `", "` and `": "` between items (Python's `json.dumps` default), `ascii` escapes every character
/// outside printable ASCII as `\uXXXX` (Python's default `ensure_ascii`).
fn json_text(v: &serde_json::Value, spaced: bool, ascii: bool) -> String {
    use serde_json::Value;
    let (comma, colon) = if spaced { (", ", ": ") } else { (",", ":") };
    let string = |s: &str| {
        let quoted = serde_json::to_string(s).expect("a string serializes");
        if !ascii {
            return quoted;
        }
        let mut out = String::new();
        for c in quoted.chars() {
            if (' '..='~').contains(&c) {
                out.push(c);
            } else {
                for u in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
        out
    };
    match v {
        Value::String(s) => string(s),
        Value::Array(a) => {
            format!("[{}]", a.iter().map(|x| json_text(x, spaced, ascii)).collect::<Vec<_>>().join(comma))
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .iter()
                .map(|k| format!("{}{colon}{}", string(k), json_text(&o[k.as_str()], spaced, ascii)))
                .collect();
            format!("{{{}}}", items.join(comma))
        }
        other => other.to_string(),
    }
}

/// The non-canonical spelling of `body` whose SHA-256 is `stored`, among the common ones: its
/// description and text.
fn recognised_input(body: &serde_json::Value, stored: &str) -> Option<(&'static str, String)> {
    [
        ("Python's json.dumps(sort_keys=True) text (\", \" and \": \" separators, non-ASCII escaped)", true, true),
        ("sorted-key JSON with \", \" and \": \" separators (json.dumps(sort_keys=True, ensure_ascii=False))", true, false),
        ("compact sorted-key JSON with non-ASCII escaped (not RFC 8785: no \\u escapes there)", false, true),
        ("compact sorted-key JSON that is not RFC 8785 (key order by code point, not UTF-16, or numbers spelled otherwise)", false, false),
    ]
    .into_iter()
    .map(|(how, spaced, ascii)| (how, json_text(body, spaced, ascii)))
    .find(|(_, text)| sha256_hex(text) == stored)
}

/// Evidence for a stored digest that is not the RFC 8785 digest of `body`: both hashes, the text
/// the worker hashed when the harness recognises it (the worker contract has no field in which a
/// worker reports its digest input) with the first difference, and the expected canonical text
/// (capped; it is the body's own).
pub fn digest_deviation(body: &serde_json::Value, stored: &str) -> String {
    let canon = canonical_text(body);
    let want = sha256_hex(&canon);
    let expected = format!("expected canonical text: {}", capped(&canon, 160));
    match recognised_input(body, stored).and_then(|(how, text)| Some((how, first_difference(&canon, &text)?))) {
        Some((how, d)) => format!(
            "its request_digest is the SHA-256 of {how}, not of the RFC 8785 text; the two texts first differ at byte {}: expected `{}`, hashed `{}`; stored digest {stored}, RFC 8785 digest {want}; {expected}",
            d.offset, d.expected, d.actual
        ),
        None => format!(
            "its request_digest {stored} is not {want}, the SHA-256 of the body's RFC 8785 text; the worker does not report the text it hashed (the contract has no field for it) and it is none of the common non-canonical spellings; {expected}"
        ),
    }
}

/// [`digest_deviation`], with the text the worker reports it hashed (the plan answer's optional
/// `digest_input`): the first difference between that text and the RFC 8785 one.
pub fn digest_deviation_reported(body: &serde_json::Value, stored: &str, input: Option<&str>) -> String {
    let Some(input) = input else { return digest_deviation(body, stored) };
    let canon = canonical_text(body);
    let want = sha256_hex(&canon);
    let hashed = if sha256_hex(input) == stored {
        "the text it reports it hashed"
    } else {
        "a text other than the one it reports (its digest is not the SHA-256 of data.digest_input)"
    };
    match first_difference(&canon, input) {
        Some(d) => format!(
            "its request_digest is the SHA-256 of {hashed}, which is not the RFC 8785 text; they first differ at byte {}: expected `{}`, reported `{}`; stored digest {stored}, RFC 8785 digest {want}; expected canonical text: {}",
            d.offset,
            d.expected,
            d.actual,
            capped(&canon, 160)
        ),
        None => format!(
            "it reports the RFC 8785 text as its digest input, but its request_digest {stored} is not its SHA-256 ({want})"
        ),
    }
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
            // The first deviation in full; the others by their hashes, so the line stays readable.
            let why = if bad.is_empty() {
                digest_deviation(body, stored)
            } else {
                format!("its request_digest {stored} is not {want}")
            };
            let op = r.new_str("operation_id").unwrap_or("?");
            bad.push(Found::at(r.seq, format!("commit #{} by {} registered {op}: {why}", r.seq, r.writer)));
        }
    }
    if bad.len() > 4 {
        let rest: Vec<i64> = bad.drain(3..).flat_map(|f| f.commits).collect();
        let text = format!("{} more intent(s) with a non-canonical digest", rest.len());
        bad.push(Found::of(rest, text));
    }
    Check::from_found(name, bad, format!("{judged} registered intent(s), each digest canonical"))
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
            let text =
                format!("commit #{} by {}: intent {op} committed without a checkpoint of its run", r.seq, r.writer);
            bad.push(Found::at(r.seq, text));
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
                    let text = format!(
                        "commit #{} by {}: intent {op} committed with a run update that left the checkpoint as it was ({}); that checkpoint committed at #{} without any intent: the planned checkpoint committed apart from its intent",
                        r.seq,
                        r.writer,
                        cp.cloned().unwrap_or_default(),
                        u.seq
                    );
                    bad.push(Found::of([r.seq, u.seq], text));
                }
            }
        }
    }
    Check::from_found(
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
        assert!(c.evidence.contains(&wrong) && c.evidence.contains(&good), "both hashes: {}", c.evidence);
        assert!(c.evidence.contains("expected canonical text: {"), "{}", c.evidence);
        // Many deviations: the first in full, a few by their hashes, then a count.
        let many: Vec<CommitRow> = (1..=6).map(|i| intent(i, "7", json!({"n": i}), "00")).collect();
        let c = digests_are_canonical(&many, &[]);
        assert!(c.evidence.contains("expected canonical text: {\"n\":1}") && c.evidence.contains("; 3 more intent(s)"));
        assert!(c.evidence.len() < 1000, "{}", c.evidence);
        // The control plane's rows are not a worker's registration.
        assert!(digests_are_canonical(&[intent(1, "7", json!({}), "x")], &["w-a"]).passed());
    }

    #[test]
    fn the_first_difference_names_the_byte_and_whole_characters_around_it() {
        assert_eq!(first_difference("same", "same"), None);
        let d = first_difference("abc", "abd").unwrap();
        assert_eq!((d.offset, d.expected.as_str(), d.actual.as_str()), (2, "abc", "abd"));
        // One text ending early differs where it ends.
        assert_eq!(first_difference("abc", "ab").unwrap().offset, 2);
        // Multi-byte characters are never cut, and long texts are excerpted around the offset.
        let d = first_difference("caf\u{e9}", "caf\\u00e9").unwrap();
        assert_eq!((d.offset, d.expected.as_str(), d.actual.as_str()), (3, "caf\u{e9}", "caf\\u00e9"));
        let long = format!("{}X{}", "a".repeat(40), "b".repeat(40));
        let d = first_difference(&long, &long.replace('X', "Y")).unwrap();
        assert_eq!(d.offset, 40);
        assert_eq!(d.expected, format!("…{}X{}…", "a".repeat(16), "b".repeat(23)));
        assert!(capped(&"é".repeat(100), 11).ends_with("… (200 bytes in all)"));
    }

    #[test]
    fn a_recognised_non_canonical_digest_shows_where_its_text_differs() {
        let body = json!({"b": 1.0, "a": "\u{e9}"});
        // What json.dumps(body, sort_keys=True) hashes.
        let wrong = sha256_hex(r#"{"a": "\u00e9", "b": 1.0}"#);
        let ev = digest_deviation(&body, &wrong);
        assert!(ev.contains("json.dumps(sort_keys=True)"), "{ev}");
        assert!(ev.contains("first differ at byte 5: expected `{\"a\":\"\u{e9}\",\"b\":1}`"), "{ev}");
        assert!(ev.contains(&wrong) && ev.contains(&canonical_digest(&body)), "{ev}");
        // An unrecognised digest: both hashes and the expected text, and why no difference.
        let ev = digest_deviation(&body, "00");
        assert!(ev.contains("does not report the text it hashed") && ev.contains("{\"a\":\"\u{e9}\",\"b\":1}"), "{ev}");
        // A long body is capped, never a 5 KB line.
        let big = json!({"memo": "x".repeat(5000)});
        assert!(digest_deviation(&big, "00").len() < 600);
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
