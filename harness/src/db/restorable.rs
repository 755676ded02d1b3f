//! A server that can be backed up and later restored from that backup (experiment N, spec §10), in
//! the session's backend: a native cluster, or a container.
//!
//! Restoring holds the server from the workers until [`Restorable::reopen`], so that an operator's
//! recovery runs before anything else reaches it:
//! - native: the restored cluster listens on no TCP address, only on its private socket folder;
//! - container: the restored data folder is bind-mounted into a new container on the same host
//!   port, with a `pg_hba.conf` that admits only the operator's login (created before the backup,
//!   so the backup has it); reopening puts the original file back and reloads it.

use std::path::{Path, PathBuf};

use crate::db::container::ContainerDb;
use crate::db::native::NativeCluster;
use crate::db::pgbin::PgBin;
use crate::db::Backend;
use crate::error::{HarnessError, Result};
use crate::procs::registry;

/// The login that alone reaches a held container server.
pub const OPERATOR: &str = "fp_operator";

pub enum Restorable {
    Native {
        cluster: NativeCluster,
        backup: Option<PathBuf>,
        log: PathBuf,
    },
    Container {
        db: Option<Box<ContainerDb>>,
        image: String,
        port: u16,
        /// A host folder of the harness's own: `backup/` and the restored `data/`.
        root: PathBuf,
        log: PathBuf,
        /// The restored data folder's own pg_hba.conf, put back by `reopen`.
        hba: Option<String>,
    },
}

impl Restorable {
    pub async fn start_native(bin: PgBin, log: &Path) -> Result<Restorable> {
        let cluster = NativeCluster::start(bin, log).await?;
        Ok(Restorable::Native { cluster, backup: None, log: log.to_path_buf() })
    }

    pub async fn start_container(image: &str, log: &Path) -> Result<Restorable> {
        let port = crate::db::ports::free_port()?;
        let db = ContainerDb::start_at_port(image, log, port).await?;
        let root = std::env::temp_dir().join(format!("fenceproof-restore-{}-{:08x}", std::process::id(), rand_u32()));
        std::fs::create_dir_all(&root)?;
        registry::register_dir(root.clone());
        let pool = crate::db::databases::pool(&db.url_for("postgres"), "fenceproof-harness", 1).await?;
        sqlx::query(&format!("CREATE ROLE {OPERATOR} SUPERUSER LOGIN PASSWORD 'postgres'")).execute(&pool).await?;
        pool.close().await;
        Ok(Restorable::Container {
            db: Some(Box::new(db)),
            image: image.to_string(),
            port,
            root,
            log: log.to_path_buf(),
            hba: None,
        })
    }

    /// The server as a backend (URLs, version).
    pub fn backend(&self) -> Result<&dyn Backend> {
        match self {
            Restorable::Native { cluster, .. } => Ok(cluster),
            Restorable::Container { db: Some(db), .. } => Ok(db.as_ref()),
            Restorable::Container { db: None, .. } => Err(HarnessError::Other("the container server is gone".into())),
        }
    }

    /// Take the base backup the server is later restored from.
    pub async fn base_backup(&mut self) -> Result<()> {
        match self {
            Restorable::Native { cluster, backup, .. } => {
                *backup = Some(cluster.base_backup().await?);
            }
            Restorable::Container { db: Some(db), root, .. } => db.base_backup_to(&root.join("backup")).await?,
            Restorable::Container { db: None, .. } => {
                return Err(HarnessError::Other("the container server is gone".into()))
            }
        }
        Ok(())
    }

    /// Stop the server and start it again from the backup, held from the workers; returns the
    /// URL of database `dbname` through which the operator reaches the held server.
    pub async fn restore_held(&mut self, dbname: &str) -> Result<String> {
        match self {
            Restorable::Native { cluster, backup, log } => {
                let b = backup.clone().ok_or_else(|| HarnessError::Other("no backup to restore".into()))?;
                cluster.restore(&b, log, true).await?;
                Ok(cluster.socket_url_for(dbname))
            }
            Restorable::Container { db, image, port, root, log, hba } => {
                // The old server dies (docker kill) and goes; its port is free for the restored one.
                if let Some(mut old) = db.take() {
                    old.kill().await?;
                    old.stop().await?;
                }
                let data = root.join("data");
                copy_tree(&root.join("backup"), &data).await?;
                let hba_path = data.join("pg_hba.conf");
                *hba = Some(std::fs::read_to_string(&hba_path)?);
                // The operator reaches every database; the harness's start probe (the server's
                // version) reaches only `postgres`, which holds none of the protocol's tables.
                std::fs::write(
                    &hba_path,
                    format!(
                        "local all all trust\nhost all {OPERATOR} all scram-sha-256\nhost postgres postgres all scram-sha-256\n"
                    ),
                )?;
                let restored = ContainerDb::start_on_data(image, &data, *port, log).await?;
                *db = Some(Box::new(restored));
                Ok(format!("postgres://{OPERATOR}:postgres@127.0.0.1:{port}/{dbname}"))
            }
        }
    }

    /// Let the workers in again.
    pub async fn reopen(&mut self, operator_url: &str) -> Result<()> {
        match self {
            Restorable::Native { cluster, log, .. } => cluster.reopen(log).await,
            Restorable::Container { root, hba, .. } => {
                let original = hba.take().ok_or_else(|| HarnessError::Other("the server is not held".into()))?;
                std::fs::write(root.join("data").join("pg_hba.conf"), original)?;
                let pool = crate::db::databases::pool(operator_url, "fenceproof-harness", 1).await?;
                sqlx::query("SELECT pg_reload_conf()").execute(&pool).await?;
                pool.close().await;
                Ok(())
            }
        }
    }

    /// Stop the server and remove every folder it used. Idempotent.
    pub async fn stop(&mut self) {
        match self {
            Restorable::Native { cluster, backup, .. } => {
                cluster.stop_async().await;
                if let Some(b) = backup.take() {
                    NativeCluster::discard_backup_async(&b).await;
                }
            }
            Restorable::Container { db, root, .. } => {
                if let Some(mut d) = db.take() {
                    let _ = d.stop().await;
                }
                let _ = crate::db::native::remove_tree(root).await;
                registry::unregister_dir(root);
            }
        }
    }
}

async fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let _ = crate::db::native::remove_tree(to).await;
    crate::db::native::copy_tree(from, to).await
}

fn rand_u32() -> u32 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
}
