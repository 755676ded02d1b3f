//! A minimal HTTP/1.0 client for the two REST APIs the Patroni backend reads: etcd's `/health` and
//! Patroni's `/leader`, `/primary`, `/cluster`, `/switchover` (on loopback for the harness's own
//! cluster, at the contract's `rest` addresses for a team's). Plain `http://` only. One request per
//! connection, bounded; no dependency for five calls.

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
    get_at(&format!("127.0.0.1:{port}"), path).await
}

/// `POST` a JSON body to `http://127.0.0.1:{port}{path}`.
pub async fn post(port: u16, path: &str, json: &serde_json::Value) -> Result<Response> {
    post_at(&format!("127.0.0.1:{port}"), path, json, BOUND).await
}

/// `GET http://{addr}{path}` (`addr` is `host:port`).
pub async fn get_at(addr: &str, path: &str) -> Result<Response> {
    request(addr, "GET", path, None, BOUND).await
}

/// `POST` a JSON body to `http://{addr}{path}`, bounded by `bound` (a switchover answers once done).
pub async fn post_at(addr: &str, path: &str, json: &serde_json::Value, bound: Duration) -> Result<Response> {
    request(addr, "POST", path, Some(json.to_string()), bound).await
}

/// The `host:port` of an `http://host:port[/...]` address, or why it is not one.
pub fn addr_of(url: &str) -> std::result::Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("'{url}' is not an http:// address"))?;
    let addr = rest.split('/').next().unwrap_or_default();
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(addr.to_string()),
        _ => Err(format!("'{url}' has no host:port (e.g. http://db1.internal:8008)")),
    }
}

async fn request(addr: &str, method: &str, path: &str, body: Option<String>, bound: Duration) -> Result<Response> {
    let what = format!("{method} {addr}{path}");
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let body = body.unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        s.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(bound, exchange)
        .await
        .map_err(|_| HarnessError::Timeout { what: what.clone(), after_ms: bound.as_millis() })?
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

    #[test]
    fn an_address_is_host_and_port_of_a_plain_http_url() {
        assert_eq!(super::addr_of("http://db1.internal:8008").unwrap(), "db1.internal:8008");
        assert_eq!(super::addr_of("http://127.0.0.1:8008/patroni").unwrap(), "127.0.0.1:8008");
        assert!(super::addr_of("https://db1:8008").is_err());
        assert!(super::addr_of("http://db1").is_err());
        assert!(super::addr_of("http://:8008").is_err());
    }
}
