//! The server's connections, a resource like the machine's cores. [`refused`] tells, by type, an
//! error that is no answer of the database but the want of a connection (a pool's wait that ran
//! out, or the server refusing a session for want of slots: SQLSTATE 53300, which also reads
//! "remaining connection slots are reserved for …"): a row that meets one is STARVED, never a
//! verdict. [`Budget`] is what the server allows, read from the server itself, so the matrix
//! admits rows only while the connections they hold fit it.

use sqlx::PgPool;

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

/// Connections the session itself may hold beside its rows' own (its admin connections: eight at
/// once were seen while eight rows cloned their databases): kept out of what the rows may hold.
pub const HARNESS_RESERVE: u32 = 8;

/// What a server allows the session's rows, as read when the session started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// `max_connections`.
    pub max_connections: u32,
    /// Slots an ordinary login cannot take: `superuser_reserved_connections`, plus
    /// `reserved_connections` (PostgreSQL 16 and later). The workers' logins are ordinary, so
    /// these never count as theirs.
    pub reserved: u32,
    /// Client sessions open on the server when the session started, other than the reader's own
    /// (a team's server has other users; they are assumed to stay). A login that may not see
    /// another user's session kind counts each one connected to a database (an autovacuum worker
    /// of the moment among them).
    pub in_use: u32,
    /// The login's own `rolconnlimit` when it has one (on `--database-url`: the rows connect as
    /// that role), with its sessions open then, the reader's own excluded.
    pub role_limit: Option<(u32, u32)>,
}

impl Budget {
    /// How many connections the rows may hold together: the server's slots an ordinary login can
    /// take, less those in use and [`HARNESS_RESERVE`]; no more than the role's limit allows.
    pub fn for_rows(&self) -> u32 {
        let server = self.max_connections.saturating_sub(self.reserved + self.in_use + HARNESS_RESERVE);
        match self.role_limit {
            Some((limit, used)) => server.min(limit.saturating_sub(used + HARNESS_RESERVE)),
            None => server,
        }
    }

    /// The budget in one line, for the log.
    pub fn describe(&self) -> String {
        let role = match self.role_limit {
            Some((limit, used)) => format!("; the login's connection limit {limit}, {used} in use"),
            None => String::new(),
        };
        format!(
            "max_connections {}, {} reserved, {} in use, {} kept for the harness{role}: rows may hold {} connections at once",
            self.max_connections,
            self.reserved,
            self.in_use,
            HARNESS_RESERVE,
            self.for_rows()
        )
    }

    /// Read the budget through `pool` (a connection of the login the rows use, or the admin's on a
    /// server of the harness's own, whose worker logins have no limit).
    pub async fn read(pool: &PgPool) -> sqlx::Result<Budget> {
        let (max, superuser, reserved, in_use, limit, role_in_use): (i32, i32, i32, i64, i32, i64) = sqlx::query_as(
            "SELECT current_setting('max_connections')::int,
                    current_setting('superuser_reserved_connections')::int,
                    coalesce(current_setting('reserved_connections', true), '0')::int,
                    (SELECT count(*) FROM pg_stat_activity
                      WHERE pid <> pg_backend_pid()
                        AND (backend_type = 'client backend' OR (backend_type IS NULL AND datid IS NOT NULL))),
                    (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user),
                    (SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND usename = current_user)",
        )
        .fetch_one(pool)
        .await?;
        let n = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        Ok(Budget {
            max_connections: n(max.into()),
            reserved: n(superuser.into()) + n(reserved.into()),
            in_use: n(in_use),
            role_limit: (limit >= 0).then(|| (n(limit.into()), n(role_in_use))),
        })
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

    fn budget(max: u32, reserved: u32, in_use: u32, role: Option<(u32, u32)>) -> Budget {
        Budget { max_connections: max, reserved, in_use, role_limit: role }
    }

    #[test]
    fn the_rows_get_the_ordinary_slots_less_those_in_use_and_the_harness_reserve() {
        // The harness's own cluster: 200, 3 reserved for superusers, nothing else open.
        assert_eq!(budget(200, 3, 0, None).for_rows(), 200 - 3 - HARNESS_RESERVE);
        // A team's server: others hold 40 sessions, PostgreSQL 16's reserved_connections 2 more.
        assert_eq!(budget(100, 3 + 2, 40, None).for_rows(), 100 - 5 - 40 - HARNESS_RESERVE);
        // The login's own limit binds when it is the smaller: 30, of which 4 are open elsewhere.
        assert_eq!(budget(100, 3, 0, Some((30, 4))).for_rows(), 30 - 4 - HARNESS_RESERVE);
        assert_eq!(budget(100, 3, 80, Some((30, 0))).for_rows(), 100 - 3 - 80 - HARNESS_RESERVE);
        // A server with nothing to spare gives nothing, never a wrapped-around count.
        assert_eq!(budget(5, 3, 4, None).for_rows(), 0);
        assert_eq!(budget(100, 3, 0, Some((2, 1))).for_rows(), 0);
    }
}
