//! What an experiment is and what it declares, as Jepsen's databases declare optional
//! capabilities: its id and title, the spec section it tests, what it needs from the server and
//! the machine, what it judges (the protocol's rules, or a deployment), and which checks it must
//! run. The runner, the external-database mode, the mutant runs and the catalogue read these
//! declarations; nothing else names an experiment by its id.

use std::future::Future;
use std::pin::Pin;

use fenceproof_harness::contract::ReplicationMode;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::mutant::Mutant;

use crate::ctx::Ctx;

pub type ExperimentFuture<'a> = Pin<Box<dyn Future<Output = Result<(), HarnessError>> + 'a>>;

/// How an experiment runs: the story of its own file, on the context the runner made for it.
pub type RunFn = for<'a> fn(&'a mut Ctx) -> ExperimentFuture<'a>;

/// Something an experiment needs beyond a fresh database and worker processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A login in the fenceproof_worker role, which the harness creates only in its own clusters.
    WorkerLogin,
    /// A legacy login with direct table grants, created and dropped by the harness.
    LegacyLogin,
    /// The whole database server frozen (SIGSTOP of its processes, or `docker pause`).
    ServerFreeze,
    /// A server of its own to back up and restore.
    OwnServer,
    /// A standby in this replication mode, fenced and promoted by the harness (or the contract's
    /// `[failover]` hooks).
    Standby(ReplicationMode),
    /// A Patroni cluster with etcd of its own, in this replication mode (Patroni, not the
    /// harness, promotes). Opt-in: such a row runs only when `--only` names it.
    Patroni(ReplicationMode),
    /// A Patroni cluster to switch over through its REST API: the harness's own (etcd + two
    /// nodes, in the contract's Patroni mode, else asynchronous), or against `--database-url` a
    /// team's whose REST addresses the contract names (`failover.rest`). Opt-in.
    PatroniSwitchover,
    /// A local PostgreSQL under libfaketime, whose clock the harness sets.
    ClockServer,
    /// A local Redis server (the pre-filter rows).
    Redis,
    /// A contract mapping the protocol's operations to the team's own functions
    /// (`[database.functions]`). Opt-in: `verify` adds such a row when its contract has them.
    TeamFunctions,
    /// It measures the machine's timing (latencies its verdict depends on): it runs with no other
    /// row beside it, as a row that freezes the shared server does.
    QuietMachine,
    /// It plays the model's paths, some hundreds of short runs one after another: its story may
    /// take [`MODEL_PATHS_CEILING`] beyond the base ceiling.
    ModelPaths,
    /// It drives the database itself with fenceproof's own driver (SQL the worker never sends):
    /// what it exercises is not counted as the worker's coverage.
    DatabaseProbe,
}

/// What the model's paths may add to a row's ceiling (Model-paths plays them in under a minute on two
/// idle cores; in a loaded test pool its 336 paths, a short term lapsing early and the path played
/// again with longer ones, were seen to need more than four minutes).
pub const MODEL_PATHS_CEILING: std::time::Duration = std::time::Duration::from_secs(420);

/// The most server connections a row holds at once: its control pool (4), its database's making
/// (1), and its workers' sessions. The most seen with the reference worker was 11 (W-lease); 16
/// leaves room for three workers of a team's with pools of four. Measured:
/// docs/measurements.md, "Connections a row holds".
pub const ROW_CONNECTIONS: u32 = 16;

/// The most a row that plays the model's paths holds: beside a row's own, the driver keeps a
/// session (a pool of up to 2) for each model process's owner id across the paths, a barrier pool
/// (4) and observers on both databases. The most seen was 54; 64 leaves a fifth more.
pub const MODEL_PATHS_CONNECTIONS: u32 = 64;

/// The most the row that drives the worker through the model's paths holds: four lanes, each of
/// six worker processes (their pools), its tools, an observer pool of four and the barriers'
/// sessions. Seen: about 90 with the Go example (pools of up to 32, opened as needed); 128
/// leaves a third more.
pub const WORKER_PATHS_CONNECTIONS: u32 = 128;

/// How a contract lets the harness fail over a team's deployment (against `--database-url`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TeamFailover {
    /// Not at all.
    #[default]
    None,
    /// Through the contract's `[failover]` shell hooks.
    Hooks,
    /// Through the REST API of the team's Patroni (`manager = "patroni"` with `rest`).
    Patroni,
}

impl TeamFailover {
    /// What the contract (if any) allows.
    pub fn of(contract: Option<&fenceproof_harness::contract::Contract>) -> TeamFailover {
        match contract {
            Some(c) if c.hooks().is_some() => TeamFailover::Hooks,
            Some(c) if c.patroni_rest().is_some() => TeamFailover::Patroni,
            _ => TeamFailover::None,
        }
    }
}

impl Need {
    /// Why a row with this need does not run against `--database-url`, or `None` when it does.
    /// A standby runs there only with the contract's failover hooks, a switchover only with a
    /// team's Patroni (`team`).
    pub fn external_skip(self, team: TeamFailover) -> Option<&'static str> {
        let hooks = team == TeamFailover::Hooks;
        match self {
            Need::WorkerLogin => Some("needs a login in the fenceproof_worker role, which the harness creates only in its own clusters"),
            Need::LegacyLogin => Some("creates and drops a legacy login, which the harness does only in its own clusters (`fenceproof writers` inspects your database read-only)"),
            Need::ServerFreeze => Some("freezes the whole database server, which the harness does only to servers it starts"),
            Need::OwnServer => Some("backs up and restores a server of its own, which says nothing about your database"),
            Need::Standby(_) if !hooks => Some("needs a primary + standby it can fence and promote; against --database-url it runs only with a contract's [failover] hooks"),
            Need::Patroni(_) => Some("starts a Patroni cluster of its own (etcd + two nodes) to crash or partition its leader; against a team's Patroni only the switchover row runs"),
            Need::PatroniSwitchover if team != TeamFailover::Patroni => Some("switches over a Patroni cluster; against --database-url only with a contract naming the team's Patroni REST API (failover.rest) and --yes-fail-over-this-cluster"),
            Need::PatroniSwitchover => None,
            Need::Standby(_)
            | Need::ClockServer
            | Need::Redis
            | Need::QuietMachine
            | Need::TeamFunctions
            | Need::ModelPaths
            | Need::DatabaseProbe => None,
        }
    }
}

/// What an experiment's verdict is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judges {
    /// The protocol's rules as a worker keeps them (its masking of secrets included, P-secret):
    /// named worker mutants and SQL mutants run it.
    Protocol,
    /// The fenced functions themselves, probed directly: SQL mutants run it first (short rows that
    /// kill most of them); a worker mutant cannot change what it probes.
    Functions,
    /// The permission boundary of the worker role (P-role): SQL mutants run it; a worker mutant
    /// runs outside it by construction (it needs table privileges).
    Boundary,
    /// The deployment (failover, lease parameters against measured latency): no mutant changes it.
    Deployment,
}

/// The checks every run of an experiment must carry beside its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// The global invariants and state machines over the oracle rows (`check::invariants`).
    pub invariants: bool,
    /// The workers' answers against what committed, judged by the runner from the row's oracle.
    pub answers: bool,
    /// Every step the harness set up legally succeeded (the runner adds it).
    pub legal_step: bool,
}

impl Checks {
    /// A row on one database: invariants, answers, legal steps.
    pub const ALL: Checks = Checks { invariants: true, answers: true, legal_step: true };
    /// A row that judges another database than its own (a promoted standby, a frozen-clock
    /// server, a restore): it judges invariants there itself; the answers are not judged.
    pub const NO_ANSWERS: Checks = Checks { invariants: true, answers: false, legal_step: true };
    /// A measurement: its own checks and the answers of the workers it measured.
    pub const MEASUREMENT: Checks = Checks { invariants: false, answers: true, legal_step: false };
}

/// The ceiling on a row's whole run (database made, story told) when its needs add nothing.
pub const BASE_CEILING: std::time::Duration = std::time::Duration::from_secs(90);

/// One experiment of the matrix, as it declares itself.
#[derive(Debug, Clone, Copy)]
pub struct Experiment {
    /// The spec's letter, with a suffix for variants (`B-sigstop`).
    pub id: &'static str,
    pub title: &'static str,
    /// The spec sections it tests (`11 B; 05, 06`).
    pub section: &'static str,
    pub needs: &'static [Need],
    pub judges: Judges,
    pub checks: Checks,
    /// The operator-side mutants whose broken step this experiment performs as the operator.
    pub operator_of: &'static [Mutant],
    pub run: RunFn,
}

impl Experiment {
    /// Whether it needs `need`.
    pub fn needs(&self, need: Need) -> bool {
        self.needs.contains(&need)
    }

    /// The replication mode of the standby it needs, if any.
    pub fn standby(&self) -> Option<ReplicationMode> {
        self.needs.iter().find_map(|n| match n {
            Need::Standby(m) | Need::Patroni(m) => Some(*m),
            _ => None,
        })
    }

    /// Whether it runs only when named (`--only`), never in the default matrix: the Patroni rows,
    /// whose bootstrap and failover take Patroni's own time; P-api-team, which `verify` adds when
    /// its contract maps the team's functions; and the reference driver's probe of the database's
    /// fenced functions (Model-paths-db: the same paths as the worker's own, played without the
    /// worker; the SQL mutants' matrix adds it).
    pub fn opt_in(&self) -> bool {
        self.needs.iter().any(|n| {
            matches!(n, Need::Patroni(_) | Need::PatroniSwitchover | Need::TeamFunctions | Need::DatabaseProbe)
        })
    }

    /// Whether it must run with no other row beside it: it freezes the server the others use (a
    /// server of its own it may freeze), or measures timing that other rows' load would change.
    pub fn runs_alone(&self) -> bool {
        let freezes_shared = self.needs(Need::ServerFreeze) && !self.needs(Need::OwnServer);
        freezes_shared || self.needs(Need::QuietMachine)
    }

    /// The ceiling on its whole run, its database's making included: the matrix's base ceiling,
    /// plus, for a row that starts a Patroni cluster, that cluster's own bootstrap bound and a
    /// failover's bound (its waits have timeouts of their own; the ceiling only catches a hang, so
    /// it must hold everything those waits allow on a loaded machine).
    pub fn ceiling(&self) -> std::time::Duration {
        let patroni = self.needs.iter().any(|n| matches!(n, Need::Patroni(_) | Need::PatroniSwitchover));
        if patroni {
            BASE_CEILING
                + fenceproof_harness::db::patroni::BOOTSTRAP
                + fenceproof_harness::db::patroni::rest::SWITCHOVER
        } else if self.needs(Need::ModelPaths) {
            BASE_CEILING + MODEL_PATHS_CEILING
        } else {
            BASE_CEILING
        }
    }

    /// The most connections it holds at once on the session's server: its control pool, its
    /// workers', its tools' and its drivers' ([`ROW_CONNECTIONS`], or [`MODEL_PATHS_CONNECTIONS`]
    /// for a row that plays the model's paths). The matrix admits rows by it.
    pub fn connections(&self) -> u32 {
        if self.needs(Need::ModelPaths) && !self.needs(Need::DatabaseProbe) {
            WORKER_PATHS_CONNECTIONS
        } else if self.needs(Need::ModelPaths) {
            MODEL_PATHS_CONNECTIONS
        } else {
            ROW_CONNECTIONS
        }
    }

    /// Why it does not run against `--database-url`, or `None` when it does.
    pub fn external_skip(&self, team: TeamFailover) -> Option<&'static str> {
        self.needs.iter().find_map(|n| n.external_skip(team))
    }
}
