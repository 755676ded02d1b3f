//! Micro-benchmark of history checking: every global invariant over a synthetic oracle history of
//! many runs (takeovers, checkpoints, terminal writes). Run with `just microbench`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use fenceproof_harness::check::invariants;
use fenceproof_harness::record::oracle::CommitRow;
use serde_json::json;

/// `runs` runs, each: two owners' terms (a takeover), `saves` checkpoints per term, a final success.
fn history(runs: usize, saves: i64) -> Vec<CommitRow> {
    let mut rows = Vec::new();
    let mut seq = 0;
    let mut push = |rows: &mut Vec<CommitRow>,
                    table: &str,
                    run: uuid::Uuid,
                    old: serde_json::Value,
                    new: serde_json::Value,
                    owner: &str,
                    epoch: i64| {
        seq += 1;
        rows.push(CommitRow {
            seq,
            xid: String::new(),
            table_name: table.into(),
            op: "UPDATE".into(),
            writer: owner.into(),
            login: "fenceproof_worker_login".into(),
            backend_pid: 1,
            committed_at: chrono::Utc::now(),
            began_at: None,
            run_id: Some(run),
            old_row: Some(old),
            new_row: Some(new),
            lease_at_commit: Some(json!({"owner": owner, "epoch": epoch})),
            lease_live_at_commit: Some(true),
        });
    };
    for _ in 0..runs {
        let run = uuid::Uuid::new_v4();
        let mut rev = 0;
        for (epoch, owner) in [(1, "worker-a"), (2, "worker-b")] {
            push(
                &mut rows,
                "worker_leases",
                run,
                json!({"run_id": run, "owner": null, "epoch": epoch - 1, "expires_at": "2026-01-01T00:00:00Z"}),
                json!({"run_id": run, "owner": owner, "epoch": epoch, "expires_at": "2026-01-01T00:01:00Z"}),
                owner,
                epoch,
            );
            for _ in 0..saves {
                push(
                    &mut rows,
                    "agent_runs",
                    run,
                    json!({"run_id": run, "status": "running", "revision": rev}),
                    json!({"run_id": run, "status": "running", "revision": rev + 1}),
                    owner,
                    epoch,
                );
                rev += 1;
            }
        }
        push(
            &mut rows,
            "agent_runs",
            run,
            json!({"run_id": run, "status": "running", "revision": rev}),
            json!({"run_id": run, "status": "succeeded", "revision": rev + 1}),
            "worker-b",
            2,
        );
    }
    rows
}

fn checkers(c: &mut Criterion) {
    let mut g = c.benchmark_group("invariants::all");
    for runs in [10usize, 1000] {
        let h = history(runs, 5);
        g.bench_with_input(BenchmarkId::from_parameter(format!("{} commits", h.len())), &h, |b, h| {
            b.iter(|| invariants::all(black_box(h), &["control-plane-"]))
        });
    }
    g.finish();
}

criterion_group!(benches, checkers);
criterion_main!(benches);
