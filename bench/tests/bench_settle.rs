//! After a benchmark phase, a load backend that does not leave in time is a warning, never an
//! abort of the whole benchmark (seen under load: "2 backends ... still connected after 10s").

use std::time::Duration;

use fenceproof_bench::dbstats;
use fenceproof_harness::db::databases;
use fenceproof_harness::testkit::TestCluster;

#[tokio::test]
async fn a_lingering_load_backend_is_a_warning_not_an_abort() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("bench_settle")).await;
    let admin = databases::pool(&tc.url_for("postgres"), "test-admin", 1).await.unwrap();
    let lingering = databases::pool(&tc.url_for("postgres"), "bench-load-test", 1).await.unwrap();
    sqlx::query("SELECT 1").execute(&lingering).await.unwrap();
    let w = dbstats::settle(&admin, "bench-load-test", Duration::from_millis(300)).await;
    let w = w.expect("a backend that stays is reported");
    assert!(w.contains("still connected") && w.contains("may be partial"), "{w}");
    lingering.close().await;
    assert_eq!(dbstats::settle(&admin, "bench-load-test", Duration::from_secs(10)).await, None, "gone: no warning");
    admin.close().await;
}
