//! pgbench as the reference load driver: the same SQL, the same client count and the same server
//! as our driver, so the ratio of the two rates is the overhead of our driver itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// What pgbench reported.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct PgbenchResult {
    pub tps: f64,
    pub latency_avg_ms: f64,
    pub transactions: u64,
    /// CPU seconds pgbench itself used (user + system), from the kernel's accounting of the child.
    #[serde(default)]
    pub client_cpu_s: f64,
}

/// How long pgbench runs: for a duration, or a fixed number of transactions per client.
#[derive(Debug, Clone, Copy)]
pub enum Load {
    For(Duration),
    Transactions(u64),
}

/// CPU seconds (user + system) of `who` so far.
pub fn cpu_seconds(who: nix::sys::resource::UsageWho) -> f64 {
    match nix::sys::resource::getrusage(who) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => 0.0,
    }
}

/// Find pgbench beside the server binaries, else on PATH.
pub fn locate(pg_bin_dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = pg_bin_dir.map(|d| d.join("pgbench")).filter(|p| p.is_file()) {
        return Some(p);
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("pgbench")).find(|p| p.is_file())
}

/// pgbench's worker threads (`-j`) for `clients`: two, as the machine has two cores; the load
/// generator's own driver phase runs the same number.
pub fn threads(clients: usize) -> usize {
    clients.clamp(1, 2)
}

/// `url` as pgbench (libpq) takes it: the connection URI with its password taken out, and the
/// password apart, for `PGPASSWORD` (never on a command line, where every user of the machine
/// reads it). Socket URLs (`postgres://u:pw@/db?host=/dir`) are made parseable first.
pub fn conninfo(url: &str) -> Result<(String, Option<String>), String> {
    let full = fenceproof_harness::db::external::with_host(url);
    url::Url::parse(&full).map_err(|e| format!("bad URL: {e}"))?;
    Ok(fenceproof_harness::procs::worker::without_password(&full))
}

/// Run `script` with `clients` clients for `duration` (whole seconds, at least 1) against `url`,
/// with prepared statements (as our driver uses), under the offered-rate ceiling if one is set.
/// pgbench is a child that dies with this future: Ctrl-C drops it, and with it the load, before the
/// run's schema is dropped.
pub async fn run(
    pgbench: &Path,
    url: &str,
    script: &Path,
    clients: usize,
    load: Load,
) -> Result<PgbenchResult, String> {
    let (conn, password) = conninfo(url)?;
    let threads = threads(clients);
    let amount = match load {
        Load::For(d) => ["-T".to_string(), d.as_secs().max(1).to_string()],
        Load::Transactions(t) => ["-t".to_string(), t.max(1).to_string()],
    };
    let cpu0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
    let mut cmd = tokio::process::Command::new(pgbench);
    cmd.kill_on_drop(true);
    // And with the harness itself: a SIGKILLed bench leaves no load running on the team's server.
    fenceproof_harness::procs::spawn::prepare(cmd.as_std_mut(), nix::sys::signal::Signal::SIGKILL, None);
    cmd.args(["-n", "-M", "prepared", "-c", &clients.to_string(), "-j", &threads.to_string()])
        // Every client starts with `rev=0`: scripts that carry the revision of their last write
        // (`neutral::Script::carries_revision`) begin at the revision their runs were reset to.
        .args(["-D", "rev=0"])
        .args(amount)
        .arg("-f")
        .arg(script);
    if let Some(r) = crate::driver::rate_ceiling() {
        cmd.args(["-R", &format!("{r:.0}")]);
    }
    // A URL without a password leaves pgbench what the user gave this process (PGPASSWORD,
    // ~/.pgpass), as libpq would.
    cmd.arg(&conn);
    if let Some(p) = password {
        cmd.env("PGPASSWORD", p);
    }
    let out = cmd.output().await.map_err(|e| format!("cannot run {}: {e}", pgbench.display()))?;
    let client_cpu_s = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN) - cpu0;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!("pgbench failed: {}{}", text, String::from_utf8_lossy(&out.stderr)));
    }
    let mut r = parse(&text).ok_or_else(|| format!("cannot read pgbench's output: {text}"))?;
    r.client_cpu_s = client_cpu_s;
    Ok(r)
}

/// Read tps, average latency and the transaction count from pgbench's summary.
pub fn parse(text: &str) -> Option<PgbenchResult> {
    let value_after = |key: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.trim_start().starts_with(key))?;
        line.split('=').nth(1)?.split_whitespace().next()?.parse().ok()
    };
    let transactions = text
        .lines()
        .find(|l| l.starts_with("number of transactions actually processed"))?
        .split(':')
        .nth(1)?
        .split_whitespace()
        .next()?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    Some(PgbenchResult {
        tps: value_after("tps")?,
        latency_avg_ms: value_after("latency average")?,
        transactions,
        client_cpu_s: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pgbench_15_summary() {
        let text = "transaction type: raw.sql\nscaling factor: 1\nquery mode: prepared\nnumber of clients: 8\n\
                    number of threads: 2\nmaximum number of tries: 1\nduration: 2 s\n\
                    number of transactions actually processed: 16634\nnumber of failed transactions: 0 (0.000%)\n\
                    latency average = 0.961 ms\ninitial connection time = 9.734 ms\n\
                    tps = 8321.490135 (without initial connection time)\n";
        let r = parse(text).unwrap();
        assert_eq!(r.transactions, 16634);
        assert!((r.tps - 8321.490135).abs() < 1e-6 && (r.latency_avg_ms - 0.961).abs() < 1e-9);
        assert!(parse("nothing here").is_none());
    }

    #[test]
    fn the_password_leaves_the_uri() {
        let (c, p) = conninfo("postgres://app:p%40s+s@db.example:6432/appdb?options=-csearch_path%3Dfp_x").unwrap();
        assert_eq!(c, "postgres://app@db.example:6432/appdb?options=-csearch_path%3Dfp_x");
        assert_eq!(p.as_deref(), Some("p@s+s"));
        let (c, p) = conninfo("postgres://app:pw@/appdb?host=/tmp/sock").unwrap();
        assert!(!c.contains("pw") && c.contains("host=/tmp/sock"), "{c}");
        assert_eq!(p.as_deref(), Some("pw"));
        assert_eq!(conninfo("postgres://app@h/db").unwrap().1, None);
    }
}
