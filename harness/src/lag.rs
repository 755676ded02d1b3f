//! The harness's own scheduling delay, measured: a timer on the session's thread that wakes late
//! says how long the harness itself could not run (a blocking call on its thread, or a machine
//! with more runnable work than cores). Every delay beyond a timer's ordinary jitter ([`FLOOR`])
//! is kept (the newest [`KEEP`]), so a wait can ask how much of its own time the harness lost
//! ([`since`]) and grant itself that much more, and a row that still could not reach a verdict
//! is told apart from a hang: STARVED, with the measured delay, instead of a bare ERROR.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A timer waking later than this is delayed; below it, ordinary jitter.
pub const FLOOR: Duration = Duration::from_millis(20);

/// How many delays are kept (at one per tick of a 100 ms watch: minutes of a starved machine).
pub const KEEP: usize = 4096;

/// A row that could not reach a verdict was starved when the harness lost at least this much of
/// its time during the row in all...
pub const STARVED_TOTAL: Duration = Duration::from_millis(1000);

/// ... or was held at least this long at once.
pub const STARVED_WORST: Duration = Duration::from_millis(500);

static DELAYS: Mutex<VecDeque<(Instant, Duration)>> = Mutex::new(VecDeque::new());

/// How much of a window the harness lost to its own scheduling delay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lag {
    /// Every delay (beyond [`FLOOR`]) in the window, added up.
    pub total: Duration,
    /// The longest single one.
    pub worst: Duration,
}

impl Lag {
    /// Whether this much delay starved a wait (see [`STARVED_TOTAL`], [`STARVED_WORST`]).
    pub fn starved(&self) -> bool {
        self.total >= STARVED_TOTAL || self.worst >= STARVED_WORST
    }

    /// "the harness ran 2900 ms late in all (at worst 1200 ms at once)".
    pub fn describe(&self) -> String {
        format!(
            "the harness ran {} ms late in all (at worst {} ms at once)",
            self.total.as_millis(),
            self.worst.as_millis()
        )
    }
}

/// Record that a timer due at `due` woke `late` after it.
pub fn record(due: Instant, late: Duration) {
    if late < FLOOR {
        return;
    }
    let mut d = DELAYS.lock().unwrap_or_else(|p| p.into_inner());
    if d.len() >= KEEP {
        d.pop_front();
    }
    d.push_back((due, late));
}

/// The delays of timers due at or after `start`.
pub fn since(start: Instant) -> Lag {
    let d = DELAYS.lock().unwrap_or_else(|p| p.into_inner());
    d.iter()
        .filter(|(due, _)| *due >= start)
        .fold(Lag::default(), |l, (_, late)| Lag { total: l.total + *late, worst: l.worst.max(*late) })
}

/// Wake every `tick` on the calling task's runtime forever, recording each wake-up's delay;
/// `on_late` sees every delay (beyond [`FLOOR`]) as it is measured.
pub async fn watch(tick: Duration, mut on_late: impl FnMut(Duration)) {
    loop {
        let due = Instant::now() + tick;
        tokio::time::sleep(tick).await;
        let late = Instant::now().saturating_duration_since(due);
        record(due, late);
        if late >= FLOOR {
            on_late(late);
        }
    }
}

/// How long a wait of `timeout` begun at `began` may run, granted the harness's delay since: the
/// timeout plus what the harness lost meanwhile plus `extra` (a measured start time), at most
/// `stretch` times the timeout.
pub fn granted(timeout: Duration, began: Instant, extra: Duration, stretch: u32) -> (Duration, Lag) {
    let lag = since(began);
    ((timeout + lag.total + extra).min(timeout * stretch), lag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_add_up_within_their_window_and_a_wait_is_granted_them() {
        let start = Instant::now() + Duration::from_secs(3600);
        record(start - Duration::from_secs(1), Duration::from_millis(900));
        record(start, Duration::from_millis(300));
        record(start + Duration::from_secs(1), Duration::from_millis(700));
        record(start + Duration::from_secs(2), FLOOR - Duration::from_millis(1));
        let l = since(start);
        assert_eq!(l, Lag { total: Duration::from_millis(1000), worst: Duration::from_millis(700) });
        assert!(l.starved(), "{}", l.describe());
        assert_eq!(since(start + Duration::from_secs(3)), Lag::default());
        assert!(!Lag { total: Duration::from_millis(999), worst: Duration::from_millis(499) }.starved());
        assert!(Lag { total: Duration::ZERO, worst: STARVED_WORST }.starved());

        // A wait is granted the delay it lost, up to its stretch (one test: the record is global,
        // and this window starts after the one above).
        let began = start + Duration::from_secs(3600);
        record(began + Duration::from_millis(5), Duration::from_millis(2900));
        let t = Duration::from_secs(15);
        let (g, lag) = granted(t, began, Duration::from_secs(2), 3);
        assert_eq!((g, lag.worst), (Duration::from_millis(19_900), Duration::from_millis(2900)));
        assert_eq!(granted(Duration::from_secs(1), began, Duration::ZERO, 2).0, Duration::from_secs(2));
    }
}
