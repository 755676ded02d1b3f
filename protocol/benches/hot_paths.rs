//! Micro-benchmarks of the protocol's hot pure functions: the canonical request digest (RFC 8785
//! JSON + SHA-256) and operation_id construction. Run with `just microbench`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use fenceproof_protocol::operation::{operation_id, request_digest};
use serde_json::json;

fn digest(c: &mut Criterion) {
    let small = json!({"amount": 5, "currency": "EUR", "to": "acct-42"});
    let large = json!({
        "items": (0..100).map(|i| json!({"sku": format!("sku-{i}"), "qty": i, "price": {"amount": i * 3, "currency": "EUR"}})).collect::<Vec<_>>(),
        "customer": {"id": "c-1", "tags": ["a", "b", "c"], "address": {"city": "Lyon", "zip": "69001"}}
    });
    c.bench_function("request_digest small (3 fields)", |b| b.iter(|| request_digest(black_box(&small))));
    c.bench_function("request_digest large (100 items)", |b| b.iter(|| request_digest(black_box(&large))));
}

fn ids(c: &mut Criterion) {
    let run = uuid::Uuid::new_v4();
    c.bench_function("operation_id", |b| {
        b.iter(|| operation_id(black_box("tenant1"), run, black_box("charge-card"), 3))
    });
}

criterion_group!(benches, digest, ids);
criterion_main!(benches);
