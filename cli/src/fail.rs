//! The ways a command gives up: bad input (one line, the usage exit code), a harness failure
//! (one line, the harness exit code), and a worker whose own output breaks the worker contract
//! (one line, the conformance exit code).

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

/// A harness error, in one line: a worker whose output breaks the worker contract deviates (exit
/// 4, as a conformance deviation); a team schema the protocol cannot run on is bad input (exit 2);
/// anything else leaves no verdict (exit 3).
pub fn harness_error(e: &fenceproof_harness::HarnessError) -> u8 {
    eprintln!("fenceproof: {e}");
    match e {
        fenceproof_harness::HarnessError::WorkerContract { .. } => exit::CONFORMANCE,
        fenceproof_harness::HarnessError::TeamSchema(_) => exit::USAGE,
        _ => exit::HARNESS,
    }
}
