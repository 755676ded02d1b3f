//! The native backend: a throwaway PostgreSQL cluster from the machine's binaries.
//!
//! initdb into a private temp folder (owned by the unprivileged `postgres` user when the harness is
//! root), start `postgres` directly as our child (not through pg_ctl, so we hold its pid) on a free
//! loopback port and a private socket folder, wait until it answers, and on drop shut it down
//! (fast, then SIGKILL of its whole group) and remove the folder. The server log goes to a file the
//! caller names, normally inside the run's report folder.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::{Pid, User};

use crate::db::pgbin::PgBin;
use crate::db::pristine;
use crate::db::Backend;
use crate::error::{HarnessError, Result};
use crate::procs::registry::{self, Kind};
use crate::procs::signals;
use crate::procs::spawn::{prepare, RunAs};

/// The database superuser name inside throwaway clusters.
pub const SUPERUSER: &str = "fenceproof";

pub struct NativeCluster {
    bin: PgBin,
    root: PathBuf,
    port: u16,
    child: Option<Child>,
    version: String,
    /// Settings on top of [`SERVER_SETTINGS`], as `-c name=value`.
    extra: Vec<(String, String)>,
    /// Environment of the server process (e.g. libfaketime's, for a clock fault).
    env: Vec<(String, String)>,
}

/// Extra server settings, as `-c name=value`.
pub const SERVER_SETTINGS: &[(&str, &str)] = &[
    // Durability against OS crashes is not what these experiments test; skipping fsync keeps
    // the suite fast. Commit semantics towards clients are unchanged.
    ("fsync", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "200"),
    ("shared_buffers", "64MB"),
    ("log_lock_waits", "on"),
    ("deadlock_timeout", "200ms"),
    ("log_line_prefix", "%m [%p] app=%a "),
    ("log_min_messages", "warning"),
];

impl NativeCluster {
    /// Create and start a cluster; `log` receives the server's stderr.
    pub async fn start(bin: PgBin, log: &Path) -> Result<NativeCluster> {
        NativeCluster::start_with(bin, log, Vec::new()).await
    }

    /// Create and start a cluster with extra server settings.
    pub async fn start_with(bin: PgBin, log: &Path, extra: Vec<(String, String)>) -> Result<NativeCluster> {
        NativeCluster::start_with_env(bin, log, extra, Vec::new()).await
    }

    /// Create and start a cluster whose server process gets `env` (initdb does not).
    pub async fn start_with_env(
        bin: PgBin,
        log: &Path,
        extra: Vec<(String, String)>,
        env: Vec<(String, String)>,
    ) -> Result<NativeCluster> {
        let run_as = unprivileged_user()?;
        sweep_stale_roots();
        let root = make_root(run_as)?;
        registry::register_dir(root.clone());
        let mut cluster = NativeCluster { version: bin.version(), bin, root, port: 0, child: None, extra, env };
        cluster.initdb(run_as).await?;
        cluster.port = crate::db::ports::free_port()?;
        cluster.spawn(run_as, log)?;
        cluster.wait_ready(log).await?;
        Ok(cluster)
    }

    /// Create a streaming standby of `primary` (pg_basebackup, then `standby.signal`), connecting
    /// with `application_name` = `name`, and start it.
    pub async fn start_standby(primary: &NativeCluster, name: &str, log: &Path) -> Result<NativeCluster> {
        let run_as = unprivileged_user()?;
        let root = make_root(run_as)?;
        registry::register_dir(root.clone());
        let bin = primary.bin.clone();
        let mut standby = NativeCluster {
            version: bin.version(),
            bin,
            root,
            port: 0,
            child: None,
            extra: primary.extra.clone(),
            env: primary.env.clone(),
        };
        primary.base_backup_into(&standby.data(), run_as).await?;
        std::fs::write(standby.data().join("standby.signal"), "")?;
        let conninfo = format!(
            "\nprimary_conninfo = 'host=127.0.0.1 port={} user={SUPERUSER} application_name={name}'\n",
            primary.port
        );
        let auto = standby.data().join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto).unwrap_or_default();
        conf.push_str(&conninfo);
        std::fs::write(&auto, conf)?;
        if let Some(u) = run_as {
            for f in ["standby.signal", "postgresql.auto.conf"] {
                let _ = nix::unistd::chown(&standby.data().join(f), Some(u.uid), Some(u.gid));
            }
        }
        standby.port = crate::db::ports::free_port()?;
        standby.spawn(run_as, log)?;
        standby.wait_ready(log).await?;
        Ok(standby)
    }

    /// Take a base backup of this running server (pg_basebackup, WAL streamed along, fast
    /// checkpoint) into a folder of its own; [`NativeCluster::restore`] puts it back.
    pub async fn base_backup(&self) -> Result<PathBuf> {
        let run_as = unprivileged_user()?;
        let root = make_root(run_as)?;
        registry::register_dir(root.clone());
        let data = root.join("data");
        self.base_backup_into(&data, run_as).await?;
        Ok(data)
    }

    async fn base_backup_into(&self, dest: &Path, run_as: Option<RunAs>) -> Result<()> {
        let mut cmd = Command::new(self.bin.tool("pg_basebackup"));
        cmd.arg("-D")
            .arg(dest)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ])
            .stdin(Stdio::null());
        prepare(&mut cmd, Signal::SIGKILL, run_as);
        let out = crate::procs::spawn::run_bounded(cmd, "pg_basebackup", crate::procs::spawn::tool_timeout())
            .await
            .map_err(|e| HarnessError::ServerStart(e.to_string()))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            return Err(HarnessError::ServerStart(format!(
                "pg_basebackup failed: {}",
                text.lines().last().unwrap_or("no output")
            )));
        }
        Ok(())
    }

    /// Restore this server from `backup` (a folder [`NativeCluster::base_backup`] made): shut the
    /// server down (fast), replace its data folder with a copy of the backup, and start it again
    /// on the same port. With `hold`, it listens only on its private socket folder, so no client
    /// that connects over TCP (every worker) can reach it until [`NativeCluster::reopen`].
    pub async fn restore(&mut self, backup: &Path, log: &Path, hold: bool) -> Result<()> {
        let run_as = unprivileged_user()?;
        self.shutdown_server_async().await;
        let data = self.data();
        remove_tree(&data).await?;
        copy_tree(backup, &data).await.map_err(|e| HarnessError::ServerStart(e.to_string()))?;
        self.spawn_listening(run_as, log, if hold { "" } else { "127.0.0.1" })?;
        self.wait_ready_at(log, if hold { self.socket_url_for("postgres") } else { self.url_for("postgres") }).await
    }

    /// Remove a backup folder made by [`NativeCluster::base_backup`].
    pub fn discard_backup(backup: &Path) {
        if let Some(root) = backup.parent() {
            let _ = std::fs::remove_dir_all(root);
            registry::unregister_dir(root);
        }
    }

    /// [`NativeCluster::discard_backup`] without holding the session's thread (rows side by side
    /// share it: a folder removed on it stalls every other row's clock of events).
    pub async fn discard_backup_async(backup: &Path) {
        if let Some(root) = backup.parent() {
            let _ = remove_tree(root).await;
            registry::unregister_dir(root);
        }
    }

    /// Restart the server listening on its TCP port again (after a held [`NativeCluster::restore`]).
    pub async fn reopen(&mut self, log: &Path) -> Result<()> {
        let run_as = unprivileged_user()?;
        self.shutdown_server_async().await;
        self.spawn_listening(run_as, log, "127.0.0.1")?;
        self.wait_ready(log).await
    }

    /// The superuser's URL for `dbname` through the private socket folder (reachable while held).
    pub fn socket_url_for(&self, dbname: &str) -> String {
        format!("postgres://{SUPERUSER}@localhost/{dbname}?host={}&port={}", self.root.display(), self.port)
    }

    /// Promote this standby to a primary and wait until it accepts writes.
    pub async fn promote(&self) -> Result<()> {
        crate::db::databases::promote(self).await
    }

    /// Fence: SIGKILL the server's whole process tree (the postmaster and every backend, which
    /// live in sessions of their own) at once, and reap it.
    pub fn fence(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            signals::kill_tree(pid);
            let _ = child.wait();
            registry::unregister(pid);
        }
    }

    /// Whether the postmaster or any of its backends is still alive.
    pub fn tree_alive(pid: Pid) -> bool {
        signals::group_alive(pid) || !signals::children(pid).is_empty()
    }

    /// The postmaster's process group id (its pid), while it runs.
    pub fn pgid(&self) -> Option<Pid> {
        self.pid()
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The cluster's data folder: a copy of this build's pristine one ([`pristine`]), made by
    /// initdb the first time; a plain initdb into the folder when the cache cannot be used.
    async fn initdb(&self, run_as: Option<RunAs>) -> Result<()> {
        let key = pristine::key(&self.bin, &self.version, SUPERUSER);
        let source = match pristine::cached(&key) {
            Some(data) => Some(data),
            None => match pristine::scratch(run_as) {
                Ok(scratch) => {
                    if let Err(e) = self.initdb_into(&scratch.join("data"), run_as).await {
                        let _ = remove_tree(&scratch).await;
                        return Err(e);
                    }
                    pristine::publish(&scratch, &key).ok()
                }
                Err(_) => None,
            },
        };
        if let Some(data) = source {
            if copy_tree(&data, &self.data()).await.is_ok() {
                return Ok(());
            }
            let _ = remove_tree(&self.data()).await;
        }
        self.initdb_into(&self.data(), run_as).await
    }

    async fn initdb_into(&self, data: &Path, run_as: Option<RunAs>) -> Result<()> {
        let mut cmd = Command::new(self.bin.tool("initdb"));
        cmd.arg("-D").arg(data).args(["-U", SUPERUSER]).args(pristine::INITDB_ARGS).stdin(Stdio::null());
        prepare(&mut cmd, Signal::SIGKILL, run_as);
        let out = crate::procs::spawn::run_bounded(cmd, "initdb", crate::procs::spawn::tool_timeout())
            .await
            .map_err(|e| HarnessError::Initdb(e.to_string()))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            return Err(HarnessError::Initdb(format!("{} ({})", last.trim(), out.status)));
        }
        Ok(())
    }

    fn spawn(&mut self, run_as: Option<RunAs>, log: &Path) -> Result<()> {
        self.spawn_listening(run_as, log, "127.0.0.1")
    }

    fn spawn_listening(&mut self, run_as: Option<RunAs>, log: &Path, listen: &str) -> Result<()> {
        let logf = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let mut cmd = Command::new(self.bin.tool("postgres"));
        cmd.arg("-D")
            .arg(self.data())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.root)
            .arg("-c")
            .arg(format!("listen_addresses={listen}"));
        for (k, v) in SERVER_SETTINGS {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        for (k, v) in &self.extra {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null()).stdout(logf.try_clone()?).stderr(logf);
        // SIGQUIT is PostgreSQL's immediate shutdown: it takes its backends down with it.
        prepare(&mut cmd, Signal::SIGQUIT, run_as);
        let child = cmd.spawn().map_err(|e| HarnessError::ServerStart(format!("cannot run postgres: {e}")))?;
        registry::register(Pid::from_raw(child.id() as i32), Kind::Postgres);
        self.child = Some(child);
        Ok(())
    }

    async fn wait_ready(&mut self, log: &Path) -> Result<()> {
        let url = self.url_for("postgres");
        self.wait_ready_at(log, url).await
    }

    async fn wait_ready_at(&mut self, log: &Path, url: String) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let tail = std::fs::read_to_string(log).unwrap_or_default();
                    let last = tail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no log output").to_string();
                    return Err(HarnessError::ServerStart(format!("postgres exited ({status}): {last}")));
                }
            }
            let probe = tokio::time::timeout(Duration::from_secs(2), async {
                use sqlx::Connection;
                sqlx::PgConnection::connect(&url).await
            })
            .await;
            if let Ok(Ok(conn)) = probe {
                use sqlx::Connection;
                let _ = conn.close().await;
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::ServerStart("not accepting connections after 30 s".into()));
            }
            tokio::time::sleep(crate::wait::POLL_EVERY).await;
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// How the postmaster ended, when it has (`signal 9`, `exit code 1`); `None` while it runs.
    pub fn exit_status(&mut self) -> Option<String> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.as_mut()?.try_wait().ok()??;
        Some(match (status.signal(), status.code()) {
            (Some(sig), _) => format!("signal {sig}"),
            (None, Some(code)) => format!("exit code {code}"),
            (None, None) => "exited".to_string(),
        })
    }

    /// The postmaster's pid.
    pub fn pid(&self) -> Option<Pid> {
        self.child.as_ref().map(|c| Pid::from_raw(c.id() as i32))
    }

    /// Shut the server down (fast shutdown, then SIGKILL of the group after 10 s) and remove the
    /// cluster folder. Idempotent.
    pub fn stop(&mut self) {
        self.shutdown_server();
        if self.root.exists() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
        registry::unregister_dir(&self.root);
    }

    /// [`NativeCluster::stop`] without holding the session's thread: the shutdown is awaited and
    /// the folder removed on a blocking-pool thread. Rows side by side share the session's one
    /// thread; a server's shutdown or a folder's removal on it (seconds on a loaded machine) froze
    /// every other row, whose workers' answers then arrived late and their leases lapsed.
    pub async fn stop_async(&mut self) {
        self.shutdown_server_async().await;
        if self.root.exists() {
            let _ = remove_tree(&self.root).await;
        }
        registry::unregister_dir(&self.root);
    }

    /// [`NativeCluster::shutdown_server`], waiting on the runtime's timer instead of the thread.
    async fn shutdown_server_async(&mut self) {
        let Some(child) = self.child.as_mut() else { return };
        let pid = Pid::from_raw(child.id() as i32);
        begin_shutdown(pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // What is left is at most a SIGKILLed group's reaping: done by the blocking path.
        self.shutdown_server();
    }

    /// Shut the server down (fast, then SIGKILL of the group after 10 s), keeping its folder.
    fn shutdown_server(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            let backends = begin_shutdown(pid);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = killpg(pid, Signal::SIGKILL);
            for b in backends {
                let _ = nix::sys::signal::kill(b, Signal::SIGKILL);
            }
            let _ = child.wait();
            registry::unregister(pid);
        }
    }
}

impl Backend for NativeCluster {
    fn kind(&self) -> &'static str {
        "native"
    }
    fn url_for(&self, dbname: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{dbname}", self.port)
    }
    fn version(&self) -> String {
        self.version.clone()
    }
}

impl Drop for NativeCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Remove a folder tree on a blocking-pool thread (the session's thread goes on meanwhile).
pub(crate) async fn remove_tree(path: &Path) -> Result<()> {
    let p = path.to_path_buf();
    match tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&p)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(HarnessError::Other(format!("removing {}: {e}", path.display()))),
    }
}

/// `cp -a from to`, awaited as a child of the session's thread (bounded like every tool).
pub(crate) async fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let mut cmd = Command::new("cp");
    cmd.arg("-a").arg(from).arg(to).stdin(Stdio::null());
    prepare(&mut cmd, Signal::SIGKILL, None);
    let out = crate::procs::spawn::run_bounded(cmd, "cp -a (the backup)", crate::procs::spawn::tool_timeout()).await?;
    if out.status.success() {
        Ok(())
    } else {
        let text = String::from_utf8_lossy(&out.stderr);
        Err(HarnessError::Other(format!(
            "copying the backup failed ({}): {}",
            out.status,
            text.lines().last().unwrap_or("no output")
        )))
    }
}

/// When the harness is root, the cluster runs as `postgres` (or $FENCEPROOF_PG_USER).
pub(crate) fn unprivileged_user() -> Result<Option<RunAs>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let name = std::env::var("FENCEPROOF_PG_USER").unwrap_or_else(|_| "postgres".into());
    match User::from_name(&name) {
        Ok(Some(u)) => Ok(Some(RunAs { uid: u.uid, gid: u.gid })),
        _ => Err(HarnessError::NoUnprivilegedUser(name)),
    }
}

/// A short, private, traversable folder under /tmp (socket paths must stay under 107 bytes).
pub(crate) fn make_root(run_as: Option<RunAs>) -> Result<PathBuf> {
    let root = std::env::temp_dir().join(format!(
        "fenceproof-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir(&root)?;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
    if let Some(u) = run_as {
        nix::unistd::chown(&root, Some(u.uid), Some(u.gid))
            .map_err(|e| HarnessError::Process(format!("chown {}: {e}", root.display())))?;
    }
    Ok(root)
}

/// Remove cluster folders left by harness processes that no longer exist (one killed with SIGKILL
/// cannot clean up; its server already died with it through the parent-death signal).
/// Also an empty or half-made one (a harness killed before initdb finished). Says what it swept.
pub(crate) fn sweep_stale_roots() {
    let swept = stale_roots(&std::env::temp_dir());
    if !swept.is_empty() {
        eprintln!(
            "fenceproof: swept {} cluster folder(s) of harness runs that no longer exist: {}",
            swept.len(),
            swept.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
}

/// Remove `<tmp>/fenceproof-<pid>-<8 hex>` folders whose harness pid is gone; returns them.
pub fn stale_roots(tmp: &Path) -> Vec<PathBuf> {
    let mut swept = Vec::new();
    let Ok(entries) = std::fs::read_dir(tmp) else { return swept };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("fenceproof-")) else { continue };
        let Some((pid, tag)) = rest.split_once('-') else { continue };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        if tag.len() != 8 || !tag.chars().all(|c| c.is_ascii_hexdigit()) || !e.path().is_dir() {
            continue;
        }
        let gone = matches!(nix::sys::signal::kill(Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH));
        if gone {
            // What still works in it outlived its harness: a PostgreSQL that Patroni started
            // detaches itself and does not die with the harness.
            for p in crate::procs::signals::working_in(&e.path()) {
                let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
            }
        }
        if gone && std::fs::remove_dir_all(e.path()).is_ok() {
            swept.push(e.path());
        }
    }
    swept
}

/// Ask the postmaster `pid` for a fast shutdown. Backends a test may have stopped (SIGSTOP) cannot
/// take part in one: they are resumed, and returned so the caller can kill them whatever happens.
fn begin_shutdown(pid: Pid) -> Vec<Pid> {
    let backends = signals::children(pid);
    for b in &backends {
        let _ = nix::sys::signal::kill(*b, Signal::SIGCONT);
    }
    let _ = nix::sys::signal::kill(pid, Signal::SIGINT);
    backends
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    #[test]
    fn empty_and_half_made_folders_of_dead_harnesses_are_swept_and_others_kept() {
        let tmp = std::env::temp_dir().join(format!("fp-sweep-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        // A pid that cannot exist (above the kernel's pid_max).
        let dead = tmp.join("fenceproof-99999999-0a1b2c3d");
        std::fs::create_dir(&dead).unwrap();
        let half = tmp.join("fenceproof-99999998-deadbeef");
        std::fs::create_dir_all(half.join("data/base")).unwrap();
        let alive = tmp.join(format!("fenceproof-{}-0a1b2c3d", std::process::id()));
        std::fs::create_dir(&alive).unwrap();
        let other = tmp.join("fenceproof-reports-12345678");
        std::fs::create_dir(&other).unwrap();
        let mut swept = stale_roots(&tmp);
        swept.sort();
        assert_eq!(swept, vec![half.clone(), dead.clone()]);
        assert!(!dead.exists() && !half.exists() && alive.exists() && other.exists());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
