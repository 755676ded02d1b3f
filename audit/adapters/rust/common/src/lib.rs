//! The adapter protocol of `audit/adapters/common.py`, for the Rust libraries' adapters: the same
//! command line (`setup`, `enqueue`, `worker` with the same flags), the same job body (START and
//! END recorded with the fake tools, the gate file in between, then the outcome the worker was
//! told) and the same JSON events on stdout (secondary evidence: the verdicts come from the tools'
//! ledger and the commit triggers). Every database session takes `application_name` from
//! `PGAPPNAME`, which the harness sets per process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// How long the body waits for its gate before giving up.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the body calls its `tick` (a heartbeat a library asks long jobs to make) when the
/// harness does not say (`--heartbeat-s`).
pub const TICK: Duration = Duration::from_millis(500);

/// The command line.
#[derive(Debug, Clone)]
pub struct Args {
    pub cmd: String,
    pub dsn: String,
    pub outcome: String,
    pub name: String,
    pub owner: String,
    pub tools: String,
    pub gates: PathBuf,
    /// The settings the harness runs the library at (`fast`, `production`) and their numbers: the
    /// stall threshold, the heartbeat interval (0: none) and the recovery's cadence, in seconds.
    pub settings: String,
    pub stall_s: f64,
    pub heartbeat_s: f64,
    pub sweep_s: f64,
    pub recover: bool,
}

impl Args {
    /// Parse `std::env::args()`; a bad command line is one line on stderr and exit 2.
    pub fn parse() -> Args {
        match Self::parse_from(std::env::args().skip(1).collect()) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("audit adapter: {e}");
                std::process::exit(2);
            }
        }
    }

    fn parse_from(argv: Vec<String>) -> Result<Args, String> {
        let mut it = argv.into_iter();
        let cmd = it.next().ok_or("usage: setup|enqueue|worker --dsn DSN [...]")?;
        if !matches!(cmd.as_str(), "setup" | "enqueue" | "worker") {
            return Err(format!("unknown command {cmd:?}"));
        }
        let mut a = Args {
            cmd,
            dsn: String::new(),
            outcome: "success".into(),
            name: String::new(),
            owner: String::new(),
            tools: String::new(),
            gates: PathBuf::new(),
            settings: "fast".into(),
            stall_s: 2.0,
            heartbeat_s: TICK.as_secs_f64(),
            sweep_s: 0.25,
            recover: false,
        };
        while let Some(flag) = it.next() {
            if flag == "--recover" {
                a.recover = true;
                continue;
            }
            let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--dsn" => a.dsn = v,
                "--outcome" => a.outcome = v,
                "--name" => a.name = v,
                "--owner" => a.owner = v,
                "--tools" => a.tools = v,
                "--gates" => a.gates = v.into(),
                "--settings" => a.settings = v,
                "--stall-s" => a.stall_s = seconds(&flag, &v)?,
                "--heartbeat-s" => a.heartbeat_s = seconds(&flag, &v)?,
                "--sweep-s" => a.sweep_s = seconds(&flag, &v)?,
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        if a.owner.is_empty() {
            a.owner = a.name.clone();
        }
        if a.dsn.is_empty() {
            return Err("--dsn is required".into());
        }
        Ok(a)
    }

    /// The stall threshold as a duration.
    pub fn stall(&self) -> Duration {
        Duration::from_secs_f64(self.stall_s)
    }

    /// The heartbeat interval as a duration, or `None` when the settings give none (the body then
    /// never calls its `tick`).
    pub fn heartbeat(&self) -> Option<Duration> {
        (self.heartbeat_s > 0.0).then(|| Duration::from_secs_f64(self.heartbeat_s))
    }

    /// The recovery's cadence as a duration.
    pub fn sweep(&self) -> Duration {
        Duration::from_secs_f64(self.sweep_s)
    }

    /// How long the body waits for its gate: the fast bound, and past a production threshold the
    /// harness may wait out before opening it.
    pub fn gate_timeout(&self) -> Duration {
        GATE_TIMEOUT + Duration::from_secs_f64(4.0 * (self.stall_s + self.sweep_s))
    }
}

/// A number of seconds, not negative, or the flag's one-line complaint.
fn seconds(flag: &str, v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x >= 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("{flag} {v:?} is not a number of seconds")),
    }
}

/// The application_name the harness gave this process.
pub fn app_name() -> String {
    std::env::var("PGAPPNAME").unwrap_or_else(|_| "fp-audit".into())
}

/// One JSON event line on stdout.
pub fn emit(event: &str, mut fields: Value) {
    let at = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    fields["event"] = json!(event);
    fields["pid"] = json!(std::process::id());
    fields["at"] = json!(at);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{fields}");
    let _ = out.flush();
}

/// One real side effect: a `plain` resource with the fake tools (fsynced before they answer).
pub fn record(tools: &str, job: &str, worker: &str, phase: &str) -> Result<(), String> {
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let body = json!({
        "operation_id": format!("audit/{job}/{worker}/{phase}/{nonce:08x}"),
        "request": {"job": job, "worker": worker, "phase": phase, "pid": std::process::id()},
    })
    .to_string();
    let mut s = TcpStream::connect(tools).map_err(|e| format!("fake tools at {tools}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let req = format!(
        "POST /tools/plain/create HTTP/1.1\r\nHost: {tools}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    let status = answer.split_whitespace().nth(1).unwrap_or("");
    if status == "200" || status == "201" {
        Ok(())
    } else {
        Err(format!("fake tools answered {status:?}"))
    }
}

/// How the body ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    Success,
    Fail,
    Retry,
}

/// The job's work, blocking (call it from `spawn_blocking`): START, wait for the gate (calling
/// `tick` every `--heartbeat-s`, never when it is 0: an error from it means the library stopped this execution, which is said
/// as an `aborted` event and returned), the checkpoint when the outcome is `checkpoint`, END; then
/// how the worker was told to end.
pub fn body(
    a: &Args,
    job: &str,
    mut tick: impl FnMut() -> Result<(), String>,
    checkpoint: impl FnOnce() -> Result<(), String>,
) -> Result<End, String> {
    emit("start", json!({"job": job, "worker": a.name}));
    record(&a.tools, job, &a.name, "start")?;
    let gate = a.gates.join(&a.name);
    let started = Instant::now();
    let every = a.heartbeat();
    let mut next_tick = every.map(|d| Instant::now() + d);
    while !gate.exists() {
        if started.elapsed() > a.gate_timeout() {
            return Err(format!("gate {} never opened", gate.display()));
        }
        if let (Some(at), Some(d)) = (next_tick, every) {
            if Instant::now() >= at {
                if let Err(e) = tick() {
                    emit("aborted", json!({"worker": a.name, "reason": e}));
                    return Err(e);
                }
                next_tick = Some(Instant::now() + d);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if a.outcome == "checkpoint" {
        let r = checkpoint();
        emit(
            "written",
            json!({"job": job, "worker": a.name, "write": "checkpoint", "outcome": r.clone().err().unwrap_or("returned".into())}),
        );
    }
    record(&a.tools, job, &a.name, "end")?;
    emit("end", json!({"job": job, "worker": a.name, "outcome": a.outcome}));
    Ok(match a.outcome.as_str() {
        "fail" => End::Fail,
        "retry" => End::Retry,
        _ => End::Success,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_defaults_to_the_name_and_bad_flags_are_refused() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let a = Args::parse_from(v("worker --dsn d --name A --recover")).unwrap();
        assert_eq!((a.owner.as_str(), a.recover), ("A", true));
        let a = Args::parse_from(v("worker --dsn d --name B --owner A")).unwrap();
        assert_eq!(a.owner, "A");
        assert!(Args::parse_from(v("worker --dsn d --bogus 1")).is_err());
        let a = Args::parse_from(v("worker --dsn d --settings production --stall-s 300 --heartbeat-s 30 --sweep-s 60"))
            .unwrap();
        assert_eq!(
            (a.settings.as_str(), a.stall(), a.heartbeat(), a.sweep()),
            ("production", Duration::from_secs(300), Some(Duration::from_secs(30)), Duration::from_secs(60))
        );
        let none = Args::parse_from(v("worker --dsn d --heartbeat-s 0")).unwrap();
        assert_eq!(none.heartbeat(), None, "0 is no heartbeat");
        assert!(Args::parse_from(v("worker --dsn d --stall-s -1")).is_err());
        assert!(Args::parse_from(v("nope --dsn d")).is_err());
    }
}
