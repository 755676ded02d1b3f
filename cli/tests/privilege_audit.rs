//! `fenceproof writers`, the privilege audit, against real PostgreSQL: in a schema opened on
//! purpose it names every hole by its rule (a role that can UPDATE the run and lease tables, by
//! grant, by column and through membership; a PUBLIC grant; SECURITY DEFINER functions without a
//! search_path, with one that searches pg_temp first, and executable by PUBLIC; CREATE on the
//! schema; default privileges), exit 1; it finds nothing in the shipped migrations (on
//! `--database-url`, and on its throwaway cluster on both write paths), nothing in the example team
//! schema, and a direct-path writer is held to exactly the documented privileges. The shipped
//! functions ignore a caller's temporary tables (the hole `definer-temp-first` names).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fenceproof_harness::db::{databases, privileges};
use fenceproof_harness::testkit::TestCluster;
use serde_json::Value;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("privilege_audit").join(name)
}

/// `fenceproof writers ARGS`: exit code, stdout, stderr.
fn writers(args: &[&str], name: &str) -> (Option<i32>, String, String) {
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        Command::new(FENCEPROOF).arg("writers").args(args),
        &dir(name),
        Duration::from_secs(120),
    );
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The findings of `--json`, as (rule, subject) pairs.
fn findings(url: &str, extra: &[&str], name: &str) -> (Option<i32>, Vec<(String, String)>) {
    let mut args = vec!["--json", "--database-url", url];
    args.extend_from_slice(extra);
    let (code, out, err) = writers(&args, name);
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let found = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rule"].as_str().unwrap().to_string(), f["subject"].as_str().unwrap().to_string()))
        .collect();
    (code, found)
}

const HOLES: &str = "
CREATE ROLE {p}_runs NOLOGIN;
GRANT UPDATE ON agent_runs TO {p}_runs;
CREATE ROLE {p}_cols NOLOGIN;
GRANT UPDATE (owner, epoch) ON worker_leases TO {p}_cols;
CREATE ROLE {p}_member LOGIN IN ROLE {p}_cols;
GRANT INSERT ON tool_operations TO PUBLIC;
CREATE FUNCTION force_success(p_run uuid) RETURNS void LANGUAGE sql SECURITY DEFINER
  AS $$ UPDATE agent_runs SET status = 'succeeded' WHERE run_id = p_run $$;
REVOKE EXECUTE ON FUNCTION force_success(uuid) FROM PUBLIC;
CREATE FUNCTION peek_lease(p_run uuid) RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = public
  AS $$ SELECT epoch FROM worker_leases WHERE run_id = p_run $$;
GRANT CREATE ON SCHEMA public TO {p}_runs;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT UPDATE, DELETE ON TABLES TO {p}_runs;
";

#[tokio::test]
async fn the_audit_names_each_hole_and_finds_none_in_the_shipped_migrations() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("privilege_audit")).await;
    let (url, pool) = tc.fresh_db("test-admin").await;
    let (code, found) = findings(&url, &[], "shipped");
    assert_eq!((code, found.len()), (Some(0), 0), "the shipped migrations: {found:?}");

    let p = format!("fp_hole_{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    sqlx::raw_sql(&HOLES.replace("{p}", &p)).execute(&pool).await.unwrap();
    let (code, found) = findings(&url, &[], "holes");
    assert_eq!(code, Some(1), "{found:?}");
    let has = |rule: &str, subject: &str| found.iter().any(|(r, s)| r == rule && s.contains(subject));
    for (rule, subject) in [
        (privileges::TABLE_WRITE_PUBLIC, "PUBLIC".to_string()),
        (privileges::TABLE_WRITE_ROLE, format!("role {p}_runs")),
        (privileges::TABLE_WRITE_ROLE, format!("role {p}_cols")),
        (privileges::TABLE_WRITE_ROLE, format!("role {p}_member (login)")),
        (privileges::DEFINER_NO_SEARCH_PATH, "public.force_success(uuid)".to_string()),
        (privileges::DEFINER_TEMP_FIRST, "public.peek_lease(uuid)".to_string()),
        (privileges::DEFINER_PUBLIC_EXECUTE, "public.peek_lease(uuid)".to_string()),
        (privileges::SCHEMA_CREATE, "schema public".to_string()),
        (privileges::DEFAULT_PRIVILEGES, "role ".to_string()),
    ] {
        assert!(has(rule, &subject), "{rule} {subject}: {found:#?}");
    }
    assert!(!has(privileges::DEFINER_PUBLIC_EXECUTE, "force_success"), "revoked from PUBLIC: {found:#?}");
    assert!(!found.iter().any(|(_, s)| s.contains("function public.fp_")), "the fp_* functions stay clean: {found:#?}");
    assert_eq!(found.len(), 9, "one finding per hole: {found:#?}");

    // The text: one FINDING line each, the member's line names the role it inherits from.
    let (code, text, _) = writers(&["--database-url", &url], "holes-text");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("FINDING")).collect();
    assert_eq!((code, lines.len()), (Some(1), 9), "{text}");
    let member = lines.iter().find(|l| l.contains(&format!("{p}_member"))).unwrap();
    assert!(member.contains("UPDATE worker_leases(owner, epoch)") && member.contains(&format!("{p}_cols")), "{member}");
    let (_, quiet, _) = writers(&["--quiet", "--database-url", &url], "holes-quiet");
    let kept = quiet.lines().filter(|l| l.starts_with("FINDING")).count();
    assert_eq!(kept, 9, "every finding: {quiet}");
    assert!(quiet.lines().last().unwrap().starts_with("9 finding(s) in schema public"), "{quiet}");
    assert!(!quiet.contains("superuser"), "the owner and superusers are left out: {quiet}");
    heal(&pool, &p).await;
}

async fn heal(pool: &sqlx::PgPool, p: &str) {
    sqlx::raw_sql(&format!(
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE UPDATE, DELETE ON TABLES FROM {p}_runs;
         DROP OWNED BY {p}_runs, {p}_cols, {p}_member; DROP ROLE {p}_member, {p}_cols, {p}_runs;"
    ))
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_direct_path_writer_may_hold_the_documented_privileges_and_nothing_more() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("privilege_audit_direct")).await;
    let (url, pool) = tc.fresh_db("test-admin").await;
    databases::create_direct_login(&pool).await.unwrap();
    let (code, found) = findings(&url, &[], "direct-unnamed");
    assert_eq!(code, Some(1), "not named a direct writer, its grants are a write around the fp_* path");
    assert!(found.iter().any(|(_, s)| s == "role fenceproof_direct_writer"), "{found:?}");
    assert!(found.iter().any(|(_, s)| s == "role fenceproof_direct_login (login)"), "its member: {found:?}");
    let named = ["--direct-writer", "fenceproof_direct_writer"];
    let (code, found) = findings(&url, &named, "direct-named");
    assert_eq!((code, found), (Some(0), vec![]), "exactly the documented privileges");
    sqlx::raw_sql("GRANT DELETE ON tool_operations TO fenceproof_direct_writer").execute(&pool).await.unwrap();
    let (code, text, _) = writers(&["--database-url", &url, named[0], named[1]], "direct-more");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.lines().any(|l| l.contains("fenceproof_direct_writer")
            && l.contains("DELETE tool_operations")
            && l.contains("beyond the direct path's privileges")),
        "{text}"
    );
}

#[test]
fn the_throwaway_cluster_finds_nothing_in_the_shipped_and_the_example_team_schema() {
    let team = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/team-schema.toml");
    let team = team.to_str().unwrap();
    for (args, name) in [
        (vec![], "throwaway-api"),
        (vec!["--write-path", "direct"], "throwaway-direct"),
        (vec!["--contract", team, "--write-path", "direct"], "throwaway-team"),
    ] {
        let (code, out, err) = writers(&args, name);
        assert_eq!(code, Some(0), "{args:?}: {out}\n{err}");
        assert!(out.lines().last().unwrap_or_default().starts_with("no finding in schema public"), "{out}");
    }
    let (code, _, err) = writers(&["--database-url", "mysql://nowhere"], "bad-url");
    assert_eq!((code, fenceproof_harness::testkit::own_lines(&err).trim().lines().count()), (Some(2), 1), "{err}");
    let (code, _, err) = writers(&["--database-url", "postgres://x@localhost/y", "--write-path", "direct"], "both");
    assert_eq!(code, Some(2), "the throwaway cluster's flags do not go with --database-url: {err}");
}

#[tokio::test]
async fn the_shipped_functions_ignore_a_callers_temporary_tables() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("privilege_audit_temp")).await;
    let (url, pool) = tc.fresh_db("test-admin").await;
    let run_id = fenceproof_protocol::runs::create_run(&pool, "task-temp", serde_json::json!({})).await.unwrap();
    sqlx::query("UPDATE agent_runs SET status = 'running' WHERE run_id = $1")
        .bind(run_id)
        .execute(&pool)
        .await
        .unwrap();
    let worker =
        databases::pool(&databases::url_as(&url, databases::WORKER_LOGIN).unwrap(), "intruder", 1).await.unwrap();
    let mut conn = worker.acquire().await.unwrap();
    sqlx::raw_sql("CREATE TEMP TABLE worker_leases (run_id uuid, owner text, epoch bigint, expires_at timestamptz)")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO worker_leases VALUES ($1, 'intruder', 99, 'infinity')")
        .bind(run_id)
        .execute(&mut *conn)
        .await
        .unwrap();
    let (outcome,): (String,) = sqlx::query_as(
        "SELECT outcome FROM fp_run_transition($1, 'intruder', 99, 0, 'running', 'succeeded', '{\"forged\": true}',
                                               NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    )
    .bind(run_id)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(outcome, "lease_lost", "the forged temporary lease is not the lease");
    let (status, revision): (String, i64) = sqlx::query_as("SELECT status, revision FROM agent_runs WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!((status.as_str(), revision), ("running", 0), "nothing committed");
}
