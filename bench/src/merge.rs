//! `bench merge`: the logs of the load hosts of one [`crate::plan`] joined into one report: per
//! host its transactions, renewals, latency and round trip; over all hosts the rate in the common
//! window and one sizing answer against the contract.
//!
//! pgbench's per-transaction log (`-l`) has one line per transaction: `client transaction latency_us
//! script epoch_s epoch_us [schedule_lag_us]`; with `-R` the latency counts from the scheduled start.
//! A transaction that was skipped or failed has a word in the latency field and is counted apart.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plan::HostPlan;

/// One host's log, read.
#[derive(Debug, Clone, Serialize)]
pub struct HostLog {
    pub dir: PathBuf,
    pub host: usize,
    pub transactions: u64,
    pub renewals: u64,
    pub not_done: u64,
    /// First and last completion, in seconds since the epoch.
    pub first_s: f64,
    pub last_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The host's `SELECT 1` round trip (pgbench's average over its probe), if it ran.
    pub round_trip_ms: Option<f64>,
}

/// The merged report.
#[derive(Debug, Clone, Serialize)]
pub struct Merged {
    pub hosts: Vec<HostLog>,
    /// From the first completion to the last, over all hosts.
    pub window_s: f64,
    pub transactions: u64,
    pub renewals: u64,
    pub renewals_per_s: f64,
    pub p99_ms: f64,
    pub sizing: String,
}

impl Merged {
    /// Name the server by its facts (read where the logs are merged) instead of by the plan's name.
    pub fn with_server(&mut self, server: &str, facts_line: &str) {
        self.sizing = format!("{} {facts_line}", self.sizing.replace(&format!(" Server: {server}."), ""));
    }
}

/// One completed transaction: its completion time (s) and latency (µs); `None` for a line that
/// records a skipped or failed transaction.
fn parse_line(line: &str) -> Option<Option<(f64, u64)>> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 6 {
        return None;
    }
    let Ok(latency) = f[2].parse::<u64>() else { return Some(None) };
    let (s, us) = (f[4].parse::<f64>().ok()?, f[5].parse::<f64>().ok()?);
    Some(Some((s + us / 1e6, latency)))
}

/// Read one host folder: `host.json`, `log/renew*`, `ping.txt`.
pub fn read_host(dir: &Path) -> Result<(HostPlan, HostLog), String> {
    let plan: HostPlan = serde_json::from_str(
        &std::fs::read_to_string(dir.join("host.json"))
            .map_err(|e| format!("{}: {e}", dir.join("host.json").display()))?,
    )
    .map_err(|e| format!("{}: {e}", dir.join("host.json").display()))?;
    let logs = dir.join("log");
    let mut done: Vec<(f64, u64)> = Vec::new();
    let mut not_done = 0;
    for e in std::fs::read_dir(&logs).map_err(|e| format!("{}: {e}", logs.display()))?.flatten() {
        if !e.file_name().to_string_lossy().starts_with("renew") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).map_err(|err| format!("{}: {err}", e.path().display()))?;
        for line in text.lines() {
            match parse_line(line) {
                Some(Some(t)) => done.push(t),
                Some(None) => not_done += 1,
                None => {}
            }
        }
    }
    if done.is_empty() {
        return Err(format!("{}: no completed transaction in its pgbench logs", dir.display()));
    }
    let mut lat: Vec<u64> = done.iter().map(|d| d.1).collect();
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
    let round_trip_ms = std::fs::read_to_string(dir.join("ping.txt"))
        .ok()
        .and_then(|t| crate::pgbench::parse(&t))
        .map(|r| r.latency_avg_ms);
    let log = HostLog {
        dir: dir.to_path_buf(),
        host: plan.host,
        transactions: done.len() as u64,
        renewals: done.len() as u64 * plan.spec.batch(),
        not_done,
        first_s: done.iter().map(|d| d.0).fold(f64::INFINITY, f64::min),
        last_s: done.iter().map(|d| d.0).fold(0.0, f64::max),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        round_trip_ms,
    };
    Ok((plan, log))
}

/// Join the host folders of one plan into one report.
pub fn merge(dirs: &[PathBuf]) -> Result<Merged, String> {
    let mut hosts = Vec::new();
    let mut plans: Vec<HostPlan> = Vec::new();
    for d in dirs {
        let (p, l) = read_host(d)?;
        if let Some(first) = plans.first() {
            if first.spec.schema != p.spec.schema {
                return Err(format!(
                    "{} is of another plan ({}, not {})",
                    d.display(),
                    p.spec.schema,
                    first.spec.schema
                ));
            }
        }
        if plans.iter().any(|q| q.host == p.host) {
            return Err(format!("{}: host {} is given twice", d.display(), p.host + 1));
        }
        plans.push(p);
        hosts.push(l);
    }
    let spec = plans.first().ok_or("no host folder given")?.spec.clone();
    let first = hosts.iter().map(|h| h.first_s).fold(f64::INFINITY, f64::min);
    let last = hosts.iter().map(|h| h.last_s).fold(0.0, f64::max);
    let window_s = (last - first).max(1e-3);
    let transactions = hosts.iter().map(|h| h.transactions).sum();
    let renewals: u64 = hosts.iter().map(|h| h.renewals).sum();
    let renewals_per_s = renewals as f64 / window_s;
    let p99_ms = hosts.iter().map(|h| h.p99_ms).fold(0.0, f64::max);
    let missing = spec.hosts.saturating_sub(hosts.len());
    let need = spec.need_per_s();
    // The hosts offered PLAN_MARGIN × the need: a database that keeps up renews the whole need.
    let holds = missing == 0 && renewals_per_s >= need && p99_ms < spec.renewal_timeout_ms as f64;
    let rt: Vec<String> = hosts
        .iter()
        .map(|h| format!("host {}: {}", h.host + 1, h.round_trip_ms.map_or("?".into(), |r| format!("{r:.2} ms"))))
        .collect();
    let sizing = format!(
        "{} active runs at a {} ms heartbeat need {need:.0} renewals/s. {} of {} load hosts together renewed \
         {renewals_per_s:.0}/s ({renewals} renewals in {window_s:.1} s), p99 {p99_ms:.1} ms (worst host) against the \
         renewal timeout of {} ms: {} (offered {:.2}× the need). Server: {}. Round trip from each load host: {}.",
        spec.per_owner() * spec.owners(),
        spec.heartbeat_ms,
        hosts.len(),
        spec.hosts,
        spec.renewal_timeout_ms,
        if holds { "this database holds it" } else { "this database does NOT hold it" },
        crate::plan::PLAN_MARGIN,
        spec.server,
        rt.join(", "),
    );
    Ok(Merged { hosts, window_s, transactions, renewals, renewals_per_s, p99_ms, sizing })
}

/// The report as text.
pub fn summary(m: &Merged) -> String {
    let mut s = String::new();
    for h in &m.hosts {
        s.push_str(&format!(
            "host {}: {} transactions ({} renewals, {} skipped or failed), p50 {:.1} ms, p99 {:.1} ms  [{}]\n",
            h.host + 1,
            h.transactions,
            h.renewals,
            h.not_done,
            h.p50_ms,
            h.p99_ms,
            h.dir.display()
        ));
    }
    s.push_str(&format!(
        "all hosts: {} transactions, {:.0} renewals/s over {:.1} s\nsizing: {}\n",
        m.transactions, m.renewals_per_s, m.window_s, m.sizing
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_read_and_skips_counted_apart() {
        assert_eq!(parse_line("3 17 2500 0 1700000000 250000 12"), Some(Some((1700000000.25, 2500))));
        assert_eq!(parse_line("3 18 skipped 0 1700000000 260000 0"), Some(None));
        assert_eq!(parse_line("garbage"), None);
    }
}
