//! Where the harness finds its own programs: the reference worker, its mutant build and the fake
//! tools, beside the running executable unless an environment variable names them.

use std::path::{Path, PathBuf};

/// Where the worker binary is: `FENCEPROOF_WORKER_BIN`, else beside this executable (or one level
/// up, for test binaries in target/*/deps).
pub fn default_worker_bin() -> PathBuf {
    sibling_binary("FENCEPROOF_WORKER_BIN", "fenceproof-worker")
}

/// Where the mutants build of the worker is: `FENCEPROOF_WORKER_MUTANT_BIN`, else beside this
/// executable (`just build-mutants` puts it there).
pub fn default_mutant_worker_bin() -> PathBuf {
    sibling_binary("FENCEPROOF_WORKER_MUTANT_BIN", "fenceproof-worker-mutant")
}

/// Where the fake-tools binary is: `FENCEPROOF_TOOLS_BIN`, else found like the worker.
pub fn default_tools_bin() -> PathBuf {
    sibling_binary("FENCEPROOF_TOOLS_BIN", "fenceproof-fake-tools")
}

/// The program `name`: `env` when set, else beside this executable, else one folder up (test
/// binaries in target/*/deps), else on PATH; when none has it, the path beside this executable
/// (which the error names).
fn sibling_binary(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let here = dir.join(name);
    if here.is_file() {
        return here;
    }
    let on_path =
        || std::env::var_os("PATH").and_then(|v| std::env::split_paths(&v).map(|d| d.join(name)).find(|p| p.is_file()));
    dir.parent().map(|p| p.join(name)).filter(|p| p.is_file()).or_else(on_path).unwrap_or(here)
}
