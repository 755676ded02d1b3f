//! The server's connections as the matrix budgets them, on a real server with few slots: the
//! budget read from its settings (and a login's own connection limit), and the server's refusals of
//! a session beyond them, which the harness names by their SQLSTATE (53300) as the want of a
//! connection: a STARVED row, never a verdict.

use fenceproof_harness::db::connections::{refused, Budget, HARNESS_RESERVE};
use fenceproof_harness::db::databases::{pool, url_as, WORKER_PASSWORD};
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::Backend;
use fenceproof_harness::HarnessError;
use sqlx::{Connection, PgConnection};

/// Slots of the test's server, and those kept for superusers.
const MAX: u32 = 20;
const RESERVED: u32 = 3;

#[tokio::test]
async fn the_budget_is_read_from_the_server_and_its_refusals_are_the_want_of_a_connection() {
    let dir = fenceproof_harness::test_dir!("connection_budget");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = [("max_connections", MAX), ("superuser_reserved_connections", RESERVED)];
    let extra = settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let bin = PgBin::locate(None).unwrap();
    let cluster = NativeCluster::start_with(bin, &dir.join("postgres.log"), extra).await.unwrap();
    let url = cluster.url_for("postgres");
    let admin = pool(&url, "test-admin", 1).await.unwrap();
    let budget = Budget::read(&admin).await.unwrap();
    assert_eq!((budget.max_connections, budget.reserved, budget.in_use), (MAX, RESERVED, 0), "{budget:?}");
    assert_eq!(budget.role_limit, None, "the admin has no connection limit");
    assert_eq!(budget.for_rows(), MAX - RESERVED - HARNESS_RESERVE);

    // Logins with limits of their own: the budget counts the reader's, and the server refuses a
    // session beyond one. No session is closed before the end (a closed one's server process may
    // linger for a moment and take a slot).
    for (role, limit) in [("fp_limited", 2), ("fp_reader", 5), ("fp_many", -1)] {
        let create = format!("CREATE ROLE {role} LOGIN PASSWORD '{WORKER_PASSWORD}' CONNECTION LIMIT {limit}");
        sqlx::query(&create).execute(&admin).await.unwrap();
    }
    let as_role = |role: &str| url_as(&url, role).unwrap();
    let mut held = Vec::new();
    for role in ["fp_limited", "fp_limited", "fp_reader"] {
        held.push(PgConnection::connect(&as_role(role)).await.unwrap());
    }
    let reader = pool(&as_role("fp_reader"), "test-reader", 1).await.unwrap();
    let budget = Budget::read(&reader).await.unwrap();
    assert_eq!(budget.role_limit, Some((5, 1)), "its limit, and its other session: {budget:?}");
    assert_eq!(budget.in_use, 4, "the admin's and three held sessions: {budget:?}");
    assert_eq!(budget.for_rows(), 0, "a limit of 5 leaves nothing beside the harness's reserve");
    let e = PgConnection::connect(&as_role("fp_limited")).await.expect_err("a third session of a login limited to 2");
    assert!(refused(&e), "the role's limit is SQLSTATE 53300: {e}");
    assert!(HarnessError::Database(e).out_of_connections());

    // Every slot an ordinary login may take: the next session is refused as the issue saw it.
    let ordinary = MAX - RESERVED - 5; // the admin, three held sessions and the reader's pool
    let mut refusal = None;
    for _ in 0..=ordinary {
        match PgConnection::connect(&as_role("fp_many")).await {
            Ok(c) => held.push(c),
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
    }
    let e = refusal.expect("the ordinary slots run out");
    assert!(e.to_string().contains("remaining connection slots are reserved"), "{e}");
    assert!(refused(&e), "{e}");
    assert!(held.len() as u32 <= 3 + ordinary, "{} sessions held", held.len());
    for c in held {
        c.close().await.unwrap();
    }
    reader.close().await;
    admin.close().await;
}
