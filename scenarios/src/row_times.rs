//! How long each row took the last time it ran to a verdict here, kept beside the runs
//! (`<reports>/row-times.json`), so that rows side by side start longest first: a long row started
//! last holds the whole matrix after every other row has finished. Only the start order uses it;
//! verdicts never do. Without a history (a fresh clone) the order falls back to the rows' needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fenceproof_harness::report::{ExperimentResult, Outcome};

/// The history file under a reports folder.
pub fn file(reports: &Path) -> PathBuf {
    reports.join("row-times.json")
}

/// Row id → milliseconds, or empty when there is no readable history.
pub fn load(reports: &Path) -> BTreeMap<String, u64> {
    std::fs::read_to_string(file(reports)).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
}

/// Merge the rows of `results` that reached a verdict into the history (written whole, then
/// renamed, so a run beside this one reads either the old file or the new one).
pub fn record(reports: &Path, results: &[ExperimentResult]) {
    let mut times = load(reports);
    for r in results.iter().filter(|r| matches!(r.outcome, Outcome::Pass | Outcome::Fail)) {
        times.insert(r.id.clone(), u64::try_from(r.duration_ms).unwrap_or(u64::MAX));
    }
    let Ok(text) = serde_json::to_string_pretty(&times) else { return };
    let tmp = reports.join(format!(".row-times.{}.json", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, file(reports)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, outcome: Outcome, ms: u128) -> ExperimentResult {
        ExperimentResult {
            id: id.into(),
            title: String::new(),
            outcome,
            duration_ms: ms,
            observations: String::new(),
            checks: Vec::new(),
            error: None,
            reproduce: String::new(),
            evidence: String::new(),
        }
    }

    #[test]
    fn verdicts_are_kept_and_errors_leave_the_old_time() {
        let dir = std::env::temp_dir().join(format!("fp-row-times-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(load(&dir).is_empty(), "no history yet");
        record(&dir, &[result("A", Outcome::Pass, 800), result("B", Outcome::Fail, 3000)]);
        record(&dir, &[result("A", Outcome::Error, 90_000), result("C", Outcome::Pass, 10)]);
        let t = load(&dir);
        assert_eq!((t["A"], t["B"], t["C"]), (800, 3000, 10));
        std::fs::write(file(&dir), "not json").unwrap();
        assert!(load(&dir).is_empty(), "an unreadable history is no history");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
