//! An install that finds its parts: `fenceproof` finds its worker and fake tools beside itself
//! (where `just install` puts all three) or on PATH, from any directory; when they are missing,
//! the one line names the exact command that installs them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A fresh folder outside the cargo target folder (an installed program does not live in one).
fn outside(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fenceproof-install-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Copy the built programs named `names` into `dir`.
fn install(dir: &Path, names: &[&str]) {
    let built = Path::new(env!("CARGO_BIN_EXE_fenceproof")).parent().unwrap().to_path_buf();
    for n in names {
        std::fs::copy(built.join(n), dir.join(n)).unwrap();
    }
}

/// `<bin>/fenceproof verify --only A` run from `cwd` with `path` as PATH: exit code and output.
fn verify(bin: &Path, cwd: &Path, path: &str, log: &Path) -> (Option<i32>, String) {
    let mut cmd = Command::new(bin.join("fenceproof"));
    cmd.args(["verify", "--only", "A"]).current_dir(cwd).env("PATH", path);
    for v in ["FENCEPROOF_WORKER_BIN", "FENCEPROOF_TOOLS_BIN"] {
        cmd.env_remove(v);
    }
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, log, Duration::from_secs(120));
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn an_installed_fenceproof_finds_its_parts_or_names_the_command() {
    let root = outside("layout");
    let (bin, lonely, elsewhere) = (root.join("bin"), root.join("lonely"), root.join("elsewhere"));
    for d in [&bin, &lonely, &elsewhere] {
        std::fs::create_dir_all(d).unwrap();
    }
    install(&bin, &["fenceproof", "fenceproof-worker", "fenceproof-fake-tools"]);
    install(&lonely, &["fenceproof"]);
    let system = "/usr/local/bin:/usr/bin:/bin";

    // All three side by side, run from another directory.
    let (code, text) = verify(&bin, &elsewhere, system, &root.join("log-beside"));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("1/1 experiments passed"), "{text}");
    assert!(elsewhere.join("reports/latest/index.html").exists(), "the run folder is where it ran");

    // Alone: one line naming the command that installs the worker.
    let (code, text) = verify(&lonely, &elsewhere, system, &root.join("log-alone"));
    assert_eq!(code, Some(3), "{text}");
    let line = text.lines().find(|l| l.contains("not found")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("cargo install --locked --path worker-bin") && line.contains("just install"), "{line}");

    // Alone, with the other two on PATH.
    let path = format!("{}:{system}", bin.display());
    let (code, text) = verify(&lonely, &elsewhere, &path, &root.join("log-path"));
    assert_eq!(code, Some(0), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}
