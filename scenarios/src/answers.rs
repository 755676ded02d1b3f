//! The evidence [`fenceproof_harness::check::answers`] judges, read from an experiment's folder:
//! the harness's timeline (what it sent to whom) and every worker's events file (what each
//! answered), against the experiment's oracle rows.

use std::path::Path;

use fenceproof_harness::check::answers::{
    answers_agree_with_commits, dispatch_answers_agree, lease_answers_agree, tally, tally_of,
};
use fenceproof_harness::check::Check;
use fenceproof_harness::record::oracle::CommitRow;
use fenceproof_harness::HarnessError;
use serde_json::Value;

use crate::ctx::CONTROL;

fn lines(path: &Path) -> Result<Vec<Value>, HarnessError> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// The answers-against-commits checks of the experiment in `dir`.
pub fn judge(dir: &Path, rows: &[CommitRow]) -> Result<Vec<Check>, HarnessError> {
    judge_in(&lines(&dir.join("timeline.jsonl"))?, dir, rows)
}

/// The answers-against-commits checks of the workers whose events are in `workers` (a second
/// database's folder of a row), against that database's rows; `timeline` is the row's.
pub fn judge_in(timeline: &[Value], workers: &Path, rows: &[CommitRow]) -> Result<Vec<Check>, HarnessError> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(workers)? {
        let path = entry?.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else { continue };
        if let Some(target) = file.strip_prefix("worker-").and_then(|f| f.strip_suffix(".events.jsonl")) {
            events.extend(lines(&path)?.into_iter().map(|e| (target.to_string(), e)));
        }
    }
    let (acquires, releases) = (tally_of(timeline, &events, &["acquire"]), tally_of(timeline, &events, &["release"]));
    Ok(vec![
        answers_agree_with_commits(rows, &tally(timeline, &events), &[CONTROL]),
        lease_answers_agree(rows, &acquires, &releases, &[CONTROL]),
        dispatch_answers_agree(rows, &events),
    ])
}
