//! The wire-protocol fault proxy against a real server: every fault does what it says, judged
//! by reading the table directly (not through the proxy), and every wait is bounded.

use std::time::{Duration, Instant};

use fenceproof_harness::faults::inject;
use fenceproof_harness::faults::proxy::Proxy;
use fenceproof_harness::record::timeline::Timeline;
use sqlx::{Connection, PgConnection, PgPool};

const T: Duration = Duration::from_secs(10);

async fn has(pool: &PgPool, x: i32) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM t WHERE x = $1)").bind(x).fetch_one(pool).await.unwrap()
}

async fn setup(c: &fenceproof_harness::testkit::TestCluster) -> (PgPool, Proxy, Timeline) {
    let (url, pool) = c.fresh_db("proxy-test").await;
    sqlx::raw_sql("CREATE TABLE t (x int)").execute(&pool).await.unwrap();
    let timeline = Timeline::new();
    let proxy = Proxy::start("w", &url, timeline.clone()).await.unwrap();
    (pool, proxy, timeline)
}

/// A connection through the proxy.
async fn connect(proxy: &Proxy) -> PgConnection {
    PgConnection::connect(proxy.url()).await.expect("connects through the proxy")
}

#[tokio::test]
async fn proxy_faults_do_what_they_say_on_a_real_server() {
    let c = fenceproof_harness::testkit::TestCluster::start(fenceproof_harness::test_dir!("proxy-faults")).await;
    let (pool, proxy, timeline) = setup(&c).await;
    relay_and_lost_acks(&pool, &proxy, &timeline).await;
    lost_requests_and_cuts(&pool, &proxy, &timeline).await;
    statement_barrier(&pool, &proxy, &timeline).await;
    latency_and_partition(&proxy, &timeline).await;

    // An armed fault that never matches says so, bounded.
    let armed = inject(proxy.lose_ack("no such statement", T).unwrap(), &timeline).await.unwrap();
    let e = armed.fired(Duration::from_millis(100)).await.unwrap_err().to_string();
    assert!(e.contains("timed out"), "{e}");

    // Every fault is in the timeline.
    let actions: Vec<String> = timeline.entries().iter().map(|e| e.action.clone()).collect();
    for want in [
        "lost acknowledgement",
        "lost request",
        "cut inside a transaction",
        "statement held",
        "barrier armed",
        "barrier released",
        "latency injected",
        "latency healed",
        "partition injected",
        "partition healed",
    ] {
        assert!(actions.iter().any(|a| a == want), "{want} missing from {actions:?}");
    }
    // The injections and heals carry the fault's mark.
    let partition_steps: Vec<_> = timeline
        .entries()
        .into_iter()
        .filter_map(|e| e.fault.filter(|f| f.name == "partition"))
        .map(|f| f.step)
        .collect();
    use fenceproof_harness::record::timeline::FaultStep;
    assert_eq!(partition_steps, vec![FaultStep::Inject, FaultStep::Heal]);
}

/// Plain relay, and lost acknowledgements of an autocommit write and of an explicit COMMIT.
async fn relay_and_lost_acks(pool: &PgPool, proxy: &Proxy, timeline: &Timeline) {
    // Plain relay: extended and simple protocol both pass.
    let mut conn = connect(proxy).await;
    sqlx::query("INSERT INTO t VALUES ($1)").bind(0).execute(&mut conn).await.unwrap();
    sqlx::raw_sql("INSERT INTO t VALUES (100)").execute(&mut conn).await.unwrap();
    assert!(has(pool, 0).await && has(pool, 100).await);

    // A lost acknowledgement of an autocommit write: the client sees an error, the row exists.
    let armed = inject(proxy.lose_ack(r"insert into t\b", T).unwrap(), timeline).await.unwrap();
    let r = sqlx::query("INSERT INTO t VALUES ($1)").bind(1).execute(&mut conn).await;
    assert!(r.is_err(), "the client must not get an answer: {r:?}");
    assert!(!matches!(r, Err(sqlx::Error::Database(_))), "no server error either: {r:?}");
    let fired = armed.fired(T).await.unwrap();
    assert!(fired.sql.contains("insert into t"), "{fired:?}");
    assert!(has(pool, 1).await, "the write committed on the server");

    // A lost acknowledgement of an explicit COMMIT.
    let mut conn = connect(proxy).await;
    let armed = inject(proxy.lose_ack(r"insert into t\b", T).unwrap(), timeline).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO t VALUES ($1)").bind(2).execute(&mut *tx).await.unwrap();
    assert!(tx.commit().await.is_err(), "COMMIT's answer is lost");
    armed.fired(T).await.unwrap();
    assert!(has(pool, 2).await, "the transaction committed on the server");
}

/// Lost requests (autocommit and in a transaction) and a cut inside a transaction: nothing commits.
async fn lost_requests_and_cuts(pool: &PgPool, proxy: &Proxy, timeline: &Timeline) {
    // A lost request, autocommit and in a transaction: nothing commits.
    let mut conn = connect(proxy).await;
    let armed = inject(proxy.lose_request(r"insert into t\b", T).unwrap(), timeline).await.unwrap();
    assert!(sqlx::raw_sql("INSERT INTO t VALUES (3)").execute(&mut conn).await.is_err());
    armed.fired(T).await.unwrap();
    let mut conn = connect(proxy).await;
    let armed = inject(proxy.lose_request(r"insert into t\b", T).unwrap(), timeline).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO t VALUES ($1)").bind(4).execute(&mut *tx).await.unwrap();
    assert!(tx.commit().await.is_err());
    armed.fired(T).await.unwrap();
    assert!(!has(pool, 3).await && !has(pool, 4).await, "a lost request never commits");

    // A cut inside a transaction: the server rolls it back.
    let mut conn = connect(proxy).await;
    let armed = inject(proxy.cut_in_transaction(r"insert into t\b", T).unwrap(), timeline).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    assert!(sqlx::query("INSERT INTO t VALUES ($1)").bind(6).execute(&mut *tx).await.is_err());
    drop(tx);
    armed.fired(T).await.unwrap();
    assert!(!has(pool, 6).await);
}

/// A statement barrier: held before the server sees it, released by the harness.
async fn statement_barrier(pool: &PgPool, proxy: &Proxy, timeline: &Timeline) {
    // A statement barrier: held before the server sees it, released by the harness.
    let mut conn = connect(proxy).await;
    let hold = inject(proxy.hold(r"insert into t\b", T).unwrap(), timeline).await.unwrap();
    let writer =
        tokio::spawn(async move { sqlx::query("INSERT INTO t VALUES (5)").execute(&mut conn).await.map(|_| ()) });
    let (_, sql) = hold.held(T).await.unwrap();
    assert!(sql.contains("values (5)"), "{sql}");
    assert!(!has(pool, 5).await, "a held statement has not reached the server");
    hold.heal().await.unwrap();
    tokio::time::timeout(T, writer).await.unwrap().unwrap().unwrap();
    assert!(has(pool, 5).await);
}

/// Latency on every reply; a partition that stalls an open connection and refuses a new one
/// until it is healed.
async fn latency_and_partition(proxy: &Proxy, timeline: &Timeline) {
    // Latency: every reply waits at least the base delay.
    let mut conn = connect(proxy).await;
    let latency = inject(proxy.latency(Duration::from_millis(150), Duration::from_millis(50)), timeline).await.unwrap();
    let t0 = Instant::now();
    sqlx::raw_sql("SELECT 1").execute(&mut conn).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(150), "{:?}", t0.elapsed());
    latency.heal().await.unwrap();

    // A partition: an open connection stalls, a new one is not answered; after the heal both work.
    let partition = inject(proxy.partition(T), timeline).await.unwrap();
    let stalled = tokio::time::timeout(Duration::from_millis(300), sqlx::raw_sql("SELECT 1").execute(&mut conn)).await;
    assert!(stalled.is_err(), "a query across a partition gets no answer");
    let fresh = tokio::time::timeout(Duration::from_millis(300), PgConnection::connect(proxy.url())).await;
    assert!(fresh.is_err(), "a new connection across a partition is not answered");
    partition.heal().await.unwrap();
    let mut again = connect(proxy).await;
    sqlx::raw_sql("SELECT 1").execute(&mut again).await.unwrap();
}

#[tokio::test]
async fn a_partition_ends_by_itself_at_its_bound() {
    let c = fenceproof_harness::testkit::TestCluster::start(fenceproof_harness::test_dir!("proxy-bound")).await;
    let (_pool, proxy, t) = setup(&c).await;
    let mut conn = PgConnection::connect(proxy.url()).await.unwrap();
    let p = inject(proxy.partition(Duration::from_millis(400)), &t).await.unwrap();
    let t0 = Instant::now();
    tokio::time::timeout(T, sqlx::raw_sql("SELECT 1").execute(&mut conn)).await.unwrap().unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(300), "{:?}", t0.elapsed());
    drop(p);
}

/// A transaction a partition cut off keeps its row lock on the server: another session's UPDATE
/// waits on it, `lock_waits::blocked_by` names the holder, its state and its last statement (not a
/// delay), and ending the holder's session, as `idle_in_transaction_session_timeout` would, lets the
/// waiter through.
#[tokio::test]
async fn a_partitioned_holders_row_lock_is_named_and_its_session_ended() {
    use fenceproof_scenarios::lock_waits;
    use sqlx::postgres::PgConnectOptions;
    let c = fenceproof_harness::testkit::TestCluster::start(fenceproof_harness::test_dir!("proxy-lock-wait")).await;
    let (pool, proxy, t) = setup(&c).await;
    sqlx::raw_sql("INSERT INTO t VALUES (1)").execute(&pool).await.unwrap();
    let opts: PgConnectOptions = proxy.url().parse().unwrap();
    let mut holder = PgConnection::connect_with(&opts.application_name("holder")).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::raw_sql("SELECT x FROM t WHERE x = 1 FOR UPDATE").execute(&mut holder).await.unwrap();
    let cut = inject(proxy.partition(T), &t).await.unwrap();
    assert!(lock_waits::blocked_by(&pool, "holder").await.unwrap().is_empty(), "nobody waits yet");
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move { sqlx::query("UPDATE t SET x = 2 WHERE x = 1").execute(&pool).await.map(|r| r.rows_affected()) }
    });
    let wait = fenceproof_harness::wait::until("the UPDATE to wait on the holder's lock", T, || async {
        Ok(lock_waits::blocked_by(&pool, "holder")
            .await
            .map_err(|e| fenceproof_harness::HarnessError::Other(e.to_string()))?
            .into_iter()
            .next())
    })
    .await
    .unwrap();
    let said = wait.describe();
    for part in ["holder's backend", "idle in transaction", "FOR UPDATE", "UPDATE t SET x = 2"] {
        assert!(said.contains(part), "{part} missing from {said}");
    }
    assert!(lock_waits::end_session(&pool, wait.holder_pid).await, "the holder's session is ended");
    let updated = tokio::time::timeout(T, waiter).await.expect("the waiter goes through").unwrap().unwrap();
    assert_eq!(updated, 1);
    assert!(lock_waits::session_bounds(&pool).await.contains("idle_in_transaction_session_timeout=0"));
    cut.heal().await.unwrap();
}

/// The crash after the Nth durable commit: only commits of transactions that ran a counted
/// statement count (an autocommit write, an explicit COMMIT; not a rollback, not another table's
/// write); the acknowledgement reaches the client, then the registered child's group is SIGKILLed
/// and the connection closed. An unregistered process group is never signalled.
#[tokio::test]
async fn a_crash_after_the_nth_commit_kills_the_registered_child_after_its_acknowledgement() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let c = fenceproof_harness::testkit::TestCluster::start(fenceproof_harness::test_dir!("proxy-crash")).await;
    let (pool, proxy, timeline) = setup(&c).await;
    sqlx::raw_sql("CREATE TABLE u (x int)").execute(&pool).await.unwrap();
    let mut child = std::process::Command::new("sleep").arg("60").process_group(0).spawn().unwrap();
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    fenceproof_harness::procs::registry::register(pgid, fenceproof_harness::procs::registry::Kind::Other);
    let crash = inject(proxy.crash_after_commit(r"insert into t\b", 2, pgid, T).unwrap(), &timeline).await.unwrap();
    let mut conn = connect(&proxy).await;
    // Not counted: another table's write, a rolled-back transaction, a read.
    sqlx::query("INSERT INTO u VALUES ($1)").bind(1).execute(&mut conn).await.unwrap();
    sqlx::raw_sql("BEGIN; INSERT INTO t VALUES (301); ROLLBACK").execute(&mut conn).await.unwrap();
    sqlx::query("SELECT count(*) FROM t").execute(&mut conn).await.unwrap();
    assert_eq!(crash.seen(), 0);
    // Counted: an autocommit write (1), then an explicit transaction's COMMIT (2), which fires.
    sqlx::query("INSERT INTO t VALUES ($1)").bind(302).execute(&mut conn).await.unwrap();
    assert_eq!(crash.seen(), 1);
    assert!(crash.try_fired().is_none(), "one commit is not two");
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO t VALUES ($1)").bind(303).execute(&mut *tx).await.unwrap();
    tx.commit().await.expect("the acknowledgement of the COMMIT reached the client");
    let fired = crash.fired(T).await.unwrap();
    assert_eq!((fired.commit, fired.killed), (2, true));
    assert!(has(&pool, 302).await && has(&pool, 303).await && !has(&pool, 301).await);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the registered group was SIGKILLed: {status:?}");
    fenceproof_harness::procs::registry::unregister(pgid);
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err(), "the connection was closed with it");
    crash.heal().await.unwrap();

    // A process group the registry does not know is never signalled.
    let mut stranger = std::process::Command::new("sleep").arg("60").process_group(0).spawn().unwrap();
    let spid = nix::unistd::Pid::from_raw(stranger.id() as i32);
    let crash = inject(proxy.crash_after_commit(r"insert into t\b", 1, spid, T).unwrap(), &timeline).await.unwrap();
    let mut conn = connect(&proxy).await;
    sqlx::query("INSERT INTO t VALUES ($1)").bind(304).execute(&mut conn).await.unwrap();
    assert!(!crash.fired(T).await.unwrap().killed);
    assert!(stranger.try_wait().unwrap().is_none(), "an unregistered process was signalled");
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    assert!(timeline.entries().iter().any(|e| e.action == "crash after commit"));
    assert!(proxy.crash_after_commit("x", 0, spid, T).is_err(), "commits count from 1");
}
