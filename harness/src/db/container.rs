//! A PostgreSQL server in a Docker container, started with testcontainers: the same handle as the
//! native backend (an admin URL per database, the version), plus `docker kill` of the server and
//! its log copied into the run folder at the end.
//!
//! For experiment H it also builds a streaming standby of a container primary, over a private
//! Docker network ([`ContainerDb::start_standby`]), and fences with `docker kill`.
//!
//! Teardown: [`ContainerDb::stop`] on the normal path; `Drop`, the registry (panic hook, SIGINT /
//! SIGTERM) and a sweep of containers whose harness is gone (label `fenceproof.harness-pid`, see
//! [`docker`]) on the others, each removing the container with `docker rm -f`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use testcontainers_modules::postgres::Postgres;

use crate::db::docker::{self, remove_now, sweep_stale, PrivateNetwork, PID_LABEL};
use crate::db::native::SERVER_SETTINGS;
use crate::db::Backend;
use crate::error::{HarnessError, Result};
use crate::procs::registry;

/// The default image for users (an official image; offline, build one with `just pg-image`).
pub const DEFAULT_IMAGE: &str = "postgres:15";

/// The image `just pg-image` builds offline from this machine's PostgreSQL 15.
pub const LOCAL_IMAGE: &str = "fenceproof/postgres:15";

/// The image to run for `asked`: itself, except that the default official image, when the daemon
/// does not have it (no registry here) but has the locally built one, is replaced by that one.
/// Asks Docker only when `asked` is the default.
pub fn choose_image(asked: &str) -> String {
    if asked == DEFAULT_IMAGE && !image_present(DEFAULT_IMAGE) && image_present(LOCAL_IMAGE) {
        LOCAL_IMAGE.to_string()
    } else {
        asked.to_string()
    }
}

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

fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

/// The running container, whichever image type started it.
enum Handle {
    /// A server initialized by the image's entrypoint (testcontainers-modules' Postgres).
    Server(ContainerAsync<Postgres>),
    /// A streaming standby cloned from a primary (a generic image with our own wait condition).
    Standby(ContainerAsync<GenericImage>),
}

macro_rules! on_handle {
    ($h:expr, $c:ident => $e:expr) => {
        match $h {
            Handle::Server($c) => $e,
            Handle::Standby($c) => $e,
        }
    };
}

/// The script a standby container runs before the image's own entrypoint: clone the primary with
/// pg_basebackup over the private network, point `primary_conninfo` at it under the standby's
/// name, mark the data directory a standby. Image-agnostic: the official image and ours both take
/// an existing data directory as it is.
const STANDBY_SCRIPT: &str = r#"set -e
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  PGPASSWORD=postgres pg_basebackup -h "$FP_PRIMARY_HOST" -p 5432 -U postgres -D "$PGDATA" -X stream -c fast --no-sync
  printf "primary_conninfo = 'host=%s port=5432 user=postgres password=postgres application_name=%s'\n" "$FP_PRIMARY_HOST" "$FP_STANDBY_NAME" >> "$PGDATA/postgresql.auto.conf"
  : > "$PGDATA/standby.signal"
fi
exec docker-entrypoint.sh "$@"
"#;

pub struct ContainerDb {
    container: Option<Handle>,
    pub id: String,
    pub image: String,
    port: u16,
    version: String,
    log: PathBuf,
}

impl ContainerDb {
    /// Start `image` (an official-compatible PostgreSQL image) and wait until it accepts connections.
    pub async fn start(image: &str, log: &Path) -> Result<ContainerDb> {
        ContainerDb::start_with(image, log, Vec::new()).await
    }

    /// Start `image` with extra server settings (`-c name=value`).
    pub async fn start_with(image: &str, log: &Path, extra: Vec<(String, String)>) -> Result<ContainerDb> {
        ContainerDb::start_with_env(image, log, extra, Vec::new()).await
    }

    /// Start `image` with extra server settings and extra environment variables (`FP_FAKETIME`:
    /// the clock fault of fenceproof's own image, see `docker/entrypoint.sh`).
    pub async fn start_with_env(
        image: &str,
        log: &Path,
        extra: Vec<(String, String)>,
        env: Vec<(String, String)>,
    ) -> Result<ContainerDb> {
        ContainerDb::start_inner(image, log, extra, env, None).await
    }

    /// Start `image` published on the fixed host port `port`, so that a server restored later
    /// ([`ContainerDb::start_on_data`]) can take the same address.
    pub async fn start_at_port(image: &str, log: &Path, port: u16) -> Result<ContainerDb> {
        ContainerDb::start_inner(image, log, Vec::new(), Vec::new(), Some(port)).await
    }

    async fn start_inner(
        image: &str,
        log: &Path,
        extra: Vec<(String, String)>,
        env: Vec<(String, String)>,
        port: Option<u16>,
    ) -> Result<ContainerDb> {
        preflight(image)?;
        let (name, tag) = split_image(image);
        let mut image_spec = Postgres::default().with_name(name).with_tag(tag);
        for (k, v) in env {
            image_spec = image_spec.with_env_var(k, v);
        }
        let mut request = image_spec.with_label(PID_LABEL, std::process::id().to_string());
        if let Some(port) = port {
            request = request.with_mapped_port(port, 5432.tcp());
        }
        let container = request
            // A throwaway server: initdb need not fsync every file it writes.
            .with_env_var("POSTGRES_INITDB_ARGS", "--no-sync")
            // Without TZ, initdb guesses the zone by probing every file of the zoneinfo database:
            // 12.8 s of a 14.5 s initdb in an image with no /etc/localtime.
            .with_env_var("TZ", "UTC")
            .with_cmd(server_options(&extra))
            .with_startup_timeout(STARTUP_TIMEOUT)
            .start()
            .await
            .map_err(|e| HarnessError::Container(format!("starting {image}: {e}")))?;
        ContainerDb::adopt(Handle::Server(container), image, log).await
    }

    /// Start a streaming standby of `primary` in its own container. The primary is attached to
    /// `net` (a private network between the two, which the standby lives on and replicates over),
    /// its pg_hba is opened to replication there, and the standby clones it and streams under the
    /// `application_name` `name`. Returns once the standby accepts read-only connections.
    pub async fn start_standby(
        primary: &ContainerDb,
        net: &PrivateNetwork,
        name: &str,
        log: &Path,
        extra: Vec<(String, String)>,
    ) -> Result<ContainerDb> {
        preflight(&primary.image)?;
        net.connect(&primary.id).await?;
        let primary_ip = net.ip_of(&primary.id).await?;
        // The official image only lets `all` databases in over the network, which does not cover
        // replication connections; ours has the line already (a duplicate is harmless).
        docker::exec_sh(
            &primary.id,
            "postgres",
            r#"printf 'host replication all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf""#,
        )
        .await?;
        let pool = crate::db::databases::pool(&primary.url_for("postgres"), "fenceproof-harness", 1).await?;
        sqlx::query("SELECT pg_reload_conf()").execute(&pool).await?;
        pool.close().await;

        let (image_name, tag) = split_image(&primary.image);
        let mut cmd = vec!["-c".to_string(), STANDBY_SCRIPT.to_string(), "fenceproof-standby".to_string()];
        cmd.extend(server_options(&extra));
        let container = GenericImage::new(image_name, tag)
            .with_entrypoint("sh")
            .with_wait_for(WaitFor::message_on_stderr("database system is ready to accept read-only connections"))
            .with_exposed_port(5432.tcp())
            .with_env_var("FP_PRIMARY_HOST", primary_ip)
            .with_env_var("FP_STANDBY_NAME", name)
            .with_env_var("POSTGRES_PASSWORD", "postgres")
            .with_label(PID_LABEL, std::process::id().to_string())
            .with_network(net.name.clone())
            .with_cmd(cmd)
            .with_startup_timeout(STARTUP_TIMEOUT)
            .start()
            .await
            .map_err(|e| HarnessError::Container(format!("starting a standby of {}: {e}", primary.id)))?;
        ContainerDb::adopt(Handle::Standby(container), &primary.image, log).await
    }

    /// Take a base backup of this server inside its container (pg_basebackup over its local
    /// socket, WAL streamed along) and copy it to the host folder `dest`, owned by the image's
    /// postgres user (uid 999, as in the official image and ours).
    pub async fn base_backup_to(&self, dest: &Path) -> Result<()> {
        docker::exec_sh(
            &self.id,
            "postgres",
            "rm -rf /tmp/fp-backup; pg_basebackup -h /tmp -U postgres -D /tmp/fp-backup -X stream -c fast --no-sync",
        )
        .await?;
        let from = format!("{}:/tmp/fp-backup", self.id);
        docker::run(&["cp", &from, &dest.display().to_string()]).await?;
        own_by_postgres(dest)
    }

    /// Start `image` on the host folder `data` (a restored backup) bind-mounted as its data
    /// folder, published on host port `port`; returns once it accepts connections.
    pub async fn start_on_data(image: &str, data: &Path, port: u16, log: &Path) -> Result<ContainerDb> {
        preflight(image)?;
        own_by_postgres(data)?;
        let (image_name, tag) = split_image(image);
        let container = GenericImage::new(image_name, tag)
            .with_wait_for(WaitFor::message_on_stderr("database system is ready to accept connections"))
            .with_exposed_port(5432.tcp())
            .with_mapped_port(port, 5432.tcp())
            .with_mount(testcontainers::core::Mount::bind_mount(data.display().to_string(), "/var/lib/postgresql/data"))
            .with_env_var("POSTGRES_PASSWORD", "postgres")
            .with_label(PID_LABEL, std::process::id().to_string())
            .with_cmd(server_options(&[]))
            .with_startup_timeout(STARTUP_TIMEOUT)
            .start()
            .await
            .map_err(|e| HarnessError::Container(format!("starting {image} on a restored data folder: {e}")))?;
        ContainerDb::adopt(Handle::Standby(container), image, log).await
    }

    async fn adopt(handle: Handle, image: &str, log: &Path) -> Result<ContainerDb> {
        let id = on_handle!(&handle, c => c.id().to_string());
        registry::register_container(id.clone());
        let mut db = ContainerDb {
            container: Some(handle),
            id: id.clone(),
            image: image.to_string(),
            port: 0,
            version: String::new(),
            log: log.to_path_buf(),
        };
        db.port = on_handle!(db.container.as_ref().expect("just set"), c => c.get_host_port_ipv4(5432).await)
            .map_err(|e| HarnessError::Container(format!("port of {id}: {e}")))?;
        let pool = crate::db::databases::pool(&db.url_for("postgres"), "fenceproof-harness", 1).await?;
        db.version = sqlx::query_scalar::<_, String>("SELECT version()").fetch_one(&pool).await?;
        pool.close().await;
        Ok(db)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Fence: `docker kill` the server — every process of the container dies at once; the stopped
    /// container stays until [`ContainerDb::stop`], for its log.
    pub async fn kill(&self) -> Result<()> {
        docker::kill(&self.id).await
    }

    /// Whether the container still runs.
    pub async fn running(&self) -> bool {
        docker::running(&self.id).await
    }

    /// Promote this standby and wait (bounded, 30 s) until it accepts writes.
    pub async fn promote(&self) -> Result<()> {
        crate::db::databases::promote(self).await
    }

    /// Remove the container, keeping its log.
    pub async fn stop(&mut self) -> Result<()> {
        if let Some(c) = self.container.take() {
            let mut log = on_handle!(&c, c => c.stdout_to_vec().await).unwrap_or_default();
            log.extend(on_handle!(&c, c => c.stderr_to_vec().await).unwrap_or_default());
            let _ = std::fs::write(&self.log, log);
            let r = on_handle!(c, c => c.rm().await).map_err(|e| HarnessError::Container(e.to_string()));
            remove_now(&self.id);
            registry::unregister_container(&self.id);
            r?;
        }
        Ok(())
    }
}

/// Bound on a container's start (image entrypoint, initdb or base backup, server start).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(90);

/// The daemon answers, stale containers are swept, the image is here: or a one-line error.
pub fn preflight(image: &str) -> Result<()> {
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
    Ok(())
}

/// The harness's server settings plus `extra`, as server options.
/// Hand a host folder to the image's postgres user (uid and gid 999), mode 0700 at its top.
fn own_by_postgres(dir: &Path) -> Result<()> {
    let status = std::process::Command::new("chown")
        .args(["-R", "999:999"])
        .arg(dir)
        .status()
        .map_err(|e| HarnessError::Container(format!("chown {}: {e}", dir.display())))?;
    if !status.success() {
        return Err(HarnessError::Container(format!("chown {} failed ({status})", dir.display())));
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(())
}

fn server_options(extra: &[(String, String)]) -> Vec<String> {
    let mut cmd = Vec::new();
    let all = SERVER_SETTINGS.iter().map(|(k, v)| (k.to_string(), v.to_string())).chain(extra.iter().cloned());
    for (k, v) in all {
        cmd.push("-c".into());
        cmd.push(format!("{k}={v}"));
    }
    cmd
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
        if let Some(c) = self.container.take() {
            remove_now(&self.id);
            registry::unregister_container(&self.id);
            // The container is gone; keep testcontainers' own drop from trying again.
            std::mem::forget(c);
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
