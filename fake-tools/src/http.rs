//! A deliberately small HTTP/1.1: one request per connection (`Connection: close`), JSON bodies,
//! `Content-Length` framing, bounded sizes and read deadlines. Small enough that faults such as
//! "the server committed and then dropped the connection" are exactly what they say.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub const MAX_HEADER_BYTES: usize = 16 * 1024;
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("request too large")]
    TooLarge,
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("timed out")]
    Timeout,
}

/// Read one request from `stream` within `deadline`.
pub async fn read_request(stream: &mut TcpStream, deadline: Duration) -> Result<Request, HttpError> {
    tokio::time::timeout(deadline, read_request_inner(stream)).await.map_err(|_| HttpError::Timeout)?
}

async fn read_request_inner(stream: &mut TcpStream) -> Result<Request, HttpError> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut header_bytes = reader.read_line(&mut line).await?;
    let mut parts = line.split_whitespace();
    let (method, path) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(p), Some(v)) if v.starts_with("HTTP/1.") => (m.to_string(), p.to_string()),
        _ => return Err(HttpError::Malformed(format!("request line {:?}", line.trim_end()))),
    };
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        let n = reader.read_line(&mut h).await?;
        header_bytes += n;
        if header_bytes > MAX_HEADER_BYTES {
            return Err(HttpError::TooLarge);
        }
        let h = h.trim_end();
        if n == 0 || h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').ok_or_else(|| HttpError::Malformed(format!("header {h:?}")))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len = match headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        Some((_, v)) => v.parse::<usize>().map_err(|_| HttpError::Malformed("content-length".into()))?,
        None => 0,
    };
    if len > MAX_BODY_BYTES {
        return Err(HttpError::TooLarge);
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).await?;
    Ok(Request { method, path, headers, body })
}

/// Write a JSON response and close.
pub async fn write_response(stream: &mut TcpStream, status: u16, body: &serde_json::Value) -> std::io::Result<()> {
    let text = serde_json::to_string(body).expect("json");
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(text.as_bytes()).await?;
    stream.shutdown().await
}

/// Percent-encode one path segment (everything but RFC 3986 unreserved characters).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decode a percent-encoded path segment; `None` when it is not valid UTF-8 or a bad escape.
pub fn decode_segment(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What a client call can end in, short of a response.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No connection: the request certainly never reached the server.
    #[error("connect failed: {0}")]
    Connect(std::io::Error),
    /// The request may have been processed; no answer came back in time.
    #[error("no response within {0:?}")]
    Timeout(Duration),
    /// The connection ended without a complete response: the request may have been processed.
    #[error("connection ended without a response: {0}")]
    NoResponse(String),
}

impl CallError {
    /// True when the remote side may have acted on the request.
    pub fn outcome_unknown(&self) -> bool {
        !matches!(self, CallError::Connect(_))
    }
}

/// One request, one response. `headers` are extra headers.
pub async fn call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<(u16, serde_json::Value), CallError> {
    let mut stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| CallError::Connect(std::io::Error::other("connect timed out")))?
        .map_err(CallError::Connect)?;
    let text = body.map(|b| serde_json::to_string(b).expect("json")).unwrap_or_default();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", text.len());
    if body.is_some() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let exchange = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(text.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| CallError::Timeout(timeout))?
        .map_err(|e| CallError::NoResponse(e.to_string()))?;
    parse_response(&raw).ok_or_else(|| CallError::NoResponse(format!("{} bytes, no complete response", raw.len())))
}

fn parse_response(raw: &[u8]) -> Option<(u16, serde_json::Value)> {
    let text = std::str::from_utf8(raw).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case("content-length")).map(|(_, v)| v.trim())
        })?
        .parse()
        .ok()?;
    if body.len() < len {
        return None;
    }
    let v = if len == 0 { serde_json::Value::Null } else { serde_json::from_str(&body[..len]).ok()? };
    Some((status, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_round_trip() {
        let op = "tenant1/8c0e-11/create/v1 x%";
        let enc = encode_segment(op);
        assert!(!enc.contains('/'));
        assert_eq!(decode_segment(&enc).as_deref(), Some(op));
        assert_eq!(decode_segment("%zz"), None);
    }

    #[test]
    fn responses_parse_and_truncation_is_detected() {
        let ok = b"HTTP/1.1 201 Created\r\nContent-Length: 8\r\n\r\n{\"a\": 1}";
        assert_eq!(parse_response(ok), Some((201, serde_json::json!({"a": 1}))));
        let cut = b"HTTP/1.1 201 Created\r\nContent-Length: 20\r\n\r\n{\"a\": 1}";
        assert_eq!(parse_response(cut), None);
        assert_eq!(parse_response(b""), None);
    }
}
