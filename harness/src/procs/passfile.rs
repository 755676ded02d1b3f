//! A libpq password file for child processes that are handed database URLs (the contract's failover
//! hooks): the URLs they get carry no password, and the passwords sit in a `0600` file named by
//! `PGPASSFILE`, the libpq way, so a hook that passes its URL to psql or pg_ctl on a command line
//! shows no secret in the process list. The file is removed when the guard drops.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::procs::worker::without_password;

/// A written password file, removed on drop.
pub struct PassFile {
    pub path: PathBuf,
}

impl Drop for PassFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `s` with `:` and `\` escaped, as a password file field.
fn field(s: &str) -> String {
    s.replace('\\', "\\\\").replace(':', "\\:")
}

/// The password file line for `url` (host or socket folder, port, database, user, password), or
/// `None` when it carries no password.
pub fn line(url: &str) -> Option<String> {
    let (bare, password) = without_password(&crate::db::external::with_host(url));
    let password = password?;
    let u = url::Url::parse(&bare).ok()?;
    let socket = u.query_pairs().find(|(k, _)| k == "host").map(|(_, v)| v.into_owned());
    let host = socket.unwrap_or_else(|| u.host_str().unwrap_or("localhost").to_string());
    let port = u.query_pairs().find(|(k, _)| k == "port").map(|(_, v)| v.into_owned());
    let port = port.unwrap_or_else(|| u.port().unwrap_or(5432).to_string());
    let db = u.path().trim_start_matches('/');
    let db = if db.is_empty() { "*" } else { db };
    Some(format!("{}:{}:{}:{}:{}", field(&host), field(&port), field(db), field(u.username()), field(&password)))
}

/// Write `dir/name` (mode 0600) with a line per URL that has a password; returns the guard and
/// the URLs without their passwords, in order.
pub fn write(dir: &Path, name: &str, urls: &[&str]) -> std::io::Result<(PassFile, Vec<String>)> {
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
    for l in urls.iter().filter_map(|u| line(u)) {
        writeln!(f, "{l}")?;
    }
    let bare = urls.iter().map(|u| without_password(&crate::db::external::with_host(u)).0).collect();
    Ok((PassFile { path }, bare))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn urls_lose_their_passwords_to_a_private_file() {
        let dir = std::env::temp_dir().join(format!("fp-passfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let urls =
            ["postgres://app:s%3Acr@db1:6432/appdb", "postgres://app:pw2@/appdb?host=/run/pg", "postgres://x@h/d"];
        let (pf, bare) = write(&dir, "hooks.pgpass", &urls).unwrap();
        assert_eq!(bare[0], "postgres://app@db1:6432/appdb");
        assert!(!bare.iter().any(|u| u.contains("s%3Acr") || u.contains("pw2")), "{bare:?}");
        let text = std::fs::read_to_string(&pf.path).unwrap();
        assert_eq!(text, "db1:6432:appdb:app:s\\:cr\n/run/pg:5432:appdb:app:pw2\n");
        assert_eq!(std::fs::metadata(&pf.path).unwrap().permissions().mode() & 0o777, 0o600);
        let path = pf.path.clone();
        drop(pf);
        assert!(!path.exists(), "removed with its guard");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
