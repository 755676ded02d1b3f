//! `bench plan`: everything a load host needs to drive a share of the contract's renewal load with
//! plain pgbench (no fenceproof there): the setup and teardown SQL (run once, with psql), and per
//! host a folder with the pgbench script, its variables, the owners and leases the host owns, its
//! offered rate, and `run.sh`. [`crate::merge`] joins the hosts' logs into one report.
//!
//! Lease g (0 ≤ g < N) is run `md5('plan-l-' || g)::uuid` of owner `plan-w<g mod W>` at epoch 1;
//! owner w belongs to host `w mod hosts`, so the hosts' leases never overlap; each pgbench client of
//! a host is one owner and renews random batches of its own leases through `fp_lease_renew_many`.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// What a plan is made from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanSpec {
    pub hosts: usize,
    /// pgbench clients per host: each one lease owner (a worker process' worth).
    pub clients: usize,
    /// The contract: N active runs renewed every heartbeat, within the renewal timeout.
    pub active_runs: u64,
    pub heartbeat_ms: u64,
    pub renewal_timeout_ms: u64,
    /// Leases per renewal statement.
    pub batch: u64,
    pub duration_s: u64,
    /// Ceiling on the statements per second one host offers.
    pub max_rate: Option<f64>,
    /// The schema the plan's tables live in.
    pub schema: String,
    /// Where the database is (no password), for the report.
    pub server: String,
}

/// One host's share, as its folder's `host.json` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostPlan {
    pub spec: PlanSpec,
    /// 0-based host index, and the owners (`plan-w<w>`) it renews for.
    pub host: usize,
    pub owners: Vec<u64>,
    /// Leases each owner holds, and the leases this host renews.
    pub per_owner: u64,
    pub leases: u64,
    /// Transactions per second this host offers (pgbench `-R`).
    pub rate_tx_per_s: f64,
}

impl PlanSpec {
    /// Owners over all hosts.
    pub fn owners(&self) -> u64 {
        (self.hosts * self.clients) as u64
    }

    /// Leases per owner (the contract's runs rounded down to a multiple of the owners).
    pub fn per_owner(&self) -> u64 {
        (self.active_runs / self.owners().max(1)).max(1)
    }

    /// The batch, at most an owner's leases.
    pub fn batch(&self) -> u64 {
        self.batch.clamp(1, self.per_owner())
    }

    /// Renewals per second the contract needs.
    pub fn need_per_s(&self) -> f64 {
        (self.per_owner() * self.owners()) as f64 * 1000.0 / self.heartbeat_ms.max(1) as f64
    }

    /// One host's offered transactions per second: its share of the need times [`PLAN_MARGIN`],
    /// under the ceiling.
    pub fn host_rate(&self) -> f64 {
        let share = self.need_per_s() * PLAN_MARGIN / self.batch() as f64 / self.hosts.max(1) as f64;
        self.max_rate.map_or(share, |m| share.min(m)).max(1.0)
    }
}

/// How much more than the need the hosts offer together. pgbench `-R` schedules its transactions at
/// random (a Poisson process), so a load offered at exactly the needed rate lands a little above or
/// below it by chance, and noise would decide the verdict; offered 10% above, a database that keeps
/// up renews at least the need, and the verdict (renewals per second against the full need) is
/// the database's.
pub const PLAN_MARGIN: f64 = 1.10;

/// The pgbench script every host runs (its variables come from `run.sh`).
pub const RENEW_SCRIPT: &str = "\\set w :client_id * :hosts + :host
\\set s random(0, :per_owner - :k)
\\set e :s + :k - 1
SELECT count(*) FROM fp_lease_renew_many('plan-w' || :w,
  ARRAY(SELECT md5('plan-l-' || (:w::int + :owners::int * j))::uuid FROM generate_series(:s::int, :e::int) j),
  array_fill(1::bigint, ARRAY[:k::int]), :ttl::bigint);
";

/// The round-trip probe every host runs before the load.
pub const PING_SCRIPT: &str = "SELECT 1;\n";

/// The setup SQL: the schema, the protocol's migrations, and the leases.
pub fn setup_sql(spec: &PlanSpec) -> String {
    let mut s = format!(
        "-- fenceproof bench plan: run once, before the hosts start: psql \"$PGURL\" -f setup.sql\n\
         \\set ON_ERROR_STOP on\nCREATE SCHEMA {schema};\nSET search_path = {schema};\n",
        schema = spec.schema
    );
    for (_, sql) in fenceproof_harness::db::databases::MIGRATIONS {
        s.push_str(sql);
        s.push('\n');
    }
    let n = spec.per_owner() * spec.owners();
    s.push_str(&format!(
        "BEGIN;
INSERT INTO agent_tasks (task_id) SELECT 'plan-l-' || g FROM generate_series(0, {last}) g;
INSERT INTO agent_runs (run_id, task_id, status)
     SELECT md5('plan-l-' || g)::uuid, 'plan-l-' || g, 'running' FROM generate_series(0, {last}) g;
INSERT INTO worker_leases (run_id, owner, epoch, expires_at)
     SELECT md5('plan-l-' || g)::uuid, 'plan-w' || (g % {owners}), 1, clock_timestamp() + interval '1 day'
       FROM generate_series(0, {last}) g;
UPDATE agent_tasks t SET active_run_id = md5(t.task_id)::uuid;
COMMIT;
VACUUM ANALYZE agent_tasks, agent_runs, worker_leases;
",
        last = n - 1,
        owners = spec.owners()
    ));
    s
}

/// The teardown SQL: the schema and everything in it.
pub fn teardown_sql(spec: &PlanSpec) -> String {
    format!(
        "-- fenceproof bench plan: run once, after every host finished: psql \"$PGURL\" -f teardown.sql\n\
         DROP SCHEMA IF EXISTS {} CASCADE;\n",
        spec.schema
    )
}

/// One host's share.
pub fn host_plan(spec: &PlanSpec, host: usize) -> HostPlan {
    let owners: Vec<u64> = (0..spec.clients as u64).map(|c| c * spec.hosts as u64 + host as u64).collect();
    HostPlan {
        spec: spec.clone(),
        host,
        per_owner: spec.per_owner(),
        leases: owners.len() as u64 * spec.per_owner(),
        owners,
        rate_tx_per_s: spec.host_rate(),
    }
}

/// `run.sh` of one host: the round-trip probe, then the load, each logged into the folder.
pub fn run_sh(h: &HostPlan) -> String {
    let s = &h.spec;
    format!(
        "#!/bin/sh
# fenceproof bench plan, load host {n} of {hosts}: batched fenced renewal (fp_lease_renew_many) of
# this host's {leases} leases ({clients} owners x {per_owner}), {k} per statement, offered at {rate:.2}
# statements/s for {d} s. Needs pgbench (PostgreSQL 15 or newer) and nothing else.
# PGURL: the database URL with no password in it; the password goes in PGPASSWORD or ~/.pgpass,
# never on a command line.
set -eu
cd \"$(dirname \"$0\")\"
: \"${{PGURL:?set PGURL to the database URL (no password in it)}}\"
export PGOPTIONS=\"-c search_path={schema}\"
mkdir -p log
pgbench -n -M prepared -c 1 -t 200 -f ping.sql \"$PGURL\" > ping.txt
pgbench -n -M prepared -c {clients} -j {threads} -T {d} -R {rate:.3} \\
  -D hosts={hosts} -D host={host} -D owners={owners} -D per_owner={per_owner} -D k={k} -D ttl={ttl} \\
  -l --log-prefix=log/renew -f renew.sql \"$PGURL\" > summary.txt
echo \"host {n}: done; send this folder back for: fenceproof bench merge\"
",
        n = h.host + 1,
        hosts = s.hosts,
        host = h.host,
        leases = h.leases,
        clients = s.clients,
        threads = s.clients.clamp(1, 4),
        per_owner = h.per_owner,
        owners = s.owners(),
        k = s.batch(),
        rate = h.rate_tx_per_s,
        d = s.duration_s.max(1),
        ttl = (s.heartbeat_ms * 3).max(s.renewal_timeout_ms),
        schema = s.schema,
    )
}

/// Write the plan into `dir`: README.md, plan.json, setup.sql, teardown.sql and `host-<n>/`.
pub fn write(spec: &PlanSpec, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("plan.json"), serde_json::to_string_pretty(spec).expect("json"))?;
    std::fs::write(dir.join("setup.sql"), setup_sql(spec))?;
    std::fs::write(dir.join("teardown.sql"), teardown_sql(spec))?;
    std::fs::write(dir.join("README.md"), readme(spec))?;
    for host in 0..spec.hosts {
        let h = host_plan(spec, host);
        let d = dir.join(format!("host-{}", host + 1));
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("host.json"), serde_json::to_string_pretty(&h).expect("json"))?;
        std::fs::write(d.join("renew.sql"), RENEW_SCRIPT)?;
        std::fs::write(d.join("ping.sql"), PING_SCRIPT)?;
        let run = d.join("run.sh");
        std::fs::write(&run, run_sh(&h))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The folder's README: the steps, in order.
fn readme(spec: &PlanSpec) -> String {
    format!(
        "# fenceproof load plan: {hosts} hosts, {n} leases renewed every {h} ms\n\n\
         The contract needs {need:.0} renewals/s. Each host renews its own owners' leases (no two hosts touch\n\
         the same lease) in batches of {k} through `fp_lease_renew_many`, offering {rate:.2} statements/s: \
         {margin:.2}× its share of the need, so pgbench's random schedule does not decide the verdict.\n\n\
         1. Once, from anywhere with psql: `psql \"$PGURL\" -f setup.sql` (schema `{schema}`, the protocol's\n   \
            migrations, the leases). The role needs CREATE on the database.\n\
         2. Copy `host-<n>/` to load host n; there: `PGURL=postgres://user@db:5432/appdb PGPASSWORD=... ./run.sh`\n   \
            (only pgbench is needed; the password never goes on a command line). Start the hosts together.\n\
         3. Bring every `host-<n>/` folder back (with its `log/`) and run\n   \
            `fenceproof bench merge host-1 host-2 ...`: one report, one sizing answer.\n\
         4. Once: `psql \"$PGURL\" -f teardown.sql`. If the role may create roles, migration 0002 also made the\n   \
            cluster-wide role `fenceproof_worker` when it did not exist; drop it if nothing else uses it.\n",
        hosts = spec.hosts,
        n = spec.per_owner() * spec.owners(),
        h = spec.heartbeat_ms,
        need = spec.need_per_s(),
        k = spec.batch(),
        rate = spec.host_rate(),
        margin = PLAN_MARGIN,
        schema = spec.schema,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PlanSpec {
        PlanSpec {
            hosts: 2,
            clients: 4,
            active_runs: 8000,
            heartbeat_ms: 400,
            renewal_timeout_ms: 2000,
            batch: 100,
            duration_s: 5,
            max_rate: None,
            schema: "fp_plan_x".into(),
            server: "db:5432/app".into(),
        }
    }

    #[test]
    fn hosts_own_disjoint_owners_and_share_the_rate() {
        let s = spec();
        let (a, b) = (host_plan(&s, 0), host_plan(&s, 1));
        assert_eq!(a.owners, vec![0, 2, 4, 6]);
        assert_eq!(b.owners, vec![1, 3, 5, 7]);
        assert_eq!(a.leases + b.leases, 8000);
        // 8000 leases every 400 ms: 20000 renewals/s, 200 statements/s of 100, 100 per host,
        // offered with the 10% margin.
        assert!((a.rate_tx_per_s - 110.0).abs() < 1e-9);
        let capped = PlanSpec { max_rate: Some(30.0), ..s };
        assert!((capped.host_rate() - 30.0).abs() < 1e-9);
        assert!(run_sh(&a).contains("-R 110.000") && run_sh(&a).contains("-D host=0"));
        assert!(!run_sh(&a).contains("PGPASSWORD="), "no password is written into the plan");
    }
}
