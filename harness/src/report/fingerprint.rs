//! A worker's fingerprint: what it was, byte for byte. A compiled worker is its one file. An
//! interpreted one (a file starting with `#!`) is its entry script and every module beside it: a
//! changed `protocol.py` next to an unchanged `worker.py` must change the fingerprint. So a
//! script's fingerprint is the SHA-256 of every regular file under the script's folder (hidden
//! files and folders, and `__pycache__`, left out), each named by its path in that folder, in
//! path order; at most [`MAX_FILES`] files.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// At most this many files are read into a fingerprint (a folder bigger than a worker's is cut
/// there, and the count says so).
pub const MAX_FILES: usize = 2000;

/// The SHA-256 (hex) of the worker at `path` and how many files it covers; empty and 0 when the
/// file cannot be read.
pub fn of(path: &Path) -> (String, usize) {
    let Ok(bytes) = std::fs::read(path) else { return (String::new(), 0) };
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !bytes.starts_with(b"#!") {
        return (hex(&Sha256::digest(&bytes)), 1);
    }
    of_dir(folder)
}

/// The SHA-256 (hex) of every file under `dir` (as for a script's folder) and how many files it
/// covers: the folder a user names as the worker's (`verify --worker-dir`), whatever its entry is.
pub fn of_dir(dir: &Path) -> (String, usize) {
    let mut files = Vec::new();
    collect(dir, &mut files);
    files.sort();
    (digest(dir, &files), files.len())
}

/// The digest of `files` (each named by its path under `folder`, then its own SHA-256).
fn digest(folder: &Path, files: &[PathBuf]) -> String {
    let mut all = Sha256::new();
    for f in files {
        let Ok(b) = std::fs::read(f) else { continue };
        let name = f.strip_prefix(folder).unwrap_or(f);
        all.update(name.to_string_lossy().as_bytes());
        all.update([0]);
        all.update(Sha256::digest(&b));
    }
    hex(&all.finalize())
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if out.len() >= MAX_FILES {
            return;
        }
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "__pycache__" {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => collect(&e.path(), out),
            Ok(t) if t.is_file() => out.push(e.path()),
            _ => {}
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fp-fingerprint-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("lib")).unwrap();
        d
    }

    #[test]
    fn a_script_is_fingerprinted_with_every_file_beside_it() {
        let d = folder("script");
        std::fs::write(d.join("worker.py"), "#!/usr/bin/env python3\nimport protocol\n").unwrap();
        std::fs::write(d.join("protocol.py"), "def renew(): pass\n").unwrap();
        std::fs::write(d.join("lib").join("kit.py"), "x = 1\n").unwrap();
        std::fs::create_dir_all(d.join("__pycache__")).unwrap();
        std::fs::write(d.join("__pycache__").join("protocol.pyc"), "cache").unwrap();
        let (a, n) = of(&d.join("worker.py"));
        assert_eq!(n, 3);
        std::fs::write(d.join("__pycache__").join("protocol.pyc"), "another cache").unwrap();
        assert_eq!(of(&d.join("worker.py")).0, a, "a cache is no part of the worker");
        std::fs::write(d.join("protocol.py"), "def renew(): return 1\n").unwrap();
        assert_ne!(of(&d.join("worker.py")).0, a, "a changed module changes the fingerprint");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_named_folder_covers_a_binary_and_its_files() {
        let d = folder("named");
        std::fs::write(d.join("worker"), b"\x7fELF...").unwrap();
        std::fs::write(d.join("lib").join("config.toml"), "x = 1\n").unwrap();
        let (a, n) = of_dir(&d);
        assert_eq!(n, 2);
        std::fs::write(d.join("lib").join("config.toml"), "x = 2\n").unwrap();
        assert_ne!(of_dir(&d).0, a, "a changed file of the folder changes it");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_binary_is_its_own_bytes() {
        let d = folder("binary");
        std::fs::write(d.join("worker"), b"\x7fELF...").unwrap();
        std::fs::write(d.join("other"), b"not part of it").unwrap();
        let (h, n) = of(&d.join("worker"));
        assert_eq!((h, n), (hex(&Sha256::digest(b"\x7fELF...")), 1));
        assert_eq!(of(&d.join("missing")), (String::new(), 0));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
