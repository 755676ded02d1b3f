//! Which write path this process uses: the protocol's statements on the tables themselves, or the
//! fenced `fp_*` functions of migration 0002, which is all a member of the `fenceproof_worker` role
//! may call (spec section 12: state transitions go through controlled entry points, never through
//! arbitrary SQL).
//!
//! Both paths enforce the same rules. The direct path is what a library user with table privileges
//! gets by default; the reference worker runs the API path under the worker role. Mutants (broken
//! variants, see [`crate::mutant`]) exist only on the direct path, so a mutant worker needs table
//! privileges: which is precisely what the role boundary takes away.

use std::sync::OnceLock;

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

static CHOSEN: OnceLock<WritePath> = OnceLock::new();

/// Choose the write path for this process, once. Returns false if it was already chosen otherwise.
pub fn choose(path: WritePath) -> bool {
    CHOSEN.get_or_init(|| path) == &path
}

/// The write path of this process (direct unless [`choose`] said otherwise).
pub fn current() -> WritePath {
    CHOSEN.get().copied().unwrap_or_default()
}

/// Whether writes go through the `fp_*` functions.
pub fn api() -> bool {
    current() == WritePath::Api
}
