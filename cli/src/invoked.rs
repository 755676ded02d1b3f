//! How this program was started, for the reproduce lines: they must run as printed.

/// The command that runs `verify` the way this process was run: `FENCEPROOF_PROGRAM` when a
/// wrapper sets it (the Justfile's `verify` recipe sets `just verify`), else the path this program
/// was invoked by (`./target/debug/fenceproof`, or `fenceproof` when it was found on PATH)
/// followed by `verify`.
pub fn program() -> String {
    if let Some(p) = std::env::var("FENCEPROOF_PROGRAM").ok().filter(|p| !p.trim().is_empty()) {
        return p;
    }
    let argv0 = std::env::args_os().next().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
    let argv0 = if argv0.is_empty() { "fenceproof".to_string() } else { argv0 };
    format!("{} verify", fenceproof_scenarios::runner::shell_word(&argv0))
}
