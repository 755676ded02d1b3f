//! The benchmark's phases in the order a run performs them, each a function over the measuring
//! context ([`crate::measure::Bench`]): the driver's own overhead, renewal, fillfactor, the
//! protected commit, the claim, driver-neutral capacity, load curves, growth and sustained renewal.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::{self, WritePath};
use fenceproof_protocol::Lease;
use sqlx::PgPool;
use uuid::Uuid;

use crate::measure::Bench;
use crate::workloads::{self, HeldLease};
use crate::{dbstats, driver, neutral, pgbench, BenchOptions, GrowthSetup, DRIVER_ROUNDS, ROUNDS};

/// Leases per renewal statement in the sustained phases.
const SUSTAIN_BATCH: usize = 500;

/// The runs of the commit phases, one per client, with the revision each was created at.
pub(crate) type CommitRuns = Vec<(Lease, i64)>;

/// 1. The driver's own overhead: identical SQL, same clients, ours and pgbench in
///    [`DRIVER_ROUNDS`] paired rounds (whole seconds, as pgbench counts them; which side goes
///    first alternates), so drift on a shared machine hits both sides of each round; the goal
///    is the median of the rounds' ratios. A round is a whole main phase long: in one-second
///    rounds a single stall of the shared machine decides a round.
pub(crate) async fn driver_overhead(b: &mut Bench, opts: &BenchOptions) -> Result<(), HarnessError> {
    let (d, c) = (opts.duration, opts.clients);
    let slice = Duration::from_secs(d.as_secs_f64().round().max(1.0) as u64);
    let raw_script = neutral::Script {
        group: "driver",
        name: "pgbench: UPDATE bench_raw by primary key".into(),
        sql: workloads::RAW_UPDATE_PGBENCH.into(),
        units_per_tx: 1,
        as_worker: false,
        transactions_per_client: None,
        carries_revision: false,
    };
    for round in 0..DRIVER_ROUNDS {
        if round % 2 == 1 {
            let p = b.pgbench_measure(&raw_script, c, pgbench::Load::For(slice)).await?;
            b.pgbench.push(p);
        }
        // The load generator holds one connection per client on pgbench's threads (see
        // `driver::held_threads`); the same statement through a pool acquire per statement, as
        // the protocol crate's calls go, is measured beside it.
        b.closed_held(
            "driver",
            "our driver: UPDATE bench_raw by primary key, one held connection per client",
            c,
            slice,
            workloads::RAW_UPDATE,
            |cl, seq| 1 + workloads::pick(cl, seq, workloads::RAW_ROWS as usize) as i32,
        )
        .await?;
        if round % 2 == 0 {
            let p = b.pgbench_measure(&raw_script, c, pgbench::Load::For(slice)).await?;
            b.pgbench.push(p);
        }
        b.closed(
            "driver-pool",
            "our driver: UPDATE bench_raw by primary key, a pool acquire per statement",
            false,
            c,
            workloads::RAW_ROWS as u64,
            slice,
            None,
            |cl, seq, pool| {
                workloads::raw_update(pool, 1 + workloads::pick(cl, seq, workloads::RAW_ROWS as usize) as i32)
            },
        )
        .await?;
    }
    Ok(())
}

/// 2. Renewal, per lease and batched, at the main size; the leases it made, for the later phases.
pub(crate) async fn renewal(b: &mut Bench, opts: &BenchOptions) -> Result<Arc<Vec<HeldLease>>, HarnessError> {
    let (d, c) = (opts.duration, opts.clients);
    let leases = Arc::new(workloads::leases_up_to(&b.admin, opts.size, opts.workers).await?);
    workloads::vacuum(&b.admin, "VACUUM (FULL, ANALYZE) worker_leases").await?;
    renewal_pair(b, &leases, c, opts.size, d, "renewal").await?;
    let by_owner = Arc::new(group_by_owner(&leases));
    let k = opts.renew_batch;
    {
        let by_owner = by_owner.clone();
        b.closed(
            "renewal-batched",
            &format!("ours: fenced batch of {k} (fp_lease_renew_many)"),
            true,
            c,
            opts.size,
            d,
            None,
            move |cl, seq, pool| {
                let (owner, mine) = &by_owner[cl % by_owner.len()];
                let batch =
                    (0..k).map(|j| mine[workloads::pick(cl, seq * 7919 + j as u64, mine.len())]).collect::<Vec<_>>();
                let batch = dedup(batch);
                workloads::renew_many_ours(pool, owner.clone(), batch)
            },
        )
        .await?;
    }
    b.closed(
        "renewal-batched",
        &format!("raw: UPDATE … WHERE run_id = ANY(batch of {k})"),
        false,
        c,
        opts.size,
        d,
        None,
        move |cl, seq, pool| {
            let (_, mine) = &by_owner[cl % by_owner.len()];
            let batch =
                (0..k).map(|j| mine[workloads::pick(cl, seq * 7919 + j as u64, mine.len())]).collect::<Vec<_>>();
            workloads::renew_many_raw(pool, dedup(batch).into_iter().map(|(r, _)| r).collect())
        },
    )
    .await?;
    Ok(leases)
}

/// 3. Fillfactor: the same per-lease renewal with room for HOT updates on every page.
pub(crate) async fn fillfactor(
    b: &mut Bench,
    leases: &Arc<Vec<HeldLease>>,
    opts: &BenchOptions,
) -> Result<(), HarnessError> {
    workloads::vacuum(&b.admin, "ALTER TABLE worker_leases SET (fillfactor = 70)").await?;
    workloads::vacuum(&b.admin, "VACUUM (FULL, ANALYZE) worker_leases").await?;
    let leases = leases.clone();
    b.closed(
        "fillfactor",
        "ours per lease, worker_leases fillfactor 70",
        true,
        opts.clients,
        opts.size,
        opts.duration,
        None,
        move |cl, seq, pool| workloads::renew_ours(pool, leases[workloads::pick(cl, seq, leases.len())].clone()),
    )
    .await?;
    workloads::vacuum(&b.admin, "ALTER TABLE worker_leases RESET (fillfactor)").await?;
    workloads::vacuum(&b.admin, "VACUUM (FULL, ANALYZE) worker_leases").await?;
    Ok(())
}

/// 4. Protected commit: ours through the functions, ours with direct statements, the spec's
///    five round trips, and a raw single-row UPDATE of the same run; the runs, for the later phases.
pub(crate) async fn commit(b: &mut Bench, opts: &BenchOptions) -> Result<CommitRuns, HarnessError> {
    let (d, c) = (opts.duration, opts.clients);
    let runs = workloads::commit_runs(&b.admin, c.max(*opts.load_clients.iter().max().unwrap_or(&c))).await?;
    commit_ours_phase(b, &runs, c, d, "commit", "ours: protected transition (fp_run_transition)", true).await?;
    write_path::choose(WritePath::Direct);
    commit_ours_phase(b, &runs, c, d, "commit", "ours: protected transition, direct statements", false).await?;
    write_path::choose(WritePath::Api);
    commit_spec_phase(b, &runs, c, d).await?;
    let ids: Arc<Vec<Uuid>> = Arc::new(runs.iter().map(|(l, _)| l.run_id).collect());
    b.closed("commit", "raw: UPDATE agent_runs by primary key", false, c, 0, d, None, move |cl, seq, pool| {
        workloads::commit_raw(pool, ids[cl], seq)
    })
    .await?;
    Ok(runs)
}

/// 5. Claim: ours and a bare SKIP LOCKED claim, each from a fresh backlog of the same size, in
///    [`ROUNDS`] alternating rounds (the order swapped every round); the goal compares medians.
pub(crate) async fn claim(b: &mut Bench, opts: &BenchOptions) -> Result<(), HarnessError> {
    let kc = opts.claim_batch;
    let order = |r: usize| if r.is_multiple_of(2) { [false, true] } else { [true, false] };
    for bare in (0..ROUNDS).flat_map(order) {
        workloads::prepared_backlog(&b.admin, opts.size).await?;
        let name = if bare {
            format!("raw: bare FOR UPDATE SKIP LOCKED, {kc} per claim")
        } else {
            format!("ours: protected claim (fp_claim), {kc} per claim")
        };
        let (dispatchers, size, d) = (opts.dispatchers, opts.size, opts.duration);
        b.closed("claim", &name, !bare, dispatchers, size, d, Some(size / 2), move |cl, _, pool| {
            let owner = format!("bench-d{cl}");
            async move {
                if bare {
                    workloads::claim_bare(pool, owner, kc).await
                } else {
                    workloads::claim_ours(pool, owner, kc).await
                }
            }
        })
        .await?;
    }
    Ok(())
}

/// 5b. Driver-neutral capacity: the same fp_* calls, their raw rows and the physical reference,
///     driven by pgbench (see `neutral`); the sizing answer is computed from these.
pub(crate) async fn driver_neutral(b: &mut Bench, runs: &CommitRuns, opts: &BenchOptions) -> Result<(), HarnessError> {
    let commit_ids: Vec<Uuid> = runs.iter().map(|(l, _)| l.run_id).collect();
    neutral::prepare_ids(&b.admin, &commit_ids).await?;
    let mut scripts = neutral::renewal(opts.size, opts.workers, opts.renew_batch);
    scripts.extend(neutral::commit());
    b.pgbench_alternating(scripts, opts.clients, opts.duration).await?;
    for s in neutral::claim(opts.claim_batch, opts.size, opts.dispatchers) {
        workloads::prepared_backlog(&b.admin, opts.size).await?;
        let load = pgbench::Load::Transactions(s.transactions_per_client.unwrap_or(1));
        b.pgbench_phase(s, opts.dispatchers, load).await?;
    }
    Ok(())
}

/// 6. Load curves: throughput and latency against the number of clients.
pub(crate) async fn load_curves(
    b: &mut Bench,
    leases: &Arc<Vec<HeldLease>>,
    runs: &CommitRuns,
    opts: &BenchOptions,
) -> Result<(), HarnessError> {
    let half = opts.duration / 2;
    for &n in &opts.load_clients {
        renewal_pair(b, leases, n, opts.size, half, "load-renewal").await?;
        commit_ours_phase(b, runs, n, half, "load-commit", "ours: protected transition (fp_run_transition)", true)
            .await?;
    }
    Ok(())
}

/// 7. Growth: renewal over more active leases, claim over a larger backlog, with our schema
///    and with only the spec's index; how long each size took to prepare.
pub(crate) async fn growth(b: &mut Bench, opts: &BenchOptions) -> Result<Vec<GrowthSetup>, HarnessError> {
    let (half, c, kc) = (opts.duration / 2, opts.clients, opts.claim_batch);
    let mut growth_setup = Vec::new();
    for &size in &opts.growth {
        let t = Instant::now();
        let all = Arc::new(workloads::leases_up_to(&b.admin, size, opts.workers).await?);
        let leases_s = t.elapsed().as_secs_f64();
        let mut backlog_s = 0.0;
        let sized: Arc<Vec<HeldLease>> = Arc::new(all[..(size as usize).min(all.len())].to_vec());
        b.closed("growth-renewal", "ours per lease", true, c, size, half, None, move |cl, seq, pool| {
            workloads::renew_ours(pool, sized[workloads::pick(cl, seq, sized.len())].clone())
        })
        .await?;
        for spec_only in [false, true] {
            if spec_only {
                sqlx::query("DROP INDEX tool_operations_prepared_idx").execute(&b.admin).await?;
            }
            let t = Instant::now();
            workloads::prepared_backlog(&b.admin, size).await?;
            backlog_s += t.elapsed().as_secs_f64();
            let group = if spec_only { "growth-claim-spec-index" } else { "growth-claim" };
            let name = if spec_only { "ours, only the spec's index" } else { "ours, default schema" };
            b.closed(group, name, true, opts.dispatchers, size, half, Some(size / 2), move |cl, _, pool| {
                workloads::claim_ours(pool, format!("bench-d{cl}"), kc)
            })
            .await?;
            if spec_only {
                sqlx::query(
                    "CREATE INDEX tool_operations_prepared_idx ON tool_operations (updated_at) WHERE status = 'prepared'",
                )
                .execute(&b.admin)
                .await?;
            }
        }
        growth_setup.push(GrowthSetup { size, leases_s, backlog_s });
    }
    Ok(growth_setup)
}

/// 8. Sustained renewal: M workers renew all their leases every heartbeat, in one statement
///    each: the contract's N/H, and 30,000 leases every second.
pub(crate) async fn sustained(b: &mut Bench, opts: &BenchOptions) -> Result<(), HarnessError> {
    for (n, every, label) in sustained_phases(opts) {
        sustain(b, n, every, label, opts).await?;
    }
    Ok(())
}

/// The sustained phases: (leases, heartbeat, label).
pub fn sustained_phases(opts: &BenchOptions) -> [(u64, Duration, &'static str); 2] {
    [(opts.active_runs, opts.heartbeat, "sustain-contract"), (30_000, Duration::from_secs(1), "sustain-30k")]
}

/// The statements per second a sustained phase offers: `n` leases, lease g held by owner
/// g % `workers` (as [`workloads::leases_up_to`] makes them), each owner's renewed in batches of
/// at most SUSTAIN_BATCH, one statement per batch per heartbeat `every`.
pub fn sustained_offered(n: u64, workers: usize, every: Duration) -> f64 {
    let w = workers.max(1) as u64;
    let batches: u64 = (0..w)
        .map(|k| {
            // How many of the leases 1..=n are k modulo w.
            let mine = match k {
                0 => n / w,
                k if k > n => 0,
                k => (n - k) / w + 1,
            };
            mine.div_ceil(SUSTAIN_BATCH as u64)
        })
        .sum();
    batches as f64 / every.as_secs_f64()
}

/// The line refusing a run whose sustained phase would offer more than `--max-rate`, before any
/// load: what the ceiling would refuse after minutes of measuring is refused up front.
pub fn over_ceiling(opts: &BenchOptions) -> Option<String> {
    let r = opts.max_rate?;
    if opts.driver_only {
        return None;
    }
    sustained_phases(opts).into_iter().find_map(|(n, every, label)| {
        let offered = sustained_offered(n, opts.workers, every);
        (offered > r).then(|| {
            format!(
                "{label} would offer {offered:.0} statements/s ({n} leases, {} workers, batches of <= {SUSTAIN_BATCH}, \
                 every {} ms), above the ceiling of {r:.0} (--max-rate); raise --max-rate, or lower --runs or \
                 --workers",
                opts.workers,
                every.as_millis()
            )
        })
    })
}

/// One sustained phase: `n` leases renewed every `every` in staggered fenced batches (an open
/// loop), after one unmeasured heartbeat.
async fn sustain(b: &mut Bench, n: u64, every: Duration, label: &str, opts: &BenchOptions) -> Result<(), HarnessError> {
    let all = workloads::leases_up_to(&b.admin, n, opts.workers).await?;
    let held: Vec<HeldLease> = all.into_iter().take(n as usize).collect();
    let groups = group_by_owner(&held);
    // A worker holding many leases staggers them over its heartbeat in batches of at most
    // SUSTAIN_BATCH, each fenced by owner + epoch; every batch is one beat of the open loop.
    let beats: Arc<Vec<OwnedBatch>> = Arc::new(
        groups
            .iter()
            .flat_map(|(owner, mine)| mine.chunks(SUSTAIN_BATCH).map(|c| (owner.clone(), c.to_vec())))
            .collect(),
    );
    let offered = beats.len() as f64 / every.as_secs_f64();
    if let Some(r) = driver::rate_ceiling().filter(|&r| offered > r) {
        return Err(HarnessError::Other(format!(
            "{label} would offer {offered:.0} statements/s, above the ceiling of {r:.0} (--max-rate)"
        )));
    }
    let name = format!(
        "{n} leases, {} workers, batches of <= {SUSTAIN_BATCH} staggered over a {} ms heartbeat",
        groups.len(),
        every.as_millis()
    );
    b.progress.step(&format!("{label}: {name}"));
    let pool = b.load_pool(&b.worker_url.clone(), groups.len()).await?;
    // One unmeasured heartbeat first: each connection compiles the function and plans it once.
    let g = beats.clone();
    driver::open_loop(&pool, beats.len(), every, every, move |w, pool| {
        let (owner, batch) = g[w].clone();
        workloads::renew_many_ours(pool, owner, batch)
    })
    .await;
    b.checkpoint().await?;
    let before = dbstats::snapshot(&b.admin).await?;
    let sampler = dbstats::LockSampler::start(b.admin.clone(), Duration::from_millis(10));
    let g = beats.clone();
    let sample = driver::open_loop(&pool, beats.len(), every, opts.duration.max(every * 2), move |w, pool| {
        let (owner, batch) = g[w].clone();
        workloads::renew_many_ours(pool, owner, batch)
    })
    .await;
    b.finish(label, &name, groups.len(), n, Some(pool), before, Some(sampler), sample, 0.0).await?;
    Ok(())
}

/// Per-lease renewal, ours and raw, with `clients` clients over `d`.
async fn renewal_pair(
    b: &mut Bench,
    leases: &Arc<Vec<HeldLease>>,
    clients: usize,
    size: u64,
    d: Duration,
    group: &str,
) -> Result<(), HarnessError> {
    let l = leases.clone();
    b.closed(group, "ours per lease (fp_lease_renew)", true, clients, size, d, None, move |cl, seq, pool| {
        workloads::renew_ours(pool, l[workloads::pick(cl, seq, l.len())].clone())
    })
    .await?;
    let l = leases.clone();
    b.closed(group, "raw: UPDATE worker_leases by primary key", false, clients, size, d, None, move |cl, seq, pool| {
        workloads::renew_raw(pool, l[workloads::pick(cl, seq, l.len())].clone())
    })
    .await?;
    Ok(())
}

/// Per-client revision counters for the commit phases (each client owns one run).
fn revisions(runs: &[(Lease, i64)]) -> Arc<Vec<AtomicI64>> {
    Arc::new(runs.iter().map(|(_, r)| AtomicI64::new(*r)).collect())
}

/// Each run's revision now (an earlier phase moved them on).
async fn current_revisions(admin: &PgPool, runs: &[(Lease, i64)]) -> Result<Vec<(Lease, i64)>, HarnessError> {
    let mut out = Vec::new();
    for (l, _) in runs {
        let rev: i64 = sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1")
            .bind(l.run_id)
            .fetch_one(admin)
            .await?;
        out.push((l.clone(), rev));
    }
    Ok(out)
}

/// Our protected transition, one run per client, each client carrying its run's revision.
async fn commit_ours_phase(
    b: &mut Bench,
    runs: &[(Lease, i64)],
    clients: usize,
    d: Duration,
    group: &str,
    name: &str,
    as_worker: bool,
) -> Result<(), HarnessError> {
    let runs = current_revisions(&b.admin, runs).await?;
    let revs = revisions(&runs);
    let leases: Arc<Vec<Lease>> = Arc::new(runs.into_iter().map(|(l, _)| l).collect());
    b.closed(group, name, as_worker, clients, 0, d, None, move |cl, seq, pool| {
        let (revs, lease) = (revs.clone(), leases[cl].clone());
        async move {
            let (rev, done) = workloads::commit_ours(pool, lease, revs[cl].load(Ordering::Relaxed), seq).await?;
            revs[cl].store(rev, Ordering::Relaxed);
            Ok(done)
        }
    })
    .await?;
    Ok(())
}

/// The spec's five-round-trip transaction, one run per client.
async fn commit_spec_phase(
    b: &mut Bench,
    runs: &[(Lease, i64)],
    clients: usize,
    d: Duration,
) -> Result<(), HarnessError> {
    let runs = current_revisions(&b.admin, runs).await?;
    let revs = revisions(&runs);
    let leases: Arc<Vec<Lease>> = Arc::new(runs.into_iter().map(|(l, _)| l).collect());
    // The spec's transaction takes a row lock, which the worker role may only do inside fp_*: it
    // runs with table privileges, as the spec's example does.
    b.closed(
        "commit",
        "spec §06: BEGIN, lock, validate, CAS, COMMIT (5 round trips)",
        false,
        clients,
        0,
        d,
        None,
        move |cl, seq, pool| {
            let (revs, lease) = (revs.clone(), leases[cl].clone());
            async move {
                let (rev, done) = workloads::commit_spec(pool, lease, revs[cl].load(Ordering::Relaxed), seq).await?;
                revs[cl].store(rev, Ordering::Relaxed);
                Ok(done)
            }
        },
    )
    .await?;
    Ok(())
}

/// An owner and leases it holds (run_id, epoch).
type OwnedBatch = (String, Vec<(Uuid, i64)>);

/// The held leases grouped by owner (one group per worker), with their epochs.
fn group_by_owner(leases: &[HeldLease]) -> Vec<OwnedBatch> {
    let mut m: BTreeMap<String, Vec<(Uuid, i64)>> = BTreeMap::new();
    for l in leases {
        m.entry(l.owner.clone()).or_default().push((l.run_id, l.epoch));
    }
    m.into_iter().collect()
}

/// Sorted, without repeats.
fn dedup(mut v: Vec<(Uuid, i64)>) -> Vec<(Uuid, i64)> {
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sustained_phase_offers_one_statement_per_batch_of_each_owner_per_heartbeat() {
        // 30,000 leases over 4 owners: 7,500 each, 15 batches each, every second.
        assert_eq!(sustained_offered(30_000, 4, Duration::from_secs(1)), 60.0);
        // 1,001 leases over 2 owners: 501 (owner 1) and 500 (owner 0), so 2 + 1 batches.
        assert_eq!(sustained_offered(1_001, 2, Duration::from_secs(1)), 3.0);
        // Fewer leases than owners: the owners without one send nothing.
        assert_eq!(sustained_offered(3, 8, Duration::from_millis(500)), 6.0);
    }
}
