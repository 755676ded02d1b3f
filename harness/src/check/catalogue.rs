//! The rule catalogue: every normative rule of spec §04–§10 and §12 (§13 where it is testable),
//! with the checkers that judge it from evidence and the experiments that exercise it.

use serde::Serialize;

/// One normative rule of the spec.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    /// A short, stable id (`lease.renew-unexpired`).
    pub id: &'static str,
    /// The spec section (`05.2`).
    pub section: &'static str,
    /// The rule in one line.
    pub statement: &'static str,
    /// The checks that judge it (names as they appear in checks.json; a trailing `*` matches a
    /// prefix).
    pub checkers: &'static [&'static str],
    /// The experiments (matrix ids) that exercise it.
    pub experiments: &'static [&'static str],
}

pub const RULES: &[Rule] = &[];
