//! The report folder of one run: `reports/<run-id>/`, one sub-folder per experiment, and the
//! `reports/latest` link pointing at the newest run.

use std::path::{Path, PathBuf};

use crate::error::Result;

/// The run folder this process created last (for marking it interrupted).
static CURRENT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

pub struct RunDir {
    pub run_id: String,
    pub path: PathBuf,
    pub root: PathBuf,
}

impl RunDir {
    /// Create `root/<timestamp>-<random>/`.
    pub fn create(root: &Path) -> Result<RunDir> {
        let run_id = format!(
            "{}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        );
        let path = root.join(&run_id);
        std::fs::create_dir_all(&path)
            .map_err(|e| crate::HarnessError::Other(format!("cannot create the run folder {}: {e}", path.display())))?;
        // A run folder made inside the current one (the extra sessions of a parallel search, the
        // versions of verify-versions) leaves the outer one as the folder an interrupt marks.
        let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
        if !current.as_ref().is_some_and(|outer| path.starts_with(outer)) {
            *current = Some(path.clone());
        }
        Ok(RunDir { run_id, path, root: root.to_path_buf() })
    }

    /// Mark the newest outermost run folder of this process as interrupted (a file `INTERRUPTED` saying by
    /// what and when), so a half-written folder is not read as a finished run; save the rows it
    /// finished (its matrix and `index.html`, marked INTERRUPTED, when the run keeps them) and
    /// point `latest` at it: the newest run is the interrupted one, and its folder stands alone.
    pub fn mark_interrupted(by: &str) {
        let Some(p) = CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone() else { return };
        let why = format!("interrupted by {by} at {}; the verdicts in this folder are incomplete", chrono::Utc::now());
        let _ = std::fs::write(p.join("INTERRUPTED"), format!("{why}\n"));
        crate::report::partial::save_interrupted(&p, &why);
        if let (Some(root), Some(name)) = (p.parent(), p.file_name()) {
            let run = RunDir { run_id: name.to_string_lossy().into_owned(), path: p.clone(), root: root.to_path_buf() };
            let _ = run.mark_latest();
        }
    }

    /// The folder of one experiment, created on demand.
    pub fn experiment(&self, id: &str) -> Result<PathBuf> {
        let p = self.path.join(id);
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }

    /// Point `root/latest` at this run.
    pub fn mark_latest(&self) -> Result<()> {
        let link = self.root.join("latest");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&self.run_id, &link)?;
        Ok(())
    }
}
