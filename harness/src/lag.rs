//! The harness's own scheduling delay, measured: a timer on the session's thread that wakes late
//! says how long the harness itself could not run (a blocking call on its thread, or a machine
//! with more runnable work than cores). Every delay beyond a timer's ordinary jitter ([`FLOOR`])
//! is kept (the newest [`KEEP`]; a wait records how late its own timer woke as well), so a wait can ask how much of its own time the harness lost
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

/// The delays of timers due from `start` until now.
pub fn since(start: Instant) -> Lag {
    between(start, Instant::now())
}

/// The delays of timers due from `start` to `end`. Each delay is the stretch of time from when
/// a timer was due to when it woke; the same stall seen by several timers (the watch and a wait)
/// counts once: the total is the length of the union of those stretches.
pub fn between(start: Instant, end: Instant) -> Lag {
    let mut spans: Vec<(Instant, Instant)> = {
        let d = DELAYS.lock().unwrap_or_else(|p| p.into_inner());
        d.iter().filter(|(due, _)| *due >= start && *due <= end).map(|(due, late)| (*due, *due + *late)).collect()
    };
    spans.sort();
    let mut lag = Lag::default();
    let mut open: Option<(Instant, Instant)> = None;
    for (a, b) in spans {
        lag.worst = lag.worst.max(b - a);
        open = match open {
            Some((oa, ob)) if a <= ob => Some((oa, ob.max(b))),
            Some((oa, ob)) => {
                lag.total += ob - oa;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((oa, ob)) = open {
        lag.total += ob - oa;
    }
    lag
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
    grant(timeout, since(began), extra, stretch)
}

fn grant(timeout: Duration, lag: Lag, extra: Duration, stretch: u32) -> (Duration, Lag) {
    ((timeout + lag.total + extra).min(timeout * stretch), lag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record is global (other tests' watches write to it too): this one reads closed windows
    /// in the past, where nothing else records.
    #[test]
    fn delays_add_up_within_their_window_and_a_wait_is_granted_them() {
        let base = Instant::now().checked_sub(Duration::from_secs(60)).expect("a machine up for a minute");
        let ms = Duration::from_millis;
        record(base - ms(1000), ms(900));
        record(base, ms(300));
        record(base + ms(1000), ms(700));
        record(base + ms(2000), FLOOR - ms(1));
        let l = between(base, base + ms(5000));
        assert_eq!(l, Lag { total: ms(1000), worst: ms(700) });
        assert!(l.starved(), "{}", l.describe());
        assert_eq!(between(base + ms(3000), base + ms(5000)), Lag::default());
        // One stall seen by two timers (the watch's and a wait's) counts once.
        record(base + ms(10_000), ms(1500));
        record(base + ms(10_050), ms(1450));
        record(base + ms(12_000), ms(100));
        assert_eq!(between(base + ms(9000), base + ms(13_000)), Lag { total: ms(1600), worst: ms(1500) });
        assert!(!Lag { total: ms(999), worst: ms(499) }.starved());
        assert!(Lag { total: Duration::ZERO, worst: STARVED_WORST }.starved());

        let lost = Lag { total: ms(2900), worst: ms(2900) };
        assert_eq!(grant(Duration::from_secs(15), lost, ms(2000), 3).0, ms(19_900));
        assert_eq!(grant(Duration::from_secs(1), lost, Duration::ZERO, 2).0, ms(2000));
    }
}
