//! The server's connections, a resource like the machine's cores. [`refused`] tells, by type, an
//! error that is no answer of the database but the want of a connection (a pool's wait that ran
//! out, or the server refusing a session for want of slots: SQLSTATE 53300, which also reads
//! "remaining connection slots are reserved for …"): a row that meets one is STARVED, never a
//! verdict.

/// SQLSTATE `too_many_connections`.
pub const TOO_MANY_CONNECTIONS: &str = "53300";

/// Whether `e` is the want of a connection rather than an answer of the database: the pool's wait
/// for one ran out (nothing was sent), or the server refused the session for want of slots.
pub fn refused(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(db) => db.code().as_deref() == Some(TOO_MANY_CONNECTIONS),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `DatabaseError` with a chosen SQLSTATE, as the server sends it.
    #[derive(Debug)]
    struct Sqlstate(&'static str, &'static str);

    impl std::fmt::Display for Sqlstate {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.1)
        }
    }
    impl std::error::Error for Sqlstate {}
    impl sqlx::error::DatabaseError for Sqlstate {
        fn message(&self) -> &str {
            self.1
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn server(code: &'static str, message: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Sqlstate(code, message)))
    }

    #[test]
    fn a_pool_timeout_and_53300_are_the_want_of_a_connection() {
        assert!(refused(&sqlx::Error::PoolTimedOut));
        assert!(refused(&server(
            "53300",
            "remaining connection slots are reserved for non-replication superuser connections"
        )));
        assert!(refused(&server("53300", "sorry, too many clients already")));
        // The database's own answers, and a lost connection, are not.
        assert!(!refused(&server("40001", "could not serialize access")));
        assert!(!refused(&server("42501", "permission denied for table worker_leases")));
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(!refused(&sqlx::Error::Io(reset)));
        assert!(!refused(&sqlx::Error::PoolClosed));
    }
}
