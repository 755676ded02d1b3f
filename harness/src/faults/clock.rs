//! The database server's own clock as a fault: libfaketime (Debian `libfaketime`) preloaded under
//! `postgres`, reading a timestamp file the harness rewrites at run time (`FAKETIME_NO_CACHE`), with
//! the monotonic clock left alone so the server's own timeouts still work. Writing an absolute
//! time freezes `clock_timestamp()` at that instant, which makes the protocol's boundary instants
//! exact: a lease whose `expires_at` equals the clock at the check, a claim due at that very
//! microsecond. A relative offset (`+1h`, `-30m`) jumps it forward or back. The clock is the
//! server's own, never the machine's. In a container of fenceproof's image the file is the
//! container's `/tmp/faketime`, rewritten with a bounded `docker exec`.
//!
//! As a fault ([`ClockFault`]): injected at a setting, moved while injected
//! ([`Injected::move_to`], each move recorded as a change of the fault), healed back to real time
//! (`+0`).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::fault::{Fault, Injected};
use crate::error::{HarnessError, Result};

/// Where Debian puts the preload library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A clock file for one server: on this machine, or inside a container of fenceproof's image
/// (`/tmp/faketime`, written there by its entrypoint from `FP_FAKETIME`).
#[derive(Debug, Clone)]
pub struct ServerClock {
    pub file: PathBuf,
    /// The container whose clock this is, when it is one.
    pub container: Option<String>,
}

impl ServerClock {
    /// A clock file in `dir` (created readable by the server's user), starting at `initial`.
    pub fn create(dir: &Path, initial: &str) -> Result<ServerClock> {
        if !Path::new(LIBFAKETIME).is_file() {
            return Err(HarnessError::Other(format!(
                "the database clock fault needs libfaketime ({LIBFAKETIME}); install it with apt-get install libfaketime (scripts/setup.sh does)"
            )));
        }
        std::fs::create_dir_all(dir)?;
        // Absolute: the server reads it from its own working directory (its data folder).
        let file = std::fs::canonicalize(dir)?.join("faketime");
        let clock = ServerClock { file, container: None };
        clock.set(initial)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(&clock.file, std::fs::Permissions::from_mode(0o644))?;
        Ok(clock)
    }

    /// The clock of container `id` (started with `FP_FAKETIME`).
    pub fn in_container(id: &str) -> ServerClock {
        ServerClock { file: PathBuf::from("/tmp/faketime"), container: Some(id.to_string()) }
    }

    /// The environment the server must start with.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), LIBFAKETIME.into()),
            ("FAKETIME_TIMESTAMP_FILE".into(), self.file.display().to_string()),
            ("FAKETIME_NO_CACHE".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }

    /// Set the server's clock: an absolute `YYYY-MM-DD hh:mm:ss[.ffffff]` freezes it there; `+1h`
    /// or `-30m` offsets it from the real time. Written to a temporary file and renamed, so the
    /// server never reads half a line.
    pub fn set(&self, spec: &str) -> Result<()> {
        if let Some(id) = &self.container {
            // Bounded: `timeout` kills a docker exec that hangs.
            let out = std::process::Command::new("timeout")
                .args(["10", "docker", "exec", id, "sh", "-c"])
                .arg(r#"printf '%s\n' "$1" > /tmp/faketime.new && mv /tmp/faketime.new /tmp/faketime"#)
                .args(["sh", spec])
                .output()?;
            if !out.status.success() {
                return Err(HarnessError::Other(format!(
                    "setting the container's clock to {spec}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            return Ok(());
        }
        let tmp = self.file.with_extension("new");
        std::fs::write(&tmp, format!("{spec}\n"))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, &self.file)?;
        Ok(())
    }
}

/// The server's clock set by the harness: at `at` once injected, back to real time when healed.
pub struct ClockFault {
    pub clock: ServerClock,
    at: String,
    server_reads: Option<String>,
    /// The server was started with this clock and has committed nothing before it.
    fresh: bool,
}

/// The setting a healed clock returns to: real time.
pub const REAL_TIME: &str = "+0";

impl ClockFault {
    pub fn new(clock: &ServerClock, at: &str) -> ClockFault {
        ClockFault { clock: clock.clone(), at: at.to_string(), server_reads: None, fresh: false }
    }

    /// What the server's `clock_timestamp()` read at this setting, for the evidence.
    pub fn reading(mut self, server_reads: &str) -> ClockFault {
        self.server_reads = Some(server_reads.to_string());
        self
    }

    /// The server was started with this clock: no commit of it read another (recorded as
    /// `"fresh": true`, so a judge of its history knows the setting moved no clock it had read).
    pub fn on_fresh_server(mut self) -> ClockFault {
        self.fresh = true;
        self
    }
}

impl Fault for ClockFault {
    fn name(&self) -> &'static str {
        "server-clock"
    }

    fn target(&self) -> String {
        "database".into()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("clock_set", "clock_reset")
    }

    async fn inject(&mut self) -> Result<Value> {
        self.clock.set(&self.at)?;
        let mut detail = json!({"at": self.at});
        if let Some(r) = &self.server_reads {
            detail["server_reads"] = json!(r);
        }
        if self.fresh {
            detail["fresh"] = json!(true);
        }
        Ok(detail)
    }

    async fn heal(&mut self) -> Result<()> {
        self.clock.set(REAL_TIME)
    }

    fn heal_now(&mut self) {
        let _ = self.clock.set(REAL_TIME);
    }
}

impl Injected<ClockFault> {
    /// Move the injected clock to `at` (see [`ServerClock::set`]), recorded as a change of the fault.
    pub fn move_to(&self, at: &str) -> Result<()> {
        self.clock.set(at)?;
        self.record_change("clock_set", json!({"at": at}));
        Ok(())
    }
}
