//! Which write path this process uses: the protocol's statements on the tables themselves, or the
//! fenced `fp_*` functions of migration 0002, which is all a member of the `fenceproof_worker` role
//! may call (spec section 12: state transitions go through controlled entry points, never through
//! arbitrary SQL).
//!
//! Both paths enforce the same rules. The direct path is what a library user with table privileges
//! gets by default; the reference worker runs the API path under the worker role. Mutants (broken
//! variants, see [`crate::mutant`]) exist only on the direct path, so a mutant worker needs table
//! privileges: which is precisely what the role boundary takes away.

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WritePath {
    /// Statements on the tables (needs INSERT/UPDATE privileges).
    #[default]
    Direct,
    /// Calls of the `fp_*` functions only (works under the `fenceproof_worker` role).
    Api,
}

impl WritePath {
    pub fn parse(s: &str) -> Option<WritePath> {
        match s {
            "direct" => Some(WritePath::Direct),
            "api" => Some(WritePath::Api),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WritePath::Direct => "direct",
            WritePath::Api => "api",
        }
    }
}

static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// Choose the write path for this process. A worker chooses once at start; the benchmark switches
/// between its phases, when no protocol call is in flight.
pub fn choose(path: WritePath) {
    CHOSEN.store(path as u8, Ordering::SeqCst);
}

/// The write path of this process (direct unless [`choose`] said otherwise).
pub fn current() -> WritePath {
    if CHOSEN.load(Ordering::SeqCst) == WritePath::Api as u8 {
        WritePath::Api
    } else {
        WritePath::Direct
    }
}

/// Whether writes go through the `fp_*` functions.
pub fn api() -> bool {
    current() == WritePath::Api
}
