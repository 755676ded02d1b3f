//! A team's server with password authentication (`scram-sha-256` on TCP) and a `--database-url`
//! without the password: the password reaches the harness, the workers and the fake tools'
//! observer from `PGPASSWORD`, and from a passfile (`PGPASSFILE`) alone. Without either, the run
//! stops with one line before any row.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fenceproof_harness::db::databases;
use fenceproof_harness::testkit::TestCluster;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");
const SECRET: &str = "s3cret-for-app";

/// `verify --only A,E-idem` (scripted workers; a dispatcher and the tools' observer) with `env`.
fn verify(url: &str, dir: &Path, env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--database-url", url, "--only", "A,E-idem", "--reports-dir"])
        .arg(dir.join("reports"))
        .env_remove("PGPASSWORD")
        .env_remove("PGPASSFILE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(240));
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test]
async fn a_password_in_pgpassword_or_a_passfile_reaches_the_workers_under_scram() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("external_password")).await;
    let admin = databases::pool(&tc.url_for("postgres"), "test-admin", 1).await.unwrap();
    for sql in [
        "CREATE DATABASE appdb".to_string(),
        format!("CREATE ROLE app LOGIN PASSWORD '{SECRET}'"),
        "GRANT CREATE ON DATABASE appdb TO app".to_string(),
    ] {
        sqlx::query(&sql).execute(&admin).await.unwrap();
    }
    let encrypted: String =
        sqlx::query_scalar("SELECT rolpassword FROM pg_authid WHERE rolname = 'app'").fetch_one(&admin).await.unwrap();
    assert!(encrypted.starts_with("SCRAM-SHA-256$"), "the password is stored for scram: {encrypted}");
    // The harness's superuser keeps trust; every other login over TCP must prove its password.
    let hba: String = sqlx::query_scalar("SHOW hba_file").fetch_one(&admin).await.unwrap();
    std::fs::write(
        &hba,
        "local all all trust\nhost all fenceproof 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    assert!(sqlx::query_scalar::<_, bool>("SELECT pg_reload_conf()").fetch_one(&admin).await.unwrap());
    admin.close().await;
    let url = tc.url_for("appdb").replacen("fenceproof@", "app@", 1);
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("external_password");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();

    let (code, text) = verify(&url, &tmp.join("none"), &[]);
    assert_eq!(code, Some(3), "without a password the run cannot connect:\n{text}");
    assert!(text.contains("password authentication failed") || text.contains("password"), "{text}");

    let (code, text) = verify(&url, &tmp.join("env"), &[("PGPASSWORD", SECRET.to_string())]);
    assert_eq!(code, Some(0), "PGPASSWORD with a URL without a password:\n{text}");
    assert!(text.contains("2/2 experiments passed"), "{text}");

    let passfile = tmp.join("pgpass");
    let port = url.split(':').nth(2).and_then(|p| p.split('/').next()).unwrap().to_string();
    std::fs::write(&passfile, format!("127.0.0.1:{port}:appdb:app:{SECRET}\n")).unwrap();
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, text) = verify(&url, &tmp.join("file"), &[("PGPASSFILE", passfile.display().to_string())]);
    assert_eq!(code, Some(0), "a passfile alone, with a URL without a password:\n{text}");
    assert!(text.contains("2/2 experiments passed"), "{text}");
}
