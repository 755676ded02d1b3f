//! `fenceproof writers` inspects a database read-only and lists every role that can write the
//! protocol's tables around the fp_* functions: a granted legacy role is a finding (exit 1), and
//! after the revoke only the owner and superusers remain (exit 0). Bad input is one line, exit 2.

use std::process::Command;
use std::time::Duration;

use fenceproof_harness::testkit::TestCluster;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn writers(url: &str, dir: &std::path::Path) -> (Option<i32>, String) {
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        Command::new(FENCEPROOF).args(["writers", "--database-url", url]),
        dir,
        Duration::from_secs(60),
    );
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test]
async fn a_granted_legacy_role_is_listed_until_it_is_revoked() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("writers_cli")).await;
    let (url, pool) = tc.fresh_db("test-admin").await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("writers_cli");
    let role = format!("fp_legacy_test_{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    sqlx::raw_sql(&format!("CREATE ROLE {role} NOLOGIN; GRANT UPDATE ON agent_runs TO {role};"))
        .execute(&pool)
        .await
        .unwrap();
    let (code, text) = writers(&url, &dir);
    assert_eq!(code, Some(1), "{text}");
    let line = text.lines().find(|l| l.starts_with(&role)).unwrap_or_default();
    assert!(line.contains("GRANTED: bypasses fencing") && line.contains("UPDATE agent_runs"), "{text}");
    assert!(text.contains("superuser"), "the superuser is listed apart: {text}");
    sqlx::raw_sql(&format!("REVOKE UPDATE ON agent_runs FROM {role}")).execute(&pool).await.unwrap();
    let (code, text) = writers(&url, &dir);
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains(&role) && text.contains("only the tables' owner and superusers"), "{text}");
    sqlx::raw_sql(&format!("DROP ROLE {role}")).execute(&pool).await.unwrap();

    let (code, text) = writers("mysql://nowhere", &dir);
    assert_eq!((code, fenceproof_harness::testkit::own_lines(&text).trim().lines().count()), (Some(2), 1), "{text}");
    let (code, text) = writers(&tc.url_for("postgres"), &dir);
    assert_eq!(code, Some(3), "a database without the protocol's tables: {text}");
    assert!(text.contains("are not all in schema"), "{text}");
}
