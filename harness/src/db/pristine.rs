//! One initdb per PostgreSQL build, not one per cluster: the first cluster a build needs on this
//! machine runs initdb into a folder of its own, which is then renamed into a shared cache
//! (`<tmp>/fenceproof-initdb/<key>/data`); every later cluster, in this process or another, starts
//! from a copy of it (`cp -a`, ownership kept). initdb's bootstrap is most of what starting a throwaway
//! server costs in CPU (measured with process accounting: a third of the CPU of the CLI tests), while a
//! copy of the 40 MB folder costs almost none.
//!
//! The key names the build: the binaries' folder, `postgres --version`, the size and modification
//! time of `initdb` and `postgres`, and the options initdb gets. A folder appears under its key only
//! whole (rename), so a reader never sees half of one; two processes that make the same key at once
//! keep the first and drop the second. Anything that goes wrong with the cache (a folder removed
//! under a copy, a full disk) falls back to a plain initdb into the cluster's own folder.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::Pid;

use super::pgbin::PgBin;
use crate::procs::spawn::RunAs;

/// The options every throwaway cluster's initdb gets besides its superuser (the key includes both).
pub(crate) const INITDB_ARGS: [&str; 6] = ["-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"];

/// The cache folder under the temporary folder.
pub fn cache_dir() -> PathBuf {
    std::env::temp_dir().join("fenceproof-initdb")
}

/// The cache key of `bin` for clusters whose superuser is `superuser`: a hex digest of what makes
/// two initdb outputs differ.
pub(crate) fn key(bin: &PgBin, version: &str, superuser: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let dir = std::fs::canonicalize(&bin.dir).unwrap_or_else(|_| bin.dir.clone());
    dir.hash(&mut h);
    version.hash(&mut h);
    for tool in ["initdb", "postgres"] {
        if let Ok(m) = std::fs::metadata(bin.tool(tool)) {
            (m.len(), m.mtime(), m.mtime_nsec(), m.ino()).hash(&mut h);
        }
    }
    INITDB_ARGS.hash(&mut h);
    superuser.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The cached data folder of `key`, when a whole one is there.
pub(crate) fn cached(key: &str) -> Option<PathBuf> {
    let data = cache_dir().join(key).join("data");
    (data.join("PG_VERSION").is_file() && data.join("global/pg_control").is_file()).then_some(data)
}

/// A private folder in the cache to run initdb in (`.tmp-<pid>-<8 hex>`), owned by `run_as`.
pub(crate) fn scratch(run_as: Option<RunAs>) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let cache = cache_dir();
    std::fs::create_dir_all(&cache)?;
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755))?;
    sweep_scratch(&cache);
    let dir = cache.join(format!(".tmp-{}-{}", std::process::id(), &uuid::Uuid::new_v4().simple().to_string()[..8]));
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    if let Some(u) = run_as {
        nix::unistd::chown(&dir, Some(u.uid), Some(u.gid)).map_err(std::io::Error::from)?;
    }
    Ok(dir)
}

/// Publish the scratch folder (holding a whole `data`) under `key`; when another process was
/// first, drop ours. Either way a whole folder is under the key afterwards, or the error says why not.
pub(crate) fn publish(scratch: &Path, key: &str) -> std::io::Result<PathBuf> {
    let target = cache_dir().join(key);
    match std::fs::rename(scratch, &target) {
        Ok(()) => {}
        Err(_) if cached(key).is_some() => {
            let _ = std::fs::remove_dir_all(scratch);
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(scratch);
            return Err(e);
        }
    }
    cached(key).ok_or_else(|| std::io::Error::other(format!("{} is not a whole data folder", target.display())))
}

/// Remove scratch folders whose process is gone (a harness killed during initdb).
fn sweep_scratch(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(".tmp-")) else { continue };
        let Some(pid) = rest.split_once('-').and_then(|(p, _)| p.parse::<i32>().ok()) else { continue };
        if matches!(nix::sys::signal::kill(Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH)) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_with_the_build_and_stays_for_the_same_one() {
        let a = PgBin { dir: PathBuf::from("/nonexistent/a") };
        let b = PgBin { dir: PathBuf::from("/nonexistent/b") };
        assert_eq!(key(&a, "postgres (PostgreSQL) 15.18", "su"), key(&a, "postgres (PostgreSQL) 15.18", "su"));
        assert_ne!(key(&a, "postgres (PostgreSQL) 15.18", "su"), key(&b, "postgres (PostgreSQL) 15.18", "su"));
        assert_ne!(key(&a, "postgres (PostgreSQL) 15.18", "su"), key(&a, "postgres (PostgreSQL) 17.6", "su"));
        assert_ne!(key(&a, "postgres (PostgreSQL) 15.18", "su"), key(&a, "postgres (PostgreSQL) 15.18", "other"));
    }

    #[test]
    fn a_half_made_folder_is_not_taken_from_the_cache() {
        let k = format!("test-half-{}", std::process::id());
        let dir = cache_dir().join(&k).join("data");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("PG_VERSION"), "15\n").unwrap();
        assert!(cached(&k).is_none(), "no global/pg_control yet: not whole");
        std::fs::create_dir_all(dir.join("global")).unwrap();
        std::fs::write(dir.join("global/pg_control"), "x").unwrap();
        assert_eq!(cached(&k), Some(dir));
        std::fs::remove_dir_all(cache_dir().join(&k)).unwrap();
    }

    #[test]
    fn publishing_twice_keeps_the_first_and_drops_the_second() {
        let k = format!("test-twice-{}", std::process::id());
        let make = || {
            let s = scratch(None).unwrap();
            std::fs::create_dir_all(s.join("data/global")).unwrap();
            std::fs::write(s.join("data/PG_VERSION"), "15\n").unwrap();
            std::fs::write(s.join("data/global/pg_control"), "x").unwrap();
            s
        };
        let (first, second) = (make(), make());
        std::fs::write(first.join("data/first"), "").unwrap();
        let got = publish(&first, &k).unwrap();
        assert_eq!(publish(&second, &k).unwrap(), got);
        assert!(got.join("first").is_file(), "the first one stays");
        assert!(!second.exists(), "the second scratch folder is removed");
        std::fs::remove_dir_all(cache_dir().join(&k)).unwrap();
    }
}
