//! The whole machine's CPU pressure, read from Linux's pressure-stall information
//! (`/proc/pressure/cpu`, its `some` line: the time during which at least one runnable task waited
//! for a core). The harness's own delay ([`crate::lag`]) sees only its thread; a worker, the fake
//! tools or the server can be the starved process while the harness runs on time. A row that ends
//! on a wait that ran out while every process on the machine queued for the cores this much is no
//! verdict about the worker either.

use std::time::{Duration, Instant};

/// Where the kernel publishes it (absent on kernels without PSI: then nothing is claimed).
const PSI_CPU: &str = "/proc/pressure/cpu";

/// A window is starved when some task waited for a core at least this long in all ...
pub const STALL_TOTAL: Duration = Duration::from_secs(2);

/// ... and for at least this share of the window (one part in [`STALL_SHARE`]).
pub const STALL_SHARE: u32 = 4;

/// The kernel's running stall total at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    stalled: Duration,
    at: Instant,
}

/// How long some task waited for a core during a window, and how long the window was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub stalled: Duration,
    pub window: Duration,
}

/// The running total now, or `None` where the kernel does not publish it.
pub fn mark() -> Option<Mark> {
    let text = std::fs::read_to_string(PSI_CPU).ok()?;
    Some(Mark { stalled: parse_some_total(&text)?, at: Instant::now() })
}

impl Mark {
    /// The stall from this mark until now (`None` where it cannot be read any more).
    pub fn since(&self) -> Option<Stall> {
        let now = mark()?;
        Some(Stall { stalled: now.stalled.saturating_sub(self.stalled), window: now.at - self.at })
    }
}

impl Stall {
    /// Whether the machine, not one process, was too busy for the window's waits.
    pub fn starved(&self) -> bool {
        self.stalled >= STALL_TOTAL && self.stalled * STALL_SHARE >= self.window
    }

    /// "some process waited for a core 9100 ms of the row's 31000 ms".
    pub fn describe(&self) -> String {
        format!(
            "some process waited for a core {} ms of the row's {} ms (the machine's CPU pressure)",
            self.stalled.as_millis(),
            self.window.as_millis()
        )
    }
}

/// The `total=` of the `some` line, in microseconds.
fn parse_some_total(text: &str) -> Option<Duration> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let total = line.split_whitespace().find_map(|f| f.strip_prefix("total="))?;
    total.parse::<u64>().ok().map(Duration::from_micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_some_line_gives_the_running_total() {
        let text =
            "some avg10=6.96 avg60=5.73 avg300=10.98 total=89481562\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        assert_eq!(parse_some_total(text), Some(Duration::from_micros(89_481_562)));
        assert_eq!(parse_some_total("full avg10=0.00 total=7\n"), None, "no some line: nothing claimed");
        assert_eq!(parse_some_total("some avg10=1.0 total=x\n"), None);
    }

    #[test]
    fn a_window_is_starved_only_by_a_long_and_large_stall() {
        let s = |stalled: u64, window: u64| Stall {
            stalled: Duration::from_millis(stalled),
            window: Duration::from_millis(window),
        };
        assert!(s(9_100, 31_000).starved(), "9 s of 31 s queued for a core");
        assert!(!s(1_500, 3_000).starved(), "under two seconds in all");
        assert!(!s(3_000, 60_000).starved(), "a twentieth of the window");
        assert!(s(9_100, 31_000).describe().contains("9100 ms of the row's 31000 ms"));
    }

    #[test]
    fn a_kernel_that_publishes_pressure_is_read() {
        // Where the file exists its real format must parse (a change of format would otherwise
        // silently turn every machine into a calm one); where it does not, nothing is claimed.
        let published = std::path::Path::new(PSI_CPU).exists();
        assert_eq!(mark().is_some(), published, "{PSI_CPU} exists: {published}");
        if let Some(m) = mark() {
            assert!(m.since().is_some(), "the file read a moment ago reads again");
        }
    }
}
