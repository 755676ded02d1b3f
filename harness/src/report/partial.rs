//! The rows a run has finished so far, kept in memory so that an interrupted run (SIGINT,
//! SIGTERM) still leaves a folder that stands alone: its matrix and `index.html` with the rows
//! done, marked INTERRUPTED.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Matrix;

/// The newest matrix so far and the run folder it belongs to.
static PARTIAL: Mutex<Option<(PathBuf, Matrix)>> = Mutex::new(None);

/// Keep `matrix` (the rows finished so far) as the one to save if the run in `dir` is interrupted.
pub fn record(dir: &Path, matrix: Matrix) {
    *PARTIAL.lock().unwrap_or_else(|p| p.into_inner()) = Some((dir.to_path_buf(), matrix));
}

/// The run ended on its own: nothing partial is kept.
pub fn clear() {
    *PARTIAL.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// Save the kept matrix into its folder (`matrix.json`, `matrix.md`, `junit.xml`, `index.html`)
/// marked with `why`, when it belongs to `dir`. Whether one was saved.
pub fn save_interrupted(dir: &Path, why: &str) -> bool {
    let Some((at, mut matrix)) = PARTIAL.lock().unwrap_or_else(|p| p.into_inner()).take() else { return false };
    if at != dir {
        return false;
    }
    matrix.interrupted = Some(why.to_string());
    matrix.save(&at).is_ok()
}
