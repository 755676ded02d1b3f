//! Bad input caught before anything starts: one line, the usage exit code.

use std::path::Path;

/// A `--worker-bin` that is a folder or not executable, or a `--database-url` that is not a
/// PostgreSQL URL.
pub fn check(worker_bin: Option<&Path>, database_url: Option<&str>) -> Result<(), String> {
    if let Some(p) = worker_bin {
        use std::os::unix::fs::PermissionsExt;
        if p.is_dir() {
            return Err(format!("--worker-bin {} is a folder, not a program", p.display()));
        }
        if !p.exists() {
            return Err(format!("--worker-bin {} does not exist", p.display()));
        }
        if p.metadata().map(|m| m.permissions().mode() & 0o111 == 0).unwrap_or(true) {
            return Err(format!("--worker-bin {} is not executable (chmod +x it)", p.display()));
        }
    }
    if let Some(url) = database_url {
        let scheme = url.split("://").next().unwrap_or_default();
        if !url.contains("://") || !["postgres", "postgresql"].contains(&scheme) {
            return Err(format!(
                "--database-url must be a postgres:// or postgresql:// URL, not '{}'",
                fenceproof_harness::db::external::masked(url)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_plain_files_and_other_schemes_are_refused() {
        assert!(check(Some(Path::new("/tmp")), None).unwrap_err().contains("is a folder"));
        assert!(check(Some(Path::new("/nonexistent/w")), None).unwrap_err().contains("does not exist"));
        let plain = std::env::temp_dir().join(format!("fenceproof-plain-{}", std::process::id()));
        std::fs::write(&plain, "not a program").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        assert!(check(Some(&plain), None).unwrap_err().contains("not executable"));
        let _ = std::fs::remove_file(&plain);
        assert!(check(Some(Path::new("/bin/sh")), None).is_ok());
        assert!(check(None, Some("http://h/db")).unwrap_err().contains("postgres://"));
        assert!(check(None, Some("postgresql://u:secret@h/db")).is_ok());
        assert!(!check(None, Some("mysql://u:secret@h/db")).unwrap_err().contains("secret"), "the password is masked");
    }
}
