//! The two ways a command gives up: bad input (one line, the usage exit code) and a harness
//! failure (one line, the harness exit code).

use fenceproof_harness::report::exit;

/// Say what was wrong with the input, in one line; the usage exit code.
pub fn usage(msg: impl std::fmt::Display) -> u8 {
    eprintln!("fenceproof: {msg}");
    exit::USAGE
}

/// Say what went wrong in the harness itself, in one line; the harness-failure exit code.
pub fn harness_failed(e: impl std::fmt::Display) -> u8 {
    eprintln!("fenceproof: {e}");
    exit::HARNESS
}
