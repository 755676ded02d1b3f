//! The output flags every command shares, declared once: `--json` (one document on stdout) and
//! `--quiet` (only what failed and the closing line). Each command flattens [`Output`] into its
//! flags; what its JSON document holds is in docs/results.md.

/// `--json` and `--quiet`.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct Output {
    /// Print one JSON document on stdout instead of the text: the fields of the report file the
    /// command writes, plus "report", its folder (docs/results.md lists each command's).
    #[arg(long, global = true)]
    pub json: bool,
    /// Print only what failed and the closing line, and no progress on stderr (for CI logs).
    #[arg(long, global = true, conflicts_with = "json")]
    pub quiet: bool,
}

impl Output {
    /// How the command prints, with the progress lines on stderr silenced by either flag.
    pub fn print(self) -> crate::cmd::Print {
        crate::cmd::Print::new(self.json, self.quiet)
    }
}
