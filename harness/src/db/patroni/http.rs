//! A minimal HTTP/1.0 client for the two REST APIs the Patroni backend reads on loopback: etcd's
//! `/health` and Patroni's `/leader`, `/primary`, `/cluster`, `/switchover`. One request per
//! connection, bounded; no dependency for four calls.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{HarnessError, Result};

/// Bound on one request, connect to last byte.
const BOUND: Duration = Duration::from_secs(3);

/// A response: its status code and body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// `GET http://127.0.0.1:{port}{path}`.
pub async fn get(port: u16, path: &str) -> Result<Response> {
    request(port, "GET", path, None).await
}

/// `POST` a JSON body.
pub async fn post(port: u16, path: &str, json: &serde_json::Value) -> Result<Response> {
    request(port, "POST", path, Some(json.to_string())).await
}

async fn request(port: u16, method: &str, path: &str, body: Option<String>) -> Result<Response> {
    let what = format!("{method} 127.0.0.1:{port}{path}");
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let body = body.unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        s.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(BOUND, exchange)
        .await
        .map_err(|_| HarnessError::Timeout { what: what.clone(), after_ms: BOUND.as_millis() })?
        .map_err(|e| HarnessError::Process(format!("{what}: {e}")))?;
    parse(&raw).ok_or_else(|| HarnessError::Process(format!("{what}: not an HTTP response")))
}

fn parse(raw: &[u8]) -> Option<Response> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(Response { status, body: body.to_string() })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_response_is_parsed_and_garbage_is_not() {
        let r = super::parse(b"HTTP/1.0 503 Service Unavailable\r\nA: b\r\n\r\n{\"role\":\"replica\"}").unwrap();
        assert_eq!((r.status, r.body.as_str()), (503, "{\"role\":\"replica\"}"));
        assert!(super::parse(b"hello").is_none());
    }
}
