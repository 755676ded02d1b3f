//! A PostgreSQL server in a Docker container, started with testcontainers: the same handle as the
//! native backend (an admin URL per database, the version), plus pause / unpause / kill of the
//! server and its log copied into the run folder at the end.
//!
//! Teardown: [`ContainerDb::stop`] on the normal path; `Drop`, the registry (panic hook, SIGINT /
//! SIGTERM) and a sweep of containers whose harness is gone (label `fenceproof.harness-pid`) on
//! the others, each removing the container with `docker rm -f`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ImageExt};
use testcontainers_modules::postgres::Postgres;

use crate::db::native::SERVER_SETTINGS;
use crate::db::Backend;
use crate::error::{HarnessError, Result};
use crate::procs::registry;

/// The label that ties a container to the harness process that started it.
pub const PID_LABEL: &str = "fenceproof.harness-pid";

/// The default image for users (an official image; offline, build one with `just pg-image`).
pub const DEFAULT_IMAGE: &str = "postgres:15";

/// Where the Docker daemon listens (DOCKER_HOST=unix://..., else the default socket).
pub fn socket_path() -> PathBuf {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

/// Whether a Docker daemon answers `GET /_ping` on its socket (checked up front, in well under a
/// second, so a missing daemon is a clear error and never a hang).
pub fn daemon_answers() -> std::result::Result<(), String> {
    let path = socket_path();
    let mut s = UnixStream::connect(&path).map_err(|e| format!("no Docker daemon at {} ({e})", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok();
    s.set_write_timeout(Some(Duration::from_secs(3))).ok();
    s.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n").map_err(|e| format!("Docker socket: {e}"))?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    if answer.starts_with("HTTP/1.") && answer.contains(" 200 ") {
        Ok(())
    } else {
        Err(format!("the Docker daemon at {} did not answer its ping", path.display()))
    }
}

/// Whether `image` is present in the local daemon (no registry is asked).
pub fn image_present(image: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", image])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `docker rm -f -v` (best effort; used on the paths where no async runtime can be trusted).
pub fn remove_now(id: &str) {
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", "-v", id])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Remove every container this harness process started, registered or not (one may still be
/// starting when a Ctrl-C or a panic arrives, before testcontainers has handed back its id).
pub fn remove_all_of_this_process() {
    let filter = format!("label={PID_LABEL}={}", std::process::id());
    let Ok(out) = std::process::Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() else {
        return;
    };
    for id in String::from_utf8_lossy(&out.stdout).lines() {
        remove_now(id.trim());
    }
}

/// Remove containers left by harness processes that no longer exist.
pub fn sweep_stale() {
    let Ok(out) = std::process::Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("label={PID_LABEL}"),
            "--format",
            &format!("{{{{.ID}}}} {{{{.Label \"{PID_LABEL}\"}}}}"),
        ])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.split_whitespace();
        let (Some(id), Some(pid)) = (parts.next(), parts.next()) else { continue };
        let alive = pid.parse::<i32>().is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            remove_now(id);
        }
    }
}

fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

pub struct ContainerDb {
    container: Option<ContainerAsync<Postgres>>,
    pub id: String,
    pub image: String,
    port: u16,
    version: String,
    log: PathBuf,
}

impl ContainerDb {
    /// Start `image` (an official-compatible PostgreSQL image) and wait until it accepts connections.
    pub async fn start(image: &str, log: &Path) -> Result<ContainerDb> {
        daemon_answers().map_err(|e| {
            HarnessError::Container(format!("{e}; start Docker, or use native binaries (--backend native)"))
        })?;
        sweep_stale();
        if !image_present(image) {
            return Err(HarnessError::Container(format!(
                "image {image} is not in the local Docker daemon and no registry can be assumed; build one offline with `just pg-image` and pass --pg-image fenceproof/postgres:15"
            )));
        }
        registry::STARTED_CONTAINERS.store(true, std::sync::atomic::Ordering::SeqCst);
        let (name, tag) = split_image(image);
        let mut cmd: Vec<String> = Vec::new();
        for (k, v) in SERVER_SETTINGS {
            cmd.push("-c".into());
            cmd.push(format!("{k}={v}"));
        }
        let container = Postgres::default()
            .with_name(name)
            .with_tag(tag)
            .with_label(PID_LABEL, std::process::id().to_string())
            .with_cmd(cmd)
            .with_startup_timeout(Duration::from_secs(90))
            .start()
            .await
            .map_err(|e| HarnessError::Container(format!("starting {image}: {e}")))?;
        let id = container.id().to_string();
        registry::register_container(id.clone());
        let port = container
            .get_host_port_ipv4(5432)
            .await
            .map_err(|e| HarnessError::Container(format!("port of {id}: {e}")))?;
        let mut db = ContainerDb {
            container: Some(container),
            id,
            image: image.to_string(),
            port,
            version: String::new(),
            log: log.to_path_buf(),
        };
        let pool = crate::db::databases::pool(&db.url_for("postgres"), "fenceproof-harness", 1).await?;
        db.version = sqlx::query_scalar::<_, String>("SELECT version()").fetch_one(&pool).await?;
        pool.close().await;
        Ok(db)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Freeze the whole server (`docker pause`).
    pub async fn pause(&self) -> Result<()> {
        let c = self.container.as_ref().ok_or_else(|| HarnessError::Container("already stopped".into()))?;
        c.pause().await.map_err(|e| HarnessError::Container(e.to_string()))
    }

    pub async fn unpause(&self) -> Result<()> {
        let c = self.container.as_ref().ok_or_else(|| HarnessError::Container("already stopped".into()))?;
        c.unpause().await.map_err(|e| HarnessError::Container(e.to_string()))
    }

    /// Kill the server and remove its container, keeping its log.
    pub async fn stop(&mut self) -> Result<()> {
        if let Some(c) = self.container.take() {
            let mut log = c.stdout_to_vec().await.unwrap_or_default();
            log.extend(c.stderr_to_vec().await.unwrap_or_default());
            let _ = std::fs::write(&self.log, log);
            let r = c.rm().await.map_err(|e| HarnessError::Container(e.to_string()));
            remove_now(&self.id);
            registry::unregister_container(&self.id);
            r?;
        }
        Ok(())
    }
}

impl Backend for ContainerDb {
    fn kind(&self) -> &'static str {
        "container"
    }
    fn url_for(&self, dbname: &str) -> String {
        format!("postgres://postgres:postgres@127.0.0.1:{}/{dbname}", self.port)
    }
    fn version(&self) -> String {
        self.version.clone()
    }
}

impl Drop for ContainerDb {
    fn drop(&mut self) {
        if self.container.is_some() {
            remove_now(&self.id);
            registry::unregister_container(&self.id);
            // The container is gone; keep testcontainers' own drop from trying again.
            if let Some(c) = self.container.take() {
                std::mem::forget(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_into_name_and_tag() {
        assert_eq!(split_image("postgres:15"), ("postgres", "15"));
        assert_eq!(split_image("fenceproof/postgres:15"), ("fenceproof/postgres", "15"));
        assert_eq!(split_image("localhost:5000/pg"), ("localhost:5000/pg", "latest"));
        assert_eq!(split_image("postgres"), ("postgres", "latest"));
    }

    #[test]
    fn a_missing_socket_is_a_clear_error_not_a_hang() {
        std::env::set_var("DOCKER_HOST", "unix:///nonexistent/docker.sock");
        let e = daemon_answers().unwrap_err();
        std::env::remove_var("DOCKER_HOST");
        assert!(e.contains("no Docker daemon at /nonexistent/docker.sock"), "{e}");
    }
}
