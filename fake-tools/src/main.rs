//! fenceproof-fake-tools: the fake remote tools as their own process. Prints
//! `{"event":"listening","addr":"127.0.0.1:<port>"}` on stdout once it accepts connections, and
//! exits when its stdin closes (the harness is gone) or it is killed.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fenceproof_fake_tools::ledger::Ledger;
use fenceproof_fake_tools::observe::Observer;
use fenceproof_fake_tools::server::{serve, State};
use fenceproof_fake_tools::tools::Tools;
use tokio::io::AsyncReadExt;

#[derive(Parser, Debug)]
#[command(name = "fenceproof-fake-tools", about = "Fake remote tools with a durable ledger of real side effects")]
struct Args {
    /// The ledger file (created if missing, reloaded if present).
    #[arg(long)]
    ledger: PathBuf,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The callers' database, read at every create and query for sessions with an open transaction
    /// (recorded in the call's ledger entry). A password comes from `PGPASSWORD`, never this flag.
    #[arg(long)]
    observe_database_url: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let ledger = Ledger::open(&args.ledger).with_context(|| format!("opening ledger {}", args.ledger.display()))?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await.context("binding 127.0.0.1")?;
    println!("{}", serde_json::json!({ "event": "listening", "addr": listener.local_addr()?.to_string() }));
    let observer = Observer::new(args.observe_database_url.as_deref()).context("--observe-database-url")?;
    let state = State::observing(Tools::new(ledger), observer);
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    tokio::select! {
        r = serve(listener, state) => r.context("serving")?,
        _ = async { while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {} } => {}
    }
    Ok(())
}
