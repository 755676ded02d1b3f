//! A worker process (fenceproof-worker or a compatible binary) driven over JSON lines.
//!
//! The harness writes commands to the worker's stdin and reads its events from stdout; the worker
//! also appends them to its own events file. Every command and signal is entered in the harness's
//! timeline. Dropping a [`WorkerProc`] kills its process group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use crate::error::{HarnessError, Result};
use crate::procs::event_schema;
use crate::procs::flags::{self, Launch};

/// How long a worker whose stdout closed has to report its exit status.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How many of its stderr's last lines an exited worker's error shows.
pub const STDERR_LINES: usize = 3;
/// What a worker that never answered exited before.
pub const FIRST_ANSWER: &str = "answering its first command";

/// An exit status in words: `status 2`, or `killed by signal 9`.
pub fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "no status".to_string(),
    }
}

/// The last `n` non-empty lines of a file (each cut to 200 characters), joined with " | ".
pub fn stderr_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| l.chars().take(200).collect::<String>()).collect::<Vec<_>>().join(" | ")
}

/// The longest line a worker may print on stdout (one JSON event).
pub const MAX_LINE: usize = 1 << 20;
/// Events read ahead of the harness.
const EVENT_QUEUE: usize = 1024;
/// Unasked-for events kept while waiting for an answer; more is a flood.
pub const MAX_BACKLOG: usize = 10_000;
/// Events kept in `history`.
const MAX_HISTORY: usize = 10_000;

/// One line of at most MAX_LINE bytes (without its newline); `Ok(None)` at the end; `Err(start)`
/// with the line's first bytes when it is longer.
async fn read_bounded_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> std::result::Result<Option<String>, String> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = match r.fill_buf().await {
            Ok(c) => c,
            Err(_) => return Ok(None),
        };
        if chunk.is_empty() {
            return Ok((!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned()));
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take > MAX_LINE {
            let mut start = buf;
            start.extend_from_slice(&chunk[..take.min(80)]);
            return Err(String::from_utf8_lossy(&start[..start.len().min(80)]).into_owned());
        }
        buf.extend_from_slice(&chunk[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
    }
}
use crate::faults::{Pause, PauseKind, ProcessPause};
use crate::procs::registry::{self, Kind};
use crate::procs::spawn::prepare;
use crate::record::timeline::Timeline;

/// How to start one worker.
pub struct WorkerSpec {
    /// The harness's name for it ("a", "b", ...).
    pub name: String,
    /// Its owner id; it connects with this application_name.
    pub owner: String,
    pub binary: PathBuf,
    pub database_url: String,
    /// Folder for its events and stderr files.
    pub dir: PathBuf,
    /// Its mode, with the values of the mode's own flags (`--script …`, `--tools-addr`).
    pub launch: Launch,
    /// Further arguments: the flags passed always beyond the process's own (`--write-path`,
    /// `--secrets-dir`, `--trace-id`) and optional ones. A flag of another mode is refused.
    pub extra_args: Vec<String>,
}

impl WorkerSpec {
    /// Its command line after `--database-url`, `--owner` and `--events`: the mode's flags, then the
    /// extra arguments.
    fn args(&self) -> Vec<String> {
        [self.launch.args(), self.extra_args.clone()].concat()
    }

    /// The whole command line, judged against the contract's Flags table before anything starts.
    fn command(&self, url: &str, events: &Path) -> Result<std::process::Command> {
        let own = ["--database-url", url, "--owner", &self.owner, "--events", &events.display().to_string()]
            .map(String::from);
        let args = [own.to_vec(), self.args()].concat();
        flags::command_line(self.launch.mode(), &args)
            .map_err(|e| HarnessError::Worker { name: self.name.clone(), detail: e.to_string() })?;
        let mut cmd = std::process::Command::new(&self.binary);
        cmd.args(&args);
        Ok(cmd)
    }
}

/// Read the worker's stdout, one JSON event a line, into a channel.
///
/// Bounded both ways: a line longer than MAX_LINE ends the reading (the worker broke its
/// language), and at most EVENT_QUEUE events wait in the channel; beyond that the reader
/// stops reading, so a worker flooding its stdout blocks on its own pipe instead of growing
/// the harness's memory.
fn read_events(stdout: ChildStdout) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stdout);
        loop {
            let line = match read_bounded_line(&mut reader).await {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(start) => {
                    let _ = tx
                        .send(json!({ "event": "protocol_violation", "detail": format!("a line longer than {MAX_LINE} bytes (it starts: {start})") }))
                        .await;
                    break;
                }
            };
            let v = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "event": "unparsed", "line": line }));
            if tx.send(v).await.is_err() {
                break;
            }
        }
    });
    rx
}

/// `url` with its password taken out, and the password (percent-decoded), when it has one. A URL
/// that does not parse is returned as it is.
pub fn without_password(url: &str) -> (String, Option<String>) {
    let Ok(mut u) = url::Url::parse(url) else { return (url.to_string(), None) };
    let Some(pw) = u.password().map(percent_decode) else { return (url.to_string(), None) };
    if u.set_password(None).is_err() {
        return (url.to_string(), None);
    }
    (u.to_string(), Some(pw))
}

/// `%XX` sequences decoded (a URL's userinfo is percent-encoded).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub struct WorkerProc {
    pub name: String,
    pub owner: String,
    pub pid: Pid,
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::Receiver<Value>,
    /// Events received but not yet consumed by a wait.
    backlog: Vec<Value>,
    /// Every event received, in order.
    pub history: Vec<Value>,
    next_id: u64,
    timeline: Timeline,
    /// The name of each command sent, by id (to name the command an event answers).
    sent: std::collections::HashMap<u64, String>,
    /// The first event that broke the worker contract: every later wait fails with it.
    violation: Option<String>,
    /// When it was started, and how long it took to say it was ready (its measured start time,
    /// which every wait on it is granted beyond its timeout).
    spawned: std::time::Instant,
    ready_in: Option<Duration>,
    /// Where its stderr goes (its last lines name why it exited).
    stderr_path: PathBuf,
    /// Whether it has answered any command (a scripted step counts): one that exits before its
    /// first answer never started its part, and the row has no verdict.
    answered: bool,
}

impl WorkerProc {
    pub async fn spawn(spec: WorkerSpec, timeline: Timeline) -> Result<WorkerProc> {
        if !spec.binary.is_file() {
            return Err(HarnessError::Worker {
                name: spec.name,
                detail: format!("binary {} not found (build it with `cargo build --workspace`)", spec.binary.display()),
            });
        }
        let events_path = spec.dir.join(format!("worker-{}.events.jsonl", spec.name));
        let stderr_path = spec.dir.join(format!("worker-{}.stderr.log", spec.name));
        // Worker contract v2: no password on a command line (every user of the machine can read
        // those); it goes the libpq way, in the worker's environment.
        // A URL without one (a team's `--database-url`) leaves the worker what the harness was
        // given itself: PGPASSWORD, PGPASSFILE or ~/.pgpass, which libpq-style clients read alone.
        let (url, password) = without_password(&spec.database_url);
        let mut std_cmd = spec.command(&url, &events_path)?;
        if let Some(pw) = password {
            std_cmd.env("PGPASSWORD", pw);
        }
        let stderr = std::fs::File::create(&stderr_path)?;
        std_cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
        prepare(&mut std_cmd, Signal::SIGKILL, None);
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| HarnessError::Worker { name: spec.name.clone(), detail: format!("spawn failed: {e}") })?;
        let pid =
            Pid::from_raw(child.id().ok_or_else(|| HarnessError::Process("worker exited at once".into()))? as i32);
        registry::register(pid, Kind::Other);
        timeline.record(
            "harness",
            "spawn",
            &spec.name,
            json!({ "pid": pid.as_raw(), "owner": spec.owner, "mode": spec.launch.mode().name(), "args": spec.args() }),
        );

        let rx = read_events(child.stdout.take().expect("stdout piped"));
        let stdin = child.stdin.take();
        Ok(WorkerProc {
            name: spec.name,
            owner: spec.owner,
            pid,
            child,
            stdin,
            events: rx,
            backlog: Vec::new(),
            history: Vec::new(),
            next_id: 1,
            timeline,
            sent: std::collections::HashMap::new(),
            violation: None,
            spawned: std::time::Instant::now(),
            ready_in: None,
            stderr_path,
            answered: false,
        })
    }

    /// Send a command without waiting for its answer; returns its id.
    pub async fn send(&mut self, cmd: Value) -> Result<u64> {
        let mut checked = cmd.clone();
        checked["id"] = json!(self.next_id);
        if let Some(v) = event_schema::command_violation(&checked) {
            return Err(self.err(&format!(
                "the harness built a command outside the worker contract ({v}): {}",
                redacted(&checked)
            )));
        }
        self.send_any(cmd).await
    }

    /// Send a command of the reference worker's own, outside the worker contract (a team's worker
    /// is never sent one), and wait for its answer.
    pub async fn request_reference(&mut self, cmd: Value, timeout: Duration) -> Result<Value> {
        let id = self.send_any(cmd).await?;
        self.reply(id, timeout).await
    }

    async fn send_any(&mut self, mut cmd: Value) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        cmd["id"] = json!(id);
        let name = cmd["cmd"].as_str().unwrap_or_default().to_string();
        self.sent.insert(id, name);
        self.timeline.record("harness", "command", &self.name, redacted(&cmd));
        let mut line = serde_json::to_string(&cmd).expect("json");
        line.push('\n');
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| HarnessError::Worker { name: self.name.clone(), detail: "stdin closed".into() })?;
        let written = match stdin.write_all(line.as_bytes()).await {
            Ok(()) => stdin.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            // A closed pipe: the worker has exited (or closed its stdin), which says more than the pipe.
            return Err(match self.child.try_wait() {
                Ok(None) => self.err(&format!("write command: {e}")),
                _ => self.exited(&format!("answering command {id}")).await,
            });
        }
        Ok(id)
    }

    /// The error of a worker that exited while the harness needed it (its stdout closed, or its
    /// stdin): its exit status and the last lines of its stderr, and "before answering its first
    /// command" when it never answered one (it never started its part: no verdict, never a FAIL).
    async fn exited(&mut self, what: &str) -> HarnessError {
        // Its stdout is closed, so it is exiting: its status comes within a bounded moment.
        let status = match tokio::time::timeout(EXIT_GRACE, self.child.wait()).await {
            Ok(Ok(s)) => {
                registry::unregister(self.pid);
                self.timeline.record("harness", "exited", &self.name, json!({ "code": s.code() }));
                describe_status(s)
            }
            _ => format!("its status unknown: it closed its stdout and still ran after {EXIT_GRACE:?}"),
        };
        let before = if self.answered { what.to_string() } else { FIRST_ANSWER.to_string() };
        self.err(&format!("exited ({status}) before {before}; {}", self.stderr_said()))
    }

    /// The last lines of this worker's stderr, as one clause.
    fn stderr_said(&self) -> String {
        match stderr_tail(&self.stderr_path, STDERR_LINES) {
            t if t.is_empty() => "its stderr is empty".to_string(),
            t => format!("its stderr ends: {t}"),
        }
    }

    /// Wait for the answer to command `id`.
    pub async fn reply(&mut self, id: u64, timeout: Duration) -> Result<Value> {
        self.wait_event(&format!("answer to command {id}"), timeout, |e| e["id"] == json!(id)).await
    }

    /// Send a command and wait for its answer.
    pub async fn request(&mut self, cmd: Value, timeout: Duration) -> Result<Value> {
        let id = self.send(cmd).await?;
        self.reply(id, timeout).await
    }

    /// Wait for the first event matching `pred` (earlier unmatched events stay in the backlog).
    pub async fn wait_event(&mut self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        if let Some(v) = &self.violation {
            return Err(self.deviates(v));
        }
        if let Some(i) = self.backlog.iter().position(&pred) {
            return Ok(self.backlog.remove(i));
        }
        // The timeout is granted the harness's own delay meanwhile and this worker's start time.
        let began = std::time::Instant::now();
        let mut deadline = timeout;
        loop {
            match tokio::time::timeout_at((began + deadline).into(), self.events.recv()).await {
                Err(_) => {
                    let due = began + deadline;
                    crate::lag::record(due, std::time::Instant::now().saturating_duration_since(due));
                    let extra = self.ready_in.unwrap_or_default();
                    let (grant, lag) = crate::lag::granted(timeout, began, extra, crate::wait::MAX_STRETCH);
                    if grant > deadline {
                        deadline = grant;
                        continue;
                    }
                    return Err(HarnessError::timed_out(format!("worker {}: {what}", self.name), began.elapsed(), lag));
                }
                Ok(None) => return Err(self.exited(what).await),
                Ok(Some(ev)) => {
                    if ev["event"] == "protocol_violation" {
                        return Err(self.deviates(ev["detail"].as_str().unwrap_or("broke the language")));
                    }
                    self.remember(&ev);
                    if let Some(v) = &self.violation {
                        return Err(self.deviates(v));
                    }
                    if pred(&ev) {
                        return Ok(ev);
                    }
                    self.backlog.push(ev);
                    if self.backlog.len() > MAX_BACKLOG {
                        let sample = self.backlog.last().map(|e| e.to_string()).unwrap_or_default();
                        return Err(self.deviates(&format!(
                            "sent more than {MAX_BACKLOG} events no command asked for while the harness waited for {what} (the last: {})",
                            sample.chars().take(200).collect::<String>()
                        )));
                    }
                }
            }
        }
    }

    /// Keep `ev` in the history (the newest MAX_HISTORY events), and judge it against the worker
    /// contract: the first event that breaks it is kept as this worker's violation.
    fn remember(&mut self, ev: &Value) {
        self.answered |= ev["id"].is_u64();
        if self.ready_in.is_none() && ev["event"] == "ready" {
            self.ready_in = Some(self.spawned.elapsed());
        }
        if self.violation.is_none() {
            self.violation = self.contract_violation(ev);
            if let Some(v) = &self.violation {
                self.timeline.record(
                    &format!("worker:{}", self.name),
                    "contract_violation",
                    &self.name,
                    json!({ "detail": v }),
                );
            }
        }
        if self.history.len() >= MAX_HISTORY {
            self.history.drain(..MAX_HISTORY / 2);
        }
        self.history.push(ev.clone());
    }

    /// What is wrong with `ev` under the worker contract's schema, naming the field and the command
    /// it answers. (Conformance advises, without stopping anything, when an answer is not named
    /// after its command.)
    fn contract_violation(&self, ev: &Value) -> Option<String> {
        if ev["event"] == "unparsed" {
            let line: String = ev["line"].as_str().unwrap_or_default().chars().take(200).collect();
            return Some(format!("printed a line that is not JSON, breaking the worker contract: {line}"));
        }
        let answers = ev["id"].as_u64().and_then(|id| self.sent.get(&id).map(|c| (id, c.as_str())));
        let of = match answers {
            Some((id, cmd)) => format!("its answer to command {id} `{cmd}`"),
            None => format!("its event `{}`", ev["event"].as_str().unwrap_or("?")),
        };
        let shown: String = ev.to_string().chars().take(300).collect();
        event_schema::event_violation(ev)
            .map(|v| format!("{of} breaks the worker contract (v{}) at {v}: {shown}", event_schema::VERSION))
    }

    /// What this worker printed that breaks the worker contract, if anything: a line that is not
    /// JSON or longer than the limit, an event outside the schema (the events already received
    /// are read first).
    pub fn deviation(&mut self) -> Option<String> {
        let _ = self.poll_event(|_| false);
        let overlong = || self.history.iter().find(|e| e["event"] == "protocol_violation");
        self.violation.clone().or_else(|| overlong().and_then(|e| e["detail"].as_str().map(String::from)))
    }

    /// Without waiting: the first already-received event matching `pred`, if any.
    pub fn poll_event(&mut self, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        while let Ok(ev) = self.events.try_recv() {
            self.remember(&ev);
            if self.backlog.len() < MAX_BACKLOG {
                self.backlog.push(ev);
            }
        }
        let i = self.backlog.iter().position(pred)?;
        Some(self.backlog.remove(i))
    }

    /// SIGSTOP this worker (confirmed stopped by the kernel).
    pub async fn pause(&self) -> Result<Pause> {
        self.pause_with(PauseKind::Sigstop).await
    }

    /// Pause the whole worker process: SIGSTOP, or freeze it in a cgroup (recorded by the fault).
    pub async fn pause_with(&self, kind: PauseKind) -> Result<Pause> {
        crate::faults::inject(ProcessPause::new(self.pid, &self.name, kind), &self.timeline).await
    }

    /// End a pause of this worker (SIGCONT, or thaw).
    pub async fn resume(&self, p: Pause) -> Result<()> {
        p.heal().await
    }

    /// SIGKILL the worker's group and reap it.
    pub async fn kill(&mut self) -> Result<()> {
        self.timeline.record("harness", "sigkill", &self.name, json!({ "pid": self.pid.as_raw() }));
        let _ = killpg(self.pid, Signal::SIGKILL);
        let _ = self.child.wait().await;
        registry::unregister(self.pid);
        Ok(())
    }

    /// Ask the worker to exit and wait for it; kill it if it does not exit in time.
    pub async fn shutdown(&mut self, timeout: Duration) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            registry::unregister(self.pid);
            return Ok(());
        }
        if self.send(json!({ "cmd": "exit" })).await.is_ok() {
            self.stdin = None;
            if tokio::time::timeout(timeout, self.child.wait()).await.is_ok() {
                self.timeline.record("harness", "exited", &self.name, json!({}));
                registry::unregister(self.pid);
                return Ok(());
            }
        }
        self.kill().await
    }

    /// Wait for the worker to exit on its own (scripted mode); returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>> {
        let status = tokio::time::timeout(timeout, self.child.wait()).await.map_err(|_| HarnessError::Timeout {
            what: format!("worker {} to exit", self.name),
            after_ms: timeout.as_millis(),
        })??;
        registry::unregister(self.pid);
        // Drain what it printed before exiting.
        self.drain().await;
        self.timeline.record("harness", "exited", &self.name, json!({ "code": status.code() }));
        // Events nobody waited for are judged too (a scripted worker is only waited on to exit).
        if let Some(v) = &self.violation {
            return Err(self.deviates(v));
        }
        // A worker that exits without a single answer (a scripted one's first step included)
        // never started its part: no verdict on the protocol, whatever its status.
        if !self.answered {
            return Err(self.err(&format!(
                "exited ({}) before {FIRST_ANSWER}; {}",
                describe_status(status),
                self.stderr_said()
            )));
        }
        Ok(status.code())
    }

    /// Wait on `fut` (a wait on this worker's progress seen elsewhere, as a scripted worker's
    /// commits in the database) unless the worker exits first without a single answer: then the
    /// error names its exit status and its stderr, not the wait that could never end. A worker
    /// that exits after answering leaves the wait to decide.
    pub async fn unless_exited<T>(&mut self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::pin!(fut);
        tokio::select! {
            r = &mut fut => return r,
            _ = self.child.wait() => {}
        }
        self.drain().await;
        if !self.answered {
            return Err(self.exited(FIRST_ANSWER).await);
        }
        fut.await
    }

    /// Read what an exited worker printed before it exited (each event within 500 ms).
    async fn drain(&mut self) {
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(500), self.events.recv()).await {
            self.remember(&ev);
            if self.backlog.len() < MAX_BACKLOG {
                self.backlog.push(ev);
            }
        }
    }

    /// The events file this worker writes.
    pub fn events_file(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("worker-{name}.events.jsonl"))
    }

    fn err(&self, detail: &str) -> HarnessError {
        HarnessError::Worker { name: self.name.clone(), detail: detail.to_string() }
    }

    /// What this worker printed breaks the worker contract (`detail` says how).
    fn deviates(&self, detail: &str) -> HarnessError {
        HarnessError::WorkerContract { name: self.name.clone(), detail: detail.to_string() }
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = killpg(self.pid, Signal::SIGCONT);
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
        registry::unregister(self.pid);
    }
}

/// A command as the timeline keeps it: the value of every field marked secret
/// (`{"$secret": {"name": N, "value": V}}`) replaced by its reference `{"$secret": N}`.
pub fn redacted(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.get("$secret").is_some_and(|s| s.get("value").is_some()) => {
            json!({ "$secret": m["$secret"]["name"].clone() })
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), redacted(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(redacted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_leaves_the_url_for_the_environment() {
        let (url, pw) = without_password("postgres://app:s%40cr%3At@db.internal:5432/appdb?sslmode=disable");
        assert_eq!(url, "postgres://app@db.internal:5432/appdb?sslmode=disable");
        assert_eq!(pw.as_deref(), Some("s@cr:t"));
        let (url, pw) = without_password("postgres://app@/appdb?host=/tmp/sock");
        assert_eq!((url.as_str(), pw), ("postgres://app@/appdb?host=/tmp/sock", None));
    }

    #[test]
    fn commands_are_recorded_without_secret_values() {
        let cmd = json!({"cmd": "plan", "request": {"n": 1, "auth": {"$secret": {"name": "k", "value": "sk_live_x"}},
                         "list": [{"$secret": {"name": "p", "value": "4111"}}], "ref": {"$secret": "already"}}});
        let r = redacted(&cmd);
        assert_eq!(r["request"]["auth"], json!({"$secret": "k"}));
        assert_eq!(r["request"]["list"][0], json!({"$secret": "p"}));
        assert_eq!(r["request"]["ref"], json!({"$secret": "already"}));
        assert!(!r.to_string().contains("sk_live_x") && !r.to_string().contains("4111"));
        assert_eq!(r["request"]["n"], 1);
    }
}
