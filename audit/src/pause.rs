//! How long worker A was held, read from the cell's own timeline: the harness records each stop of
//! A (SIGSTOP sent, or its cgroup frozen) and each time it lets A go on (SIGCONT sent, or thawed),
//! and the pause behind a verdict runs from the last stop to the last letting go. A pause undone
//! and made again (A resumed to leave its library's lock or transaction) counts from the last
//! stop: before it, A ran.

use fenceproof_harness::record::timeline::Entry;

/// The timeline action of a stop of a worker (the entry's target names it).
pub const STOP: &str = "stop";
/// The timeline action of a worker let go on after a stop.
pub const CONT: &str = "cont";

/// Milliseconds from `worker`'s last stop to the last time it was let go on after it; `None` when
/// it was never stopped, or never let go on (killed, or still stopped when the cell ended).
pub fn held_ms(entries: &[Entry], worker: &str) -> Option<i64> {
    let is = |e: &Entry, action: &str| e.action == action && e.target == worker;
    let stop = entries.iter().rposition(|e| is(e, STOP))?;
    let cont = entries[stop..].iter().find(|e| is(e, CONT))?;
    Some((cont.at_ms - entries[stop].at_ms).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(at_ms: f64, action: &str, target: &str) -> Entry {
        Entry {
            at_ms,
            wall: chrono::Utc::now(),
            actor: "harness".into(),
            action: action.into(),
            target: target.into(),
            detail: json!({}),
            fault: None,
        }
    }

    #[test]
    fn a_pause_runs_from_the_last_stop_to_the_last_cont() {
        let t = [entry(100.0, STOP, "A"), entry(2700.4, "spawn", "B"), entry(31_250.0, CONT, "A")];
        assert_eq!(held_ms(&t, "A"), Some(31_150));
        assert_eq!(held_ms(&t, "B"), None, "B was never stopped");
    }

    #[test]
    fn a_repeated_pause_counts_from_the_stop_that_held_and_a_stop_never_undone_is_none() {
        let t = [entry(100.0, STOP, "A"), entry(600.0, CONT, "A"), entry(900.0, STOP, "A"), entry(4000.0, CONT, "A")];
        assert_eq!(held_ms(&t, "A"), Some(3100), "A ran from 600 to 900 ms");
        let killed = [entry(100.0, STOP, "A"), entry(600.0, CONT, "A"), entry(900.0, STOP, "A")];
        assert_eq!(held_ms(&killed, "A"), None, "A was still stopped at the end");
        assert_eq!(held_ms(&killed[..1], "A"), None);
    }
}
