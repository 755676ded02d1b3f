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
