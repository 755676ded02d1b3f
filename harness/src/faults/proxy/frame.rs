//! The PostgreSQL wire protocol, as much of it as the fault proxy needs: the untyped startup
//! packets (with the SSL and GSS encryption requests the proxy refuses with `N`), the typed
//! messages that follow (one type byte and a big-endian length that counts itself), and the SQL
//! text inside `Query`, `Parse` and `Bind` (which names a statement parsed earlier).

use tokio::io::{AsyncRead, AsyncReadExt};

/// The request code of an SSLRequest.
pub const SSL_REQUEST: i32 = 80_877_103;
/// The request code of a GSSENCRequest.
pub const GSSENC_REQUEST: i32 = 80_877_104;
/// The request code of a CancelRequest.
pub const CANCEL_REQUEST: i32 = 80_877_102;

/// No message of this protocol is near this size; a bigger length means the stream is not
/// PostgreSQL's, and the proxy closes it rather than allocating.
const MAX_LEN: usize = 1 << 30;

/// One startup-phase packet: its whole bytes (length included) and its code.
pub struct Startup {
    pub bytes: Vec<u8>,
    pub code: i32,
}

/// Read one untyped startup packet.
pub async fn read_startup<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Startup> {
    let len = r.read_i32().await?;
    let len = checked_len(len, 8)?;
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(&(len as i32).to_be_bytes());
    bytes.resize(len, 0);
    r.read_exact(&mut bytes[4..]).await?;
    let code = i32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    Ok(Startup { bytes, code })
}

/// One typed message: its type byte and its whole bytes (type and length included), ready to
/// forward unchanged.
#[derive(Debug, Clone)]
pub struct Frame {
    pub tag: u8,
    pub bytes: Vec<u8>,
}

impl Frame {
    /// The body after the type byte and the length.
    pub fn body(&self) -> &[u8] {
        &self.bytes[5..]
    }
}

/// Read one typed message; `Ok(None)` at a clean end of the stream.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let mut tag = [0u8; 1];
    match r.read_exact(&mut tag).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = checked_len(r.read_i32().await?, 4)?;
    let mut bytes = Vec::with_capacity(len + 1);
    bytes.push(tag[0]);
    bytes.extend_from_slice(&(len as i32).to_be_bytes());
    bytes.resize(len + 1, 0);
    r.read_exact(&mut bytes[5..]).await?;
    Ok(Some(Frame { tag: tag[0], bytes }))
}

fn checked_len(len: i32, min: usize) -> std::io::Result<usize> {
    let len = usize::try_from(len).unwrap_or(0);
    if len < min || len > MAX_LEN {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a PostgreSQL message length: {len}"),
        ));
    }
    Ok(len)
}

/// The NUL-terminated strings at the start of `body`, at most `n` of them.
fn cstrings(body: &[u8], n: usize) -> Vec<String> {
    body.split(|b| *b == 0).take(n).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

/// What a client message asks the server to do, as far as the proxy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    /// A simple query (`Q`): its SQL, run now.
    Query(String),
    /// `Parse` (`P`): a statement named `name` (empty for the unnamed one) with this SQL.
    Parse { name: String, sql: String },
    /// `Bind` (`B`): run the statement named `statement`.
    Bind { statement: String },
    /// `Terminate` (`X`).
    Terminate,
    /// Anything else (Describe, Execute, Sync, Flush, password, copy data...).
    Other,
}

/// Classify a client frame.
pub fn client_msg(f: &Frame) -> ClientMsg {
    match f.tag {
        b'Q' => ClientMsg::Query(cstrings(f.body(), 1).pop().unwrap_or_default()),
        b'P' => {
            let mut s = cstrings(f.body(), 2);
            let sql = s.pop().unwrap_or_default();
            let name = s.pop().unwrap_or_default();
            ClientMsg::Parse { name, sql }
        }
        b'B' => {
            let s = cstrings(f.body(), 2);
            ClientMsg::Bind { statement: s.get(1).cloned().unwrap_or_default() }
        }
        b'X' => ClientMsg::Terminate,
        _ => ClientMsg::Other,
    }
}

/// The transaction status a `ReadyForQuery` (`Z`) reports: `I` idle, `T` in a transaction, `E`
/// in a failed transaction.
pub fn ready_status(f: &Frame) -> Option<u8> {
    (f.tag == b'Z').then(|| f.body().first().copied()).flatten()
}

/// The tag of a `CommandComplete` (`C`): `COMMIT`, `ROLLBACK`, `UPDATE 1`, `SELECT 1`...
pub fn command_tag(f: &Frame) -> Option<String> {
    (f.tag == b'C').then(|| cstrings(f.body(), 1).pop()).flatten()
}

/// SQL reduced to what patterns are written against: lower case, quotes dropped, runs of
/// whitespace as one space.
pub fn normalize(sql: &str) -> String {
    let lower = sql.to_lowercase().replace('"', "");
    lower.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// True when `sql` ends a transaction with a commit (`COMMIT`, `END`, `COMMIT AND NO CHAIN`...).
pub fn is_commit(sql: &str) -> bool {
    let n = normalize(sql);
    let n = n.trim_end_matches(';').trim();
    n == "commit" || n == "end" || n.starts_with("commit ") || n == "end transaction" || n == "end work"
}

/// True when `sql` ends a transaction with a rollback.
pub fn is_rollback(sql: &str) -> bool {
    let n = normalize(sql);
    n.starts_with("rollback") || n.starts_with("abort")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, body: &[u8]) -> Frame {
        let mut bytes = vec![tag];
        bytes.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        bytes.extend_from_slice(body);
        Frame { tag, bytes }
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_lengths_are_refused() {
        let f = frame(b'Q', b"SELECT 1\0");
        let mut input: &[u8] = &f.bytes;
        let back = read_frame(&mut input).await.unwrap().unwrap();
        assert_eq!(back.bytes, f.bytes);
        assert_eq!(client_msg(&back), ClientMsg::Query("SELECT 1".into()));
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty).await.unwrap().is_none());
        let mut bad: &[u8] = &[b'Q', 0, 0, 0, 2];
        assert!(read_frame(&mut bad).await.is_err());
        let mut huge: &[u8] = &[b'Q', 0x7f, 0xff, 0xff, 0xff];
        assert!(read_frame(&mut huge).await.is_err());
    }

    #[tokio::test]
    async fn startup_packets_give_their_code() {
        let mut ssl: &[u8] = &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        assert_eq!(read_startup(&mut ssl).await.unwrap().code, SSL_REQUEST);
    }

    #[test]
    fn parse_and_bind_name_their_statements() {
        let p = frame(b'P', b"sqlx_s_3\0UPDATE agent_runs SET x = 1\0\0\0");
        assert_eq!(
            client_msg(&p),
            ClientMsg::Parse { name: "sqlx_s_3".into(), sql: "UPDATE agent_runs SET x = 1".into() }
        );
        let b = frame(b'B', b"\0sqlx_s_3\0\0\0\0\0\0\0");
        assert_eq!(client_msg(&b), ClientMsg::Bind { statement: "sqlx_s_3".into() });
        assert_eq!(ready_status(&frame(b'Z', b"T")), Some(b'T'));
        assert_eq!(ready_status(&frame(b'C', b"COMMIT\0")), None);
        assert_eq!(command_tag(&frame(b'C', b"COMMIT\0")).as_deref(), Some("COMMIT"));
        assert_eq!(command_tag(&frame(b'Z', b"I")), None);
    }

    #[test]
    fn commits_and_rollbacks_are_recognised_in_any_spelling() {
        for c in ["COMMIT", "commit;", "  Commit  ", "END", "COMMIT AND NO CHAIN", "end transaction"] {
            assert!(is_commit(c), "{c}");
        }
        for n in ["COMMITTED", "SELECT 1", "ROLLBACK", "endless"] {
            assert!(!is_commit(n), "{n}");
        }
        assert!(is_rollback("ROLLBACK") && is_rollback("abort") && !is_rollback("COMMIT"));
        assert_eq!(normalize("UPDATE  \"agent_runs\"\n SET"), "update agent_runs set");
    }
}
