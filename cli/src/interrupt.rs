//! SIGINT and SIGTERM during a run: the run's future is dropped (its guards stop every process),
//! then everything the harness started is stopped for certain and the run folder marked.

use fenceproof_harness::procs::registry;

/// Run `work`, or stop at SIGINT / SIGTERM (dropping `work`, whose guards stop every process).
pub async fn interruptible(work: impl std::future::Future<Output = u8>) -> u8 {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigint = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut sigterm = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        code = work => code,
        _ = sigint.recv() => interrupted("SIGINT", 130).await,
        _ = sigterm.recv() => interrupted("SIGTERM", 143).await,
    }
}

/// The run's future has been dropped (its guards stopped the cluster and the workers); make sure.
async fn interrupted(sig: &str, code: u8) -> u8 {
    registry::kill_all();
    fenceproof_harness::record::run_dir::RunDir::mark_interrupted(sig);
    match fenceproof_harness::db::external::drop_created().await {
        Ok((_, failed)) => failed.iter().for_each(|f| eprintln!("fenceproof: could not drop schema {f}")),
        Err(e) => eprintln!("fenceproof: could not drop the schemas created in the external database: {e}"),
    }
    eprintln!("fenceproof: interrupted by {sig}; every process it started has been stopped");
    code
}
