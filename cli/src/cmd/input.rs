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

/// A `--reports-dir` that cannot be created or written to, named in the message. Nothing is
/// created here: the nearest folder that exists must be a folder this process may write in (a
/// probe file is made and removed there).
pub fn reports_dir(p: &Path) -> Result<(), String> {
    let mut existing = p;
    while !existing.as_os_str().is_empty() && !existing.exists() {
        existing = existing.parent().unwrap_or(Path::new(""));
    }
    let existing = if existing.as_os_str().is_empty() { Path::new(".") } else { existing };
    if !existing.is_dir() {
        return Err(format!(
            "--reports-dir {}: cannot create it ({} is not a folder)",
            p.display(),
            existing.display()
        ));
    }
    let probe = existing.join(format!(".fenceproof-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        format!("--reports-dir {}: cannot create or write it ({} refuses: {e})", p.display(), existing.display())
    })?;
    let _ = std::fs::remove_file(&probe);
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

    #[test]
    fn a_reports_dir_that_cannot_be_made_is_named() {
        let file = std::env::temp_dir().join(format!("fenceproof-file-{}", std::process::id()));
        std::fs::write(&file, "x").unwrap();
        let e = reports_dir(&file.join("sub")).unwrap_err();
        assert!(e.contains(&file.display().to_string()) && e.contains("cannot create"), "{e}");
        let _ = std::fs::remove_file(&file);
        let ok = std::env::temp_dir().join(format!("fenceproof-reports-{}", std::process::id()));
        assert!(reports_dir(&ok.join("deeper")).is_ok());
        assert!(!ok.exists(), "nothing is created by the check");
        std::fs::create_dir_all(&ok).unwrap();
        assert!(reports_dir(&ok).is_ok());
        assert_eq!(std::fs::read_dir(&ok).unwrap().count(), 0, "the write probe is removed");
        let _ = std::fs::remove_dir_all(&ok);
    }
}
