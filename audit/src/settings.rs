//! The stall-recovery settings an audit runs at: `fast` (every library's recovery as tight as it
//! allows: a heartbeat older than 2 s is stalled) or `production` (each library's documented
//! defaults, stated with the file and function they come from in [`crate::libraries`]). The
//! harness hands the numbers to the adapters (`--stall-s`, `--heartbeat-s`, `--sweep-s`), and every
//! wait for a library's recovery scales with them.

use std::time::Duration;

/// Which settings a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Settings {
    /// The tightest recovery each library allows (the published matrix).
    #[default]
    Fast,
    /// Each library's documented defaults.
    Production,
}

impl Settings {
    /// The name on the command line, in the adapters' arguments and in the results.
    pub fn name(self) -> &'static str {
        match self {
            Settings::Fast => "fast",
            Settings::Production => "production",
        }
    }

    /// The settings called `name`, or one line saying which exist.
    pub fn parse(name: &str) -> Result<Settings, String> {
        match name {
            "fast" => Ok(Settings::Fast),
            "production" => Ok(Settings::Production),
            _ => Err(format!("unknown settings {name:?}; known: fast, production")),
        }
    }
}

/// The numbers of a library's stall recovery under one set of settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// The stall threshold: a claim (heartbeat, lock, visibility timeout) older than this is stale.
    pub stall_s: f64,
    /// How often a live worker proves it is alive (0: the library has no heartbeat here).
    pub heartbeat_s: f64,
    /// How often the recovery looks for stalled jobs (a sweep, a poll, a dequeue's wait).
    pub sweep_s: f64,
    /// What the library adds before a recovered job runs again (an abort wait, a recovery delay).
    pub extra_s: f64,
}

/// How far past the threshold a takeover may come before the harness calls it absent: a loaded
/// machine's scheduling, B's start, and the recovery's own statements.
const TAKEOVER_MARGIN_S: f64 = 30.0;

impl Timing {
    /// How long the library's recovery may take to hand a stalled job to B: the threshold, one
    /// missed heartbeat, one sweep, what the library adds, and a margin.
    pub fn takeover(&self) -> Duration {
        Duration::from_secs_f64(self.stall_s + self.heartbeat_s + self.sweep_s + self.extra_s + TAKEOVER_MARGIN_S)
    }

    /// How long a live worker's long job runs before the harness takes "nobody took over" as the
    /// answer: five stall thresholds (at least 10 s), and one recovery's cadence beyond them.
    pub fn long_job(&self) -> Duration {
        Duration::from_secs_f64((self.stall_s * 5.0).max(10.0) + self.sweep_s + self.extra_s)
    }

    /// The adapter arguments that carry these settings.
    pub fn args(&self, settings: Settings) -> Vec<String> {
        vec![
            "--settings".into(),
            settings.name().into(),
            "--stall-s".into(),
            self.stall_s.to_string(),
            "--heartbeat-s".into(),
            self.heartbeat_s.to_string(),
            "--sweep-s".into(),
            self.sweep_s.to_string(),
        ]
    }
}

/// A library's documented production defaults: the numbers a `production` run uses, where each
/// comes from (file and function of the pinned source, or its documentation), and what of it the
/// run changes, when anything.
#[derive(Debug, Clone, Copy)]
pub struct Production {
    pub timing: Timing,
    /// The defaults, each with the file and function it is read from.
    pub defaults: &'static str,
    /// What a `production` run keeps from the fast settings, and why (empty when nothing).
    pub deviation: &'static str,
}

/// The experiment that is every library's control of the fault (A killed, not paused).
pub const KILL_CONTROL: &str = "kill-control";
/// The control row's cells a `production` run keeps: the plainest pause beside the kill.
const CONTROL_CELLS: &[&str] = &["pause-early-success", KILL_CONTROL];

/// Whether a `production` run that was not given its experiments runs `library` × `experiment`:
/// the cells that FAIL at the fast settings in `fast` (a published `summary.json`), each library's
/// `kill-control` (its recovery does hand a dead worker's job over at these settings), and the
/// control row's plainest pause beside its kill. A PASS at the tightest settings is not rerun: a
/// longer threshold gives a paused worker no new way to write.
pub fn production_keeps(fast: &serde_json::Value, library: &str, control: bool, experiment: &str) -> bool {
    let failed = fast
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["library"] == library && c["experiment"] == experiment && c["verdict"].as_str() == Some("FAIL"));
    failed || experiment == KILL_CONTROL || (control && CONTROL_CELLS.contains(&experiment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_production_run_keeps_the_fast_fails_and_the_controls() {
        let fast = serde_json::json!([
            {"library": "q", "experiment": "pause-early-success", "verdict": "FAIL"},
            {"library": "q", "experiment": "pause-late-success", "verdict": "PASS"},
            {"library": "r", "experiment": "pause-early-success", "verdict": "PASS"}
        ]);
        assert!(production_keeps(&fast, "q", false, "pause-early-success"));
        assert!(!production_keeps(&fast, "q", false, "pause-late-success"));
        assert!(!production_keeps(&fast, "r", false, "pause-early-success"), "a PASS is not rerun");
        assert!(production_keeps(&fast, "r", false, KILL_CONTROL));
        assert!(production_keeps(&fast, "reference", true, "pause-early-success"));
        assert!(!production_keeps(&fast, "reference", true, "pause-late-success"));
    }

    #[test]
    fn names_round_trip_and_an_unknown_name_is_one_line() {
        for s in [Settings::Fast, Settings::Production] {
            assert_eq!(Settings::parse(s.name()), Ok(s));
        }
        let e = Settings::parse("slow").unwrap_err();
        assert!(e.contains("fast, production") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn the_takeover_bound_outlasts_threshold_heartbeat_and_sweep() {
        let graphile = Timing { stall_s: 300.0, heartbeat_s: 30.0, sweep_s: 60.0, extra_s: 30.0 };
        assert!(graphile.takeover() > Duration::from_secs(420), "{:?}", graphile.takeover());
        let fast = Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 0.25, extra_s: 0.0 };
        assert!(fast.takeover() < graphile.takeover() && fast.takeover() > Duration::from_secs(2));
        assert!(graphile.long_job() >= Duration::from_secs(1500) && fast.long_job() >= Duration::from_secs(10));
    }

    #[test]
    fn the_adapter_arguments_carry_every_number() {
        let t = Timing { stall_s: 30.0, heartbeat_s: 10.0, sweep_s: 5.0, extra_s: 0.0 };
        let a = t.args(Settings::Production);
        assert_eq!(a, ["--settings", "production", "--stall-s", "30", "--heartbeat-s", "10", "--sweep-s", "5"]);
    }
}
