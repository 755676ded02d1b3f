//! Routing of the fake tools' HTTP API.
//!
//! | method + path | what |
//! |---|---|
//! | `GET /health` | liveness |
//! | `GET /ledger` | every ledger entry |
//! | `POST /admin/faults` | arm a fault for a tool: `{"tool": "idem", "mode": "hang_after_commit", "count": 1}` |
//! | `DELETE /admin/faults` | disarm all |
//! | `POST /tools/<tool>/create` | create (see [`crate::tools`]); header `x-fault` injects a fault for this call |
//! | `GET /tools/<tool>/operations/<id>` | query by operation_id |
//! | `GET /tools/<tool>/resources/<id>` | query by resource id |

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::faults::{Armed, Fault};
use crate::http::{decode_segment, read_request, write_response, HttpError, Request};
use crate::observe::Observer;
use crate::tools::Tools;

pub struct State {
    pub tools: Mutex<Tools>,
    pub faults: Mutex<Vec<Armed>>,
    /// What each create and query records of the callers' database sessions.
    pub observer: Observer,
}

impl State {
    pub fn new(tools: Tools) -> Arc<State> {
        State::observing(tools, Observer::new(None).expect("no database to parse"))
    }

    /// Tools that record, at every create and query, the callers' open transactions.
    pub fn observing(tools: Tools, observer: Observer) -> Arc<State> {
        Arc::new(State { tools: Mutex::new(tools), faults: Mutex::new(Vec::new()), observer })
    }

    async fn take_fault(&self, tool: &str) -> Option<Fault> {
        let mut armed = self.faults.lock().await;
        let i = armed.iter().position(|a| a.tool == tool && a.count > 0)?;
        armed[i].count -= 1;
        let f = armed[i].fault;
        if armed[i].count == 0 {
            armed.remove(i);
        }
        Some(f)
    }
}

/// Serve until the listener fails.
pub async fn serve(listener: TcpListener, state: Arc<State>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let state = state.clone();
        tokio::spawn(async move { handle(stream, state).await });
    }
}

async fn handle(mut stream: TcpStream, state: Arc<State>) {
    let req = match read_request(&mut stream, Duration::from_secs(10)).await {
        Ok(r) => r,
        Err(HttpError::Io(_)) | Err(HttpError::Timeout) => return,
        Err(e) => {
            let status = if matches!(e, HttpError::TooLarge) { 413 } else { 400 };
            let reply = state.tools.lock().await.reject("-", None, status, &e.to_string());
            let _ = write_response(&mut stream, status, &reply.map(|r| r.1).unwrap_or(Value::Null)).await;
            return;
        }
    };
    let Some(decoded) =
        req.path.trim_start_matches('/').split('/').map(decode_segment).collect::<Option<Vec<String>>>()
    else {
        let reply = state.tools.lock().await.reject("-", None, 400, &format!("bad percent-encoding in {}", req.path));
        let _ = write_response(&mut stream, 400, &reply.map(|r| r.1).unwrap_or(Value::Null)).await;
        return;
    };
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    let conn = stream.peer_addr().ok().zip(stream.local_addr().ok());
    let reply = match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["health"]) => (200, json!({"ok": true})),
        ("GET", ["ledger"]) => (200, json!(state.tools.lock().await.ledger().entries())),
        ("POST", ["admin", "faults"]) => match serde_json::from_slice::<Armed>(&req.body) {
            Ok(a) => {
                state.faults.lock().await.push(a);
                (200, json!({"armed": true}))
            }
            Err(e) => (400, json!({"error": format!("bad fault: {e}")})),
        },
        ("DELETE", ["admin", "faults"]) => {
            state.faults.lock().await.clear();
            (200, json!({"disarmed": true}))
        }
        ("POST", ["tools", tool, "create"]) => match create(&mut stream, &state, tool, &req).await {
            Some(r) => r,
            None => return,
        },
        ("GET", ["tools", tool, "operations", op]) => {
            let seen = state.observer.observe(conn).await;
            let mut t = state.tools.lock().await;
            t.observed_call(seen, Some(op), tool, |t| t.query_operation(tool, op)).unwrap_or_else(io_error)
        }
        ("GET", ["tools", tool, "resources", id]) => {
            let seen = state.observer.observe(conn).await;
            let mut t = state.tools.lock().await;
            t.observed_call(seen, None, tool, |t| t.query_resource(tool, id)).unwrap_or_else(io_error)
        }
        _ => (404, json!({"error": format!("no route {} {}", req.method, req.path)})),
    };
    let _ = write_response(&mut stream, reply.0, &reply.1).await;
}

fn io_error(e: std::io::Error) -> (u16, Value) {
    (500, json!({"error": format!("ledger: {e}")}))
}

/// Create with faults applied; `None` means the connection is dropped without an answer.
async fn create(stream: &mut TcpStream, state: &State, tool: &str, req: &Request) -> Option<(u16, Value)> {
    // The callers' sessions as the call arrives, read while any injected latency runs.
    let observer = state.observer.clone();
    let conn = stream.peer_addr().ok().zip(stream.local_addr().ok());
    let seen = tokio::spawn(async move { observer.observe(conn).await });
    let fault = match req.header("x-fault") {
        Some(v) => Fault::from_header(v),
        None => state.take_fault(tool).await,
    };
    match fault {
        Some(Fault::Latency { ms }) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Some(Fault::Hang) => std::future::pending::<()>().await,
        Some(Fault::Error5xx) => return Some((503, json!({"error": "injected 5xx; nothing was done"}))),
        _ => {}
    }
    let op =
        serde_json::from_slice::<Value>(&req.body).ok().and_then(|b| b["operation_id"].as_str().map(str::to_string));
    let seen = seen.await.ok().flatten();
    let reply = {
        let mut t = state.tools.lock().await;
        t.observed_call(seen, op.as_deref(), tool, |t| t.create(tool, &req.body)).unwrap_or_else(io_error)
    };
    match fault {
        Some(Fault::DropAfterCommit) => {
            let _ = tokio::io::AsyncWriteExt::shutdown(stream).await;
            None
        }
        Some(Fault::HangAfterCommit) => std::future::pending().await,
        _ => Some(reply),
    }
}
