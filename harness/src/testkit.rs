//! Test fixtures shared by every crate's tests (the `testkit` feature, and the harness's own unit
//! tests): a throwaway cluster with the migrated template and fresh databases cloned from it, a
//! bounded run of a child process, the Python example worker's copy and its variants (files of
//! `cli/tests/variants`), and [`commit_rows`], the oracle rows the checkers' tests judge.

pub mod commit_rows;

use crate::db::native::NativeCluster;
use crate::db::pgbin::PgBin;
use crate::db::{databases, Backend};
use sqlx::PgPool;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct TestCluster {
    pub cluster: NativeCluster,
    pub log: std::path::PathBuf,
    n: std::sync::atomic::AtomicU32,
}

impl TestCluster {
    /// A cluster under `dir` (a test passes `test_dir!("name")`: its crate's target tmp folder).
    pub async fn start(dir: std::path::PathBuf) -> TestCluster {
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

/// Run `cmd` to the end, bounded: killed, and the test failed, after `bound`. Output goes through
/// files in `dir`, so a full pipe cannot stall the child. Returns the output and the child's pid.
pub fn run_bounded(cmd: &mut Command, dir: &std::path::Path, bound: Duration) -> (Output, u32) {
    std::fs::create_dir_all(dir).unwrap();
    let (out_path, err_path) = (dir.join("run.stdout"), dir.join("run.stderr"));
    let mut child = cmd
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (std::fs::read(&out_path).unwrap(), std::fs::read(&err_path).unwrap());
    (Output { status, stdout, stderr }, pid)
}

/// stderr without the lines that report sweeping a dead harness's leftovers: they may precede any
/// run's own message whenever an earlier run was killed (other tests kill harnesses on purpose).
pub fn own_lines(err: &str) -> String {
    err.lines()
        .filter(|l| {
            !(l.starts_with("fenceproof: swept ")
                || l.starts_with("fenceproof: thawed and removed ")
                || l.starts_with("fenceproof: dropped "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Write to `dest` a copy of the Python example worker, unchanged and executable: `worker.py` as
/// `dest`, the modules beside it (`fpkit.py`, `protocol.py`) beside `dest`.
pub fn example_copy(dest: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let folder = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/python-worker"));
    for p in std::fs::read_dir(folder).unwrap().map(|e| e.unwrap().path()) {
        if p.extension().is_some_and(|x| x == "py") {
            let to = if p.file_name().is_some_and(|f| f == "worker.py") {
                dest.to_path_buf()
            } else {
                dest.with_file_name(p.file_name().unwrap())
            };
            std::fs::copy(&p, to).unwrap();
        }
    }
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The folder of the variants of the example workers the tests run (`cli/tests/variants`): Python
/// modules that override the example's functions by name, Go files that replace whole files of it.
pub fn variants_dir() -> std::path::PathBuf {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/tests/variants")).to_path_buf()
}

/// The Python variant `name` of `cli/tests/variants/<module>.py`, as a worker: `<dir>/<name>.py`,
/// a link to the module, which picks the variant by the name it is started under (and fails,
/// naming it, when the example no longer has a function the variant overrides).
pub fn variant_worker(module: &str, name: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let target = variants_dir().join(format!("{module}.py"));
    assert!(target.is_file(), "no variant module {}", target.display());
    std::fs::create_dir_all(dir).unwrap();
    let link = dir.join(format!("{name}.py"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    link
}

/// The folder for a test's files: `name` under the calling crate's target tmp folder (short enough
/// for a socket path).
#[macro_export]
macro_rules! test_dir {
    ($name:expr) => {
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join($name)
    };
}

/// Poll `f` every 20 ms until it gives a value; the test fails naming `what` after `timeout`.
pub fn poll<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
