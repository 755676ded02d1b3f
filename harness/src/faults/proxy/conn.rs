//! One proxied connection: the startup exchange (encryption refused with `N`, a cancel request
//! passed straight through), then two relays, client to server and server to client, that forward
//! whole messages and apply the proxy's faults between them. Returning from [`serve`] drops both
//! sockets, which is how every fault that "closes the connection" closes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::frame::{self, ClientMsg, Frame};
use super::{ArmKind, Shared};

/// How long the proxy waits for the server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a connection is doomed to, once an armed fault picked it.
#[derive(Debug, Clone)]
struct Doom {
    arm: u64,
    kind: ArmKind,
    sql: String,
}

#[derive(Default)]
struct ConnState {
    /// The last ReadyForQuery said a transaction is open.
    in_tx: bool,
    /// Named statements parsed on this connection (`""` is the unnamed one).
    statements: HashMap<String, String>,
    doom: Option<Doom>,
    /// Server messages held back while a lost acknowledgement waits for the transaction's end.
    held_back: Vec<Frame>,
    saw_error: bool,
    /// The transaction under way ran a durable write an armed crash counts (or such a statement
    /// runs on its own).
    counted: bool,
    /// What the server answered since the last ReadyForQuery: a CommandComplete, one tagged
    /// `COMMIT`, an error.
    cycle_complete: bool,
    cycle_commit: bool,
    cycle_error: bool,
    /// A CommandComplete `ROLLBACK` since the last ReadyForQuery (a simple query may hold a whole
    /// transaction that rolls back).
    cycle_rollback: bool,
}

enum Step {
    Forward,
    Close,
}

pub(super) async fn serve(client: TcpStream, shared: Arc<Shared>, id: u64) -> std::io::Result<()> {
    let (mut cr, mut cw) = client.into_split();
    let startup = loop {
        let s = frame::read_startup(&mut cr).await?;
        match s.code {
            frame::SSL_REQUEST | frame::GSSENC_REQUEST => cw.write_all(b"N").await?,
            frame::CANCEL_REQUEST => {
                let mut server = connect(&shared).await?;
                server.write_all(&s.bytes).await?;
                return Ok(());
            }
            _ => break s,
        }
    };
    // A partition holds new connections too (a SYN that gets no answer).
    shared.gate().await;
    let server = connect(&shared).await?;
    let (mut sr, mut sw) = server.into_split();
    sw.write_all(&startup.bytes).await?;
    let conn = Arc::new(Mutex::new(ConnState::default()));
    tokio::select! {
        r = client_to_server(&mut cr, &mut sw, &shared, &conn, id) => r,
        r = server_to_client(&mut sr, &mut cw, &shared, &conn, id) => r,
    }
}

async fn connect(shared: &Shared) -> std::io::Result<TcpStream> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(shared.upstream)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the server did not accept within 10 s")),
    }
}

fn lock(c: &Mutex<ConnState>) -> std::sync::MutexGuard<'_, ConnState> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

async fn client_to_server(
    cr: &mut OwnedReadHalf,
    sw: &mut OwnedWriteHalf,
    shared: &Shared,
    conn: &Mutex<ConnState>,
    id: u64,
) -> std::io::Result<()> {
    while let Some(f) = frame::read_frame(cr).await? {
        shared.gate().await;
        let sql = {
            let mut c = lock(conn);
            match frame::client_msg(&f) {
                ClientMsg::Query(s) => Some(s),
                ClientMsg::Parse { name, sql } => {
                    c.statements.insert(name, sql);
                    None
                }
                ClientMsg::Bind { statement } => c.statements.get(&statement).cloned(),
                ClientMsg::Terminate | ClientMsg::Other => None,
            }
        };
        if let Some(sql) = sql {
            let in_tx = lock(conn).in_tx;
            shared.hold_if_matched(id, &sql, in_tx).await;
            if let Step::Close = on_statement(shared, conn, id, &sql) {
                return Ok(());
            }
            shared.log_statement(id, &sql, in_tx);
            if shared.crash_counts(&sql) {
                lock(conn).counted = true;
            }
        }
        sw.write_all(&f.bytes).await?;
    }
    Ok(())
}

/// Apply an armed fault to a statement the client is about to send.
fn on_statement(shared: &Shared, conn: &Mutex<ConnState>, id: u64, sql: &str) -> Step {
    let mut c = lock(conn);
    if let Some(d) = c.doom.clone() {
        if d.kind != ArmKind::LoseRequest && frame::is_rollback(sql) {
            // The picked transaction is rolled back by its client: nothing to lose; pick another.
            c.doom = None;
            shared.rearm(d.arm);
            return Step::Forward;
        }
        if d.kind == ArmKind::LoseRequest {
            if frame::is_commit(sql) {
                shared.fire(
                    d.arm,
                    d.kind,
                    id,
                    &d.sql,
                    "the COMMIT was dropped before the server saw it; connection closed",
                );
                return Step::Close;
            }
            if frame::is_rollback(sql) {
                c.doom = None;
                shared.rearm(d.arm);
            }
        }
        return Step::Forward;
    }
    let Some((arm, kind)) = shared.take_arm(sql) else { return Step::Forward };
    if kind == ArmKind::LoseRequest && !c.in_tx {
        shared.fire(arm, kind, id, sql, "an autocommit write was dropped before the server saw it; connection closed");
        return Step::Close;
    }
    c.doom = Some(Doom { arm, kind, sql: sql.to_string() });
    Step::Forward
}

async fn server_to_client(
    sr: &mut OwnedReadHalf,
    cw: &mut OwnedWriteHalf,
    shared: &Shared,
    conn: &Mutex<ConnState>,
    id: u64,
) -> std::io::Result<()> {
    while let Some(f) = frame::read_frame(sr).await? {
        shared.gate().await;
        let status = frame::ready_status(&f);
        let mut crash_due = None;
        let out: Vec<Frame> = {
            let mut c = lock(conn);
            match c.doom.clone() {
                Some(d) if d.kind == ArmKind::LoseAck => {
                    c.saw_error |= f.tag == b'E';
                    c.held_back.push(f);
                    match status {
                        None => continue,
                        Some(b'I') if !c.saw_error => {
                            shared.fire(
                                d.arm,
                                d.kind,
                                id,
                                &d.sql,
                                "the transaction committed on the server; its acknowledgement was dropped and the connection closed",
                            );
                            return Ok(());
                        }
                        Some(s) => {
                            if c.saw_error || s == b'E' {
                                c.doom = None;
                                shared.rearm(d.arm);
                            }
                            c.saw_error = false;
                            c.in_tx = s != b'I';
                            std::mem::take(&mut c.held_back)
                        }
                    }
                }
                Some(d) if d.kind == ArmKind::CutInTransaction && status.is_some() => {
                    if status == Some(b'T') {
                        shared.fire(d.arm, d.kind, id, &d.sql, "the connection was cut inside the open transaction");
                        return Ok(());
                    }
                    c.doom = None;
                    shared.rearm(d.arm);
                    c.in_tx = status != Some(b'I');
                    vec![f]
                }
                _ => {
                    if durable_commit(&mut c, &f, status) {
                        crash_due = shared.count_commit();
                    }
                    if let Some(s) = status {
                        c.in_tx = s != b'I';
                    }
                    vec![f]
                }
            }
        };
        deliver(cw, shared, id, status, out).await?;
        if let Some(arm) = crash_due {
            // The acknowledgement is in the worker's socket: it dies before it can act on it.
            shared.crash_now(arm, id);
            return Ok(());
        }
    }
    Ok(())
}

/// Write `out` to the client (after the armed reply delay, when a round ends) and note an answer
/// that reached it.
async fn deliver(
    cw: &mut OwnedWriteHalf,
    shared: &Shared,
    id: u64,
    status: Option<u8>,
    out: Vec<Frame>,
) -> std::io::Result<()> {
    if status.is_some() {
        if let Some(d) = shared.reply_delay() {
            tokio::time::sleep(d).await;
        }
    }
    let answers = out.iter().any(|f| frame::ready_status(f).is_some());
    for f in out {
        cw.write_all(&f.bytes).await?;
    }
    if answers {
        shared.note_answer(id);
    }
    Ok(())
}

/// Follow one server message; true when it is the ReadyForQuery that ends a durable write's
/// commit: a transaction that ran a counted statement answered `COMMIT`, or a counted statement
/// run on its own (the connection was idle) answered without error. A ReadyForQuery after no
/// CommandComplete (a Parse/Describe round) ends nothing.
fn durable_commit(c: &mut ConnState, f: &Frame, status: Option<u8>) -> bool {
    match f.tag {
        b'C' => {
            let tag = frame::command_tag(f);
            c.cycle_complete = true;
            c.cycle_commit |= tag.as_deref() == Some("COMMIT");
            c.cycle_rollback |= tag.as_deref() == Some("ROLLBACK");
        }
        b'E' => c.cycle_error = true,
        _ => {}
    }
    let Some(s) = status else { return false };
    let ends = s == b'I' && c.cycle_complete;
    let committed = ends && c.counted && !c.cycle_error && !c.cycle_rollback && (c.cycle_commit || !c.in_tx);
    if ends {
        c.counted = false;
    }
    c.cycle_complete = false;
    c.cycle_commit = false;
    c.cycle_error = false;
    c.cycle_rollback = false;
    committed
}
