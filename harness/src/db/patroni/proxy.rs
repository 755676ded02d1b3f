//! A TCP proxy between one Patroni node and etcd, inside the harness: cutting it partitions that
//! node from etcd (every open connection dropped, new ones refused) while its PostgreSQL and its
//! clients keep talking. Healing lets connections through again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Result;

/// A proxy on a loopback port of its own towards `127.0.0.1:target`.
pub struct EtcdProxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    /// Tells the open connections to drop (a new value each cut).
    generation: watch::Sender<u64>,
    accept: JoinHandle<()>,
}

impl EtcdProxy {
    pub async fn start(target: u16) -> Result<EtcdProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (c, g) = (cut.clone(), generation.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                tokio::spawn(pipe(client, target, g.subscribe()));
            }
        });
        Ok(EtcdProxy { port, cut, generation, accept })
    }

    /// Partition: drop every open connection and refuse new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Heal: let connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

async fn pipe(mut client: TcpStream, target: u16, mut cut: watch::Receiver<u64>) {
    let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", target)).await else { return };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        _ = cut.changed() => {}
    }
}

impl Drop for EtcdProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
