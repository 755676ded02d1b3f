//! Shared by the integration tests: a throwaway cluster with the migrated template, and fresh
//! databases cloned from it.

#![allow(dead_code)]

use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use sqlx::PgPool;

pub struct TestCluster {
    pub cluster: NativeCluster,
    pub log: std::path::PathBuf,
    n: std::sync::atomic::AtomicU32,
}

impl TestCluster {
    pub async fn start(name: &str) -> TestCluster {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("postgres.log");
        let bin = PgBin::locate(None).expect("PostgreSQL binaries (see README)");
        let cluster = NativeCluster::start(bin, &log).await.expect("cluster starts");
        databases::create_template(&cluster).await.expect("template");
        TestCluster { cluster, log, n: Default::default() }
    }

    /// A fresh database cloned from the template, and a pool on it named `app`.
    pub async fn fresh_db(&self, app: &str) -> (String, PgPool) {
        let n = self.n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let url = databases::create_from_template(&self.cluster, &format!("t{n}")).await.unwrap();
        let pool = databases::pool(&url, app, 8).await.unwrap();
        (url, pool)
    }

    pub fn url_for(&self, db: &str) -> String {
        self.cluster.url_for(db)
    }
}
