//! The report folder of one run: `reports/<run-id>/`, one sub-folder per experiment, and the
//! `reports/latest` link pointing at the newest run.

use std::path::{Path, PathBuf};

use crate::error::Result;

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
        std::fs::create_dir_all(&path)?;
        Ok(RunDir { run_id, path, root: root.to_path_buf() })
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
