//! The fake tools as a real process over HTTP: bad input gets a clear 4xx and is recorded (never
//! a crash), faults do what they say, and the ledger survives the tools' own SIGKILL.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use fenceproof_fake_tools::client::ToolClient;
use fenceproof_fake_tools::http::{call, CallError};
use fenceproof_fake_tools::ledger;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_fenceproof-fake-tools");
const T: Duration = Duration::from_secs(5);

async fn start(ledger: &Path) -> (tokio::process::Child, SocketAddr) {
    let mut child = tokio::process::Command::new(BIN)
        .arg("--ledger")
        .arg(ledger)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(T, lines.next_line()).await.unwrap().unwrap().unwrap();
    let addr = serde_json::from_str::<serde_json::Value>(&first).unwrap()["addr"].as_str().unwrap().parse().unwrap();
    (child, addr)
}

fn ledger_path(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("ledger.jsonl")
}

#[tokio::test]
async fn bad_input_is_a_recorded_4xx_and_the_server_lives_on() {
    let path = ledger_path("bad_input");
    let (mut child, addr) = start(&path).await;
    let c = ToolClient::new(addr);
    let raw = |body: &'static [u8]| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!("POST /tools/idem/create HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len());
        tokio::io::AsyncWriteExt::write_all(&mut s, head.as_bytes()).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut s, body).await.unwrap();
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut s, &mut out).await.unwrap();
        out
    };
    assert_eq!(c.create("nope", "op", &json!({}), T).await.unwrap().0, 404, "unknown tool");
    assert!(raw(b"{not json").await.starts_with("HTTP/1.1 400"), "malformed JSON");
    assert_eq!(c.create("idem", "op1", &json!({"n": 1}), T).await.unwrap().0, 201);
    let (s, v) = c.create("idem", "op1", &json!({"n": 2}), T).await.unwrap();
    assert_eq!(s, 422, "key reused with a different body: {v}");
    assert!(v["error"].as_str().unwrap().contains("different body"));
    let (s, _) = call(addr, "GET", "/tools/%zz/x", &[], None, T).await.unwrap();
    assert_eq!(s, 400, "bad escape");
    assert_eq!(c.health().await.unwrap().0, 200, "still serving");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    let entries = ledger::read(&path).unwrap();
    let rejected = entries.iter().filter(|e| e.kind == ledger::EntryKind::Rejected).count();
    let created = entries.iter().filter(|e| e.kind == ledger::EntryKind::Created).count();
    assert_eq!((created, rejected), (1, 4), "{entries:?}");
}

#[tokio::test]
async fn faults_do_what_they_say() {
    let path = ledger_path("faults");
    let (_child, addr) = start(&path).await;
    let c = ToolClient::new(addr);
    // Commit, then drop: the caller learns nothing, the ledger has the resource.
    c.arm("plain", "drop_after_commit", 1).await.unwrap();
    let e = c.create("plain", "op-drop", &json!({}), T).await.unwrap_err();
    assert!(matches!(e, CallError::NoResponse(_)) && e.outcome_unknown(), "{e}");
    // 5xx: nothing done.
    c.arm("plain", "error5xx", 1).await.unwrap();
    assert_eq!(c.create("plain", "op-5xx", &json!({}), T).await.unwrap().0, 503);
    // Commit, then hang: the caller times out, the ledger has the resource.
    let e = c.create("opquery", "op-hang", &json!({}), Duration::from_millis(300)).await;
    assert!(e.is_ok(), "no fault armed for opquery: {e:?}");
    c.arm("opquery", "hang_after_commit", 1).await.unwrap();
    let e = c.create("opquery", "op-hang2", &json!({}), Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(e, CallError::Timeout(_)), "{e}");
    assert_eq!(c.query_operation("opquery", "op-hang2", T).await.unwrap().0, 200, "created before hanging");
    let entries = ledger::read(&path).unwrap();
    let ops: Vec<&str> = entries
        .iter()
        .filter(|e| e.kind == ledger::EntryKind::Created)
        .filter_map(|e| e.operation_id.as_deref())
        .collect();
    assert_eq!(ops, vec!["op-drop", "op-hang", "op-hang2"]);
}

#[tokio::test]
async fn the_ledger_survives_the_tools_being_killed() {
    let path = ledger_path("durable");
    let (mut child, addr) = start(&path).await;
    let first = ToolClient::new(addr).create("idem", "op-x", &json!({"a": 1}), T).await.unwrap();
    child.kill().await.unwrap();
    let (_child2, addr2) = start(&path).await;
    let again = ToolClient::new(addr2).create("idem", "op-x", &json!({"a": 1}), T).await.unwrap();
    assert_eq!((first.0, again.0), (201, 200), "the key is remembered across a restart");
    assert_eq!(first.1["resource_id"], again.1["resource_id"]);
    assert_eq!(ledger::read(&path).unwrap().len(), 1);
}
