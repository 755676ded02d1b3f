//! The deployment contract (spec section 10): what a team claims about its database deployment —
//! which database, how it replicates, whether acknowledged epochs must survive a failover, and its
//! lease parameters. fenceproof checks the deployment against the claim (experiment H).
//!
//! A contract is a TOML file; every field is documented in the README and in
//! `examples/*.toml`. Errors name the field.

use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A throwaway primary + standby started by the harness from the machine's binaries.
    Native,
    /// The team's own database: experiments A-G run in dedicated schemas of `url` (H needs a pair
    /// the harness can fence and promote, so it is not run there).
    External,
    /// PostgreSQL in Docker containers started by the harness (`image`); H's primary + standby
    /// are two containers on a private network.
    Container,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicationMode {
    Async,
    Sync,
}

impl ReplicationMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicationMode::Async => "async",
            ReplicationMode::Sync => "sync",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SynchronousCommit {
    Off,
    Local,
    RemoteWrite,
    On,
    RemoteApply,
}

impl SynchronousCommit {
    pub fn as_str(self) -> &'static str {
        match self {
            SynchronousCommit::Off => "off",
            SynchronousCommit::Local => "local",
            SynchronousCommit::RemoteWrite => "remote_write",
            SynchronousCommit::On => "on",
            SynchronousCommit::RemoteApply => "remote_apply",
        }
    }
    /// Whether a commit at this level waits for a synchronous standby.
    pub fn waits_for_standby(self) -> bool {
        matches!(self, SynchronousCommit::RemoteWrite | SynchronousCommit::On | SynchronousCommit::RemoteApply)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Database {
    #[serde(default = "native")]
    pub backend: BackendKind,
    /// The primary's URL (external deployments).
    pub url: Option<String>,
    /// The PostgreSQL image (container backend); default postgres:15.
    pub image: Option<String>,
    /// The team's own migrations (SQL files, in order, relative to the contract's folder), applied
    /// in the harness's own server instead of fenceproof's (`db::team_schema`); empty: fenceproof's.
    #[serde(default)]
    pub migrations: Vec<std::path::PathBuf>,
    /// The team's own fenced functions, by operation (`db::team_functions`): what P-api-team probes.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub functions: std::collections::BTreeMap<String, String>,
}

fn native() -> BackendKind {
    BackendKind::Native
}

impl Default for Database {
    fn default() -> Self {
        Database {
            backend: BackendKind::Native,
            url: None,
            image: None,
            migrations: Vec::new(),
            functions: Default::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replication {
    pub mode: ReplicationMode,
    #[serde(default = "sync_commit_on")]
    pub synchronous_commit: SynchronousCommit,
    /// The claim under test: no acknowledged epoch or ledger transition is lost by a failover.
    pub acknowledged_epochs_survive_failover: bool,
}

fn sync_commit_on() -> SynchronousCommit {
    SynchronousCommit::On
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseParams {
    #[serde(default = "d_ttl")]
    pub ttl_ms: i64,
    #[serde(default = "d_heartbeat")]
    pub heartbeat_ms: i64,
    #[serde(default = "d_timeout")]
    pub renewal_timeout_ms: i64,
}

fn d_ttl() -> i64 {
    30_000
}
fn d_heartbeat() -> i64 {
    5_000
}
fn d_timeout() -> i64 {
    2_000
}

impl Default for LeaseParams {
    fn default() -> Self {
        LeaseParams { ttl_ms: d_ttl(), heartbeat_ms: d_heartbeat(), renewal_timeout_ms: d_timeout() }
    }
}

/// How much work the deployment carries: with N active runs and heartbeat H, about N/H renewal
/// writes per second (spec section 12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadParams {
    #[serde(default = "d_active_runs")]
    pub active_runs: u64,
}

fn d_active_runs() -> u64 {
    30_000
}

impl Default for LoadParams {
    fn default() -> Self {
        LoadParams { active_runs: d_active_runs() }
    }
}

/// How experiment H drives an external deployment's failover: shell commands run with `sh -c`,
/// with FENCEPROOF_PRIMARY_URL and FENCEPROOF_STANDBY_URL (no passwords in them; those are in the
/// `0600` file named by PGPASSFILE) in their environment, each bounded by a timeout; a non-zero
/// exit fails the experiment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failover {
    /// URL of the standby that will be promoted (same database name as the primary's URL).
    pub standby_url: String,
    /// Make the standby stop receiving WAL from the primary (e.g. stop the primary's walsender).
    pub pause_replication_command: String,
    /// Fence the old primary so it can never accept a write again (e.g. kill its process tree).
    pub fence_command: String,
    /// Promote the standby.
    pub promote_command: String,
}

/// Who decides what is promoted, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Manager {
    /// The contract's shell hooks (external deployments), or the harness itself.
    #[default]
    Hooks,
    /// Patroni with etcd: the harness starts a cluster of its own and Patroni promotes.
    Patroni,
}

/// Patroni's settings that make its promise (its dynamic configuration), as the contract states
/// them. Defaults are Patroni's own, except `ttl`/`loop_wait`, kept short so a row stays short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatroniSettings {
    pub synchronous_mode: bool,
    pub synchronous_mode_strict: bool,
    pub synchronous_node_count: u32,
    /// Bytes a replica may lag behind the leader's last published position and still be promoted.
    pub maximum_lag_on_failover: u64,
    /// Seconds the leader key lives without renewal (Patroni's minimum is 20).
    pub ttl: u32,
    /// Seconds between two runs of Patroni's HA loop.
    pub loop_wait: u32,
}

impl PatroniSettings {
    /// Patroni's `retry_timeout` the harness uses (not a contract field): 5 s, within `ttl`.
    pub const RETRY_TIMEOUT: u32 = 5;

    /// The setting that decides whether acknowledged writes can be lost, as one line.
    pub fn mode_line(&self) -> String {
        format!(
            "Patroni synchronous_mode = {}, synchronous_mode_strict = {}, maximum_lag_on_failover = {}",
            self.synchronous_mode, self.synchronous_mode_strict, self.maximum_lag_on_failover
        )
    }
}

/// The contract's `[failover]` table as written: the hooks' fields, or `manager = "patroni"` and
/// Patroni's settings. [`Contract::hooks`] and [`Contract::patroni`] are its two readings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverTable {
    #[serde(default)]
    pub manager: Manager,
    pub standby_url: Option<String>,
    pub pause_replication_command: Option<String>,
    pub fence_command: Option<String>,
    pub promote_command: Option<String>,
    pub synchronous_mode: Option<bool>,
    pub synchronous_mode_strict: Option<bool>,
    pub synchronous_node_count: Option<u32>,
    pub maximum_lag_on_failover: Option<u64>,
    pub ttl: Option<u32>,
    pub loop_wait: Option<u32>,
    /// A team's own Patroni: its nodes' REST API addresses (`http://host:8008`). The harness then
    /// starts no cluster; with `backend = "external"` and the database URL for the data path, H's
    /// switchover row drives the team's cluster through this API (only with the run's explicit
    /// `--yes-fail-over-this-cluster`).
    pub rest: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    #[serde(default)]
    pub database: Database,
    /// The replication claim H judges. Optional: a contract that only brings the team's schema
    /// (or lease parameters) claims nothing about a failover, and H runs as it does without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<Replication>,
    #[serde(default)]
    pub lease: LeaseParams,
    /// The load the deployment must carry (used by `fenceproof bench` to size it).
    #[serde(default)]
    pub load: LoadParams,
    /// How H's failover happens: an external deployment's hooks, or Patroni.
    pub failover: Option<FailoverTable>,
}

/// A contract that cannot be used, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("contract {file}: {field}: {message}")]
pub struct ContractError {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl Contract {
    /// The default contract of the `H-async` row: async replication, loss allowed but reported.
    pub fn default_async() -> Contract {
        Contract {
            database: Database::default(),
            replication: Some(Replication {
                mode: ReplicationMode::Async,
                synchronous_commit: SynchronousCommit::On,
                acknowledged_epochs_survive_failover: false,
            }),
            lease: LeaseParams::default(),
            load: LoadParams::default(),
            failover: None,
        }
    }

    /// The default contract of the `H-sync` row: one synchronous standby, no acknowledged loss.
    pub fn default_sync() -> Contract {
        Contract {
            database: Database::default(),
            replication: Some(Replication {
                mode: ReplicationMode::Sync,
                synchronous_commit: SynchronousCommit::On,
                acknowledged_epochs_survive_failover: true,
            }),
            lease: LeaseParams::default(),
            load: LoadParams::default(),
            failover: None,
        }
    }

    /// Read, parse and validate a contract file.
    pub fn load(path: &Path) -> Result<Contract, ContractError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ContractError {
            file: file.clone(),
            field: "-".into(),
            message: e.to_string(),
        })?;
        let mut c = Contract::parse(&file, &text)?;
        // The team's migrations are named relative to the contract's own folder.
        let here = path.parent().unwrap_or(Path::new("."));
        for m in &mut c.database.migrations {
            if m.is_relative() {
                *m = here.join(&*m);
            }
        }
        Ok(c)
    }

    pub fn parse(file: &str, text: &str) -> Result<Contract, ContractError> {
        let c: Contract = toml::from_str(text).map_err(|e| {
            let message = e.message().to_string();
            let field = e.span().map(|sp| describe_span(text, sp)).unwrap_or_else(|| "-".into());
            ContractError { file: file.into(), field, message }
        })?;
        c.validate(file)?;
        Ok(c)
    }

    /// The replication mode the contract claims, when it makes a replication claim.
    pub fn replication_mode(&self) -> Option<ReplicationMode> {
        self.replication.as_ref().map(|r| r.mode)
    }

    /// The replication claim, when given, must be one a deployment can hold; a `[failover]` is
    /// judged against it, so it needs one.
    fn validate_replication(&self, file: &str) -> Result<(), ContractError> {
        let err = |field: &str, message: String| Err(ContractError { file: file.into(), field: field.into(), message });
        let Some(r) = &self.replication else {
            return match self.failover {
                Some(_) => err(
                    "replication",
                    "a [failover] is judged against the replication claim: give [replication] with mode and acknowledged_epochs_survive_failover".into(),
                ),
                None => Ok(()),
            };
        };
        if r.mode == ReplicationMode::Sync && !r.synchronous_commit.waits_for_standby() {
            return err(
                "replication.synchronous_commit",
                format!("'{}' does not wait for the standby, so a sync contract cannot hold (use on, remote_write or remote_apply)", r.synchronous_commit.as_str()),
            );
        }
        Ok(())
    }

    /// Contradictions a deployment can never satisfy.
    pub fn validate(&self, file: &str) -> Result<(), ContractError> {
        let err = |field: &str, message: String| Err(ContractError { file: file.into(), field: field.into(), message });
        self.validate_replication(file)?;
        let l = &self.lease;
        if l.ttl_ms <= 0 || l.ttl_ms > 600_000 {
            return err("lease.ttl_ms", format!("{} must be > 0 and <= 600000", l.ttl_ms));
        }
        if l.heartbeat_ms <= 0 || l.heartbeat_ms >= l.ttl_ms {
            return err(
                "lease.heartbeat_ms",
                format!("{} must be > 0 and below lease.ttl_ms ({})", l.heartbeat_ms, l.ttl_ms),
            );
        }
        if l.renewal_timeout_ms <= 0 || l.heartbeat_ms + l.renewal_timeout_ms >= l.ttl_ms {
            return err(
                "lease.renewal_timeout_ms",
                format!(
                    "{} must be > 0 and heartbeat_ms + renewal_timeout_ms ({}) must stay below ttl_ms ({})",
                    l.renewal_timeout_ms,
                    l.heartbeat_ms + l.renewal_timeout_ms,
                    l.ttl_ms
                ),
            );
        }
        match (&self.database.backend, &self.database.url) {
            (BackendKind::External, None) => {
                return err("database.url", "backend = \"external\" needs the database's url".into())
            }
            (BackendKind::Native | BackendKind::Container, Some(_)) => {
                return err("database.url", "only meaningful with backend = \"external\"".into())
            }
            _ => {}
        }
        if self.database.backend == BackendKind::External && !self.database.migrations.is_empty() {
            return err(
                "database.migrations",
                "only with the native or container backend (a team's database already has its schema)".into(),
            );
        }
        if let Err((op, why)) = crate::db::team_functions::parse_all(&self.database.functions) {
            return err(&format!("database.functions.{op}"), why);
        }
        match (&self.database.backend, &self.database.image) {
            (BackendKind::Native | BackendKind::External, Some(_)) => {
                return err("database.image", "only meaningful with backend = \"container\"".into())
            }
            (BackendKind::Container, Some(i)) if i.trim().is_empty() || i.contains(char::is_whitespace) => {
                return err("database.image", format!("'{i}' is not an image name (e.g. postgres:15)"))
            }
            _ => {}
        }
        match self.failover.as_ref().map(|f| f.manager) {
            Some(Manager::Hooks) => self.validate_hooks(file),
            Some(Manager::Patroni) => self.validate_patroni(file),
            None => Ok(()),
        }
    }

    /// The hooks of an external deployment's failover, when the contract has them.
    pub fn hooks(&self) -> Option<Failover> {
        let f = self.failover.as_ref().filter(|f| f.manager == Manager::Hooks)?;
        Some(Failover {
            standby_url: f.standby_url.clone()?,
            pause_replication_command: f.pause_replication_command.clone()?,
            fence_command: f.fence_command.clone()?,
            promote_command: f.promote_command.clone()?,
        })
    }

    /// Patroni's settings, when the contract's failover manager is Patroni (defaults filled in;
    /// `synchronous_mode` defaults to the replication mode).
    pub fn patroni(&self) -> Option<PatroniSettings> {
        let f = self.failover.as_ref().filter(|f| f.manager == Manager::Patroni)?;
        Some(PatroniSettings {
            synchronous_mode: f.synchronous_mode.unwrap_or(self.replication_mode() == Some(ReplicationMode::Sync)),
            synchronous_mode_strict: f.synchronous_mode_strict.unwrap_or(false),
            synchronous_node_count: f.synchronous_node_count.unwrap_or(1),
            maximum_lag_on_failover: f.maximum_lag_on_failover.unwrap_or(1_048_576),
            ttl: f.ttl.unwrap_or(20),
            loop_wait: f.loop_wait.unwrap_or(2),
        })
    }

    /// A team's own Patroni: the REST addresses of its nodes, when the contract gives them.
    pub fn patroni_rest(&self) -> Option<Vec<String>> {
        self.failover.as_ref().filter(|f| f.manager == Manager::Patroni)?.rest.clone()
    }

    fn validate_hooks(&self, file: &str) -> Result<(), ContractError> {
        let err = |field: &str, message: String| Err(ContractError { file: file.into(), field: field.into(), message });
        let f = self.failover.as_ref().expect("a failover table");
        if self.database.backend != BackendKind::External {
            return err(
                "failover",
                "the hooks are for external deployments; the native and container backends fence and promote their own pair (or set manager = \"patroni\")"
                    .into(),
            );
        }
        if let Some(field) = f.patroni_fields().first() {
            return err(&format!("failover.{field}"), "a Patroni setting; it needs manager = \"patroni\"".into());
        }
        for (field, v) in [
            ("failover.standby_url", &f.standby_url),
            ("failover.pause_replication_command", &f.pause_replication_command),
            ("failover.fence_command", &f.fence_command),
            ("failover.promote_command", &f.promote_command),
        ] {
            if v.as_deref().is_none_or(|v| v.trim().is_empty()) {
                return err(field, "must be given and not empty".into());
            }
        }
        Ok(())
    }

    fn validate_patroni(&self, file: &str) -> Result<(), ContractError> {
        let err = |field: &str, message: String| Err(ContractError { file: file.into(), field: field.into(), message });
        let f = self.failover.as_ref().expect("a failover table");
        match (&f.rest, self.database.backend) {
            (None, BackendKind::Native) => {}
            (None, _) => return err("failover.manager", "the harness starts its Patroni cluster with backend = \"native\"; for a team's own Patroni give its REST addresses (rest = [\"http://host:8008\", ...]) with backend = \"external\"".into()),
            (Some(_), b) if b != BackendKind::External => return err("failover.rest", "a team's own Patroni: it needs backend = \"external\" and the database's url (the harness starts no cluster then)".into()),
            (Some(rest), _) => {
                if let Some(bad) = rest.iter().find(|u| !is_http_addr(u)) {
                    return err("failover.rest", format!("'{bad}' is not an http://host:port address of a Patroni REST API"));
                }
                if rest.is_empty() {
                    return err("failover.rest", "must name at least one node's REST API".into());
                }
            }
        }
        if let Some(field) = f.hook_fields().first() {
            return err(
                &format!("failover.{field}"),
                "a hook; Patroni decides the failover itself (drop it, or drop manager = \"patroni\")".into(),
            );
        }
        let p = self.patroni().expect("manager = patroni");
        let mode = self.replication_mode().unwrap_or(ReplicationMode::Async);
        if p.synchronous_mode != (mode == ReplicationMode::Sync) {
            return err(
                "failover.synchronous_mode",
                format!("{} contradicts replication.mode = \"{}\"", p.synchronous_mode, mode.as_str()),
            );
        }
        if p.synchronous_mode_strict && !p.synchronous_mode {
            return err("failover.synchronous_mode_strict", "true needs synchronous_mode = true".into());
        }
        if p.synchronous_node_count != 1 && f.rest.is_none() {
            return err(
                "failover.synchronous_node_count",
                format!("{} (the harness's cluster has one replica: use 1)", p.synchronous_node_count),
            );
        }
        if p.ttl < 20 || p.ttl > 120 {
            return err("failover.ttl", format!("{} must be between 20 (Patroni's minimum) and 120 seconds", p.ttl));
        }
        if p.loop_wait < 1 || p.loop_wait + 2 * PatroniSettings::RETRY_TIMEOUT > p.ttl {
            return err(
                "failover.loop_wait",
                format!(
                    "{} must be >= 1 and loop_wait + 2 x retry_timeout ({}) must not exceed ttl ({})",
                    p.loop_wait,
                    p.loop_wait + 2 * PatroniSettings::RETRY_TIMEOUT,
                    p.ttl
                ),
            );
        }
        Ok(())
    }
}

/// Whether `u` is `http://host:port[/...]`.
fn is_http_addr(u: &str) -> bool {
    let Some(rest) = u.strip_prefix("http://") else { return false };
    let addr = rest.split('/').next().unwrap_or_default();
    addr.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
}

impl FailoverTable {
    /// The hook fields given.
    fn hook_fields(&self) -> Vec<&'static str> {
        [
            ("standby_url", self.standby_url.is_some()),
            ("pause_replication_command", self.pause_replication_command.is_some()),
            ("fence_command", self.fence_command.is_some()),
            ("promote_command", self.promote_command.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .collect()
    }

    /// The Patroni settings given.
    fn patroni_fields(&self) -> Vec<&'static str> {
        [
            ("synchronous_mode", self.synchronous_mode.is_some()),
            ("synchronous_mode_strict", self.synchronous_mode_strict.is_some()),
            ("synchronous_node_count", self.synchronous_node_count.is_some()),
            ("maximum_lag_on_failover", self.maximum_lag_on_failover.is_some()),
            ("ttl", self.ttl.is_some()),
            ("loop_wait", self.loop_wait.is_some()),
            ("rest", self.rest.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .collect()
    }
}

/// "line L, column C (`text`)" for a byte span of the TOML text.
fn describe_span(text: &str, span: std::ops::Range<usize>) -> String {
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count() + 1).unwrap_or(1);
    let snippet: String = text.get(span.clone()).unwrap_or("").chars().take(40).collect();
    format!("line {line}, column {col} (`{}`)", snippet.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC: &str = "[replication]\nmode = \"sync\"\nsynchronous_commit = \"remote_apply\"\nacknowledged_epochs_survive_failover = true\n\n[lease]\nttl_ms = 30000\nheartbeat_ms = 5000\nrenewal_timeout_ms = 2000\n";

    #[test]
    fn a_good_contract_parses() {
        let c = Contract::parse("t.toml", SYNC).unwrap();
        let r = c.replication.as_ref().expect("a replication claim");
        assert_eq!(r.mode, ReplicationMode::Sync);
        assert_eq!(r.synchronous_commit, SynchronousCommit::RemoteApply);
        assert_eq!(c.database.backend, BackendKind::Native);
    }

    #[test]
    fn a_schema_alone_is_a_contract_and_a_failover_needs_the_claim() {
        let schema = "[database]\nmigrations = [\"team-schema/0001.sql\"]\n";
        let c = Contract::parse("t.toml", schema).unwrap();
        assert_eq!((c.replication.as_ref(), c.replication_mode()), (None, None));
        assert_eq!(c.lease, LeaseParams::default());
        let patroni = "\n[failover]\nmanager = \"patroni\"\n";
        let e = Contract::parse("t.toml", &format!("{schema}{patroni}")).unwrap_err();
        assert_eq!(e.field, "replication", "{e}");
        assert!(e.message.contains("give [replication]"), "{e}");
        // With the claim, the same Patroni contract holds.
        let claimed = format!(
            "{schema}\n[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n{patroni}"
        );
        assert_eq!(Contract::parse("t.toml", &claimed).unwrap().replication_mode(), Some(ReplicationMode::Async));
    }

    #[test]
    fn errors_name_the_field() {
        let bad_mode = SYNC.replace("\"sync\"", "\"asyn\"");
        let e = Contract::parse("t.toml", &bad_mode).unwrap_err();
        assert!(e.field.contains("line 2"), "{e}");
        assert!(e.message.contains("asyn"), "{e}");
        let hooks = "\n[failover]\nstandby_url = \"postgres://s/db\"\npause_replication_command = \"true\"\nfence_command = \"true\"\npromote_command = \"true\"\n";
        assert_eq!(Contract::parse("t.toml", &format!("{SYNC}{hooks}")).unwrap_err().field, "failover");
        let ext_ok = format!("[database]\nbackend = \"external\"\nurl = \"postgres://p/db\"\n{SYNC}{hooks}");
        assert!(Contract::parse("t.toml", &ext_ok).unwrap().hooks().is_some());
        let empty = ext_ok.replace("fence_command = \"true\"", "fence_command = \" \"");
        assert_eq!(Contract::parse("t.toml", &empty).unwrap_err().field, "failover.fence_command");
        let ext = format!("[database]\nbackend = \"external\"\n{SYNC}");
        assert_eq!(Contract::parse("t.toml", &ext).unwrap_err().field, "database.url");
        let unknown = format!("{SYNC}\n[replication2]\nx = 1\n");
        assert!(Contract::parse("t.toml", &unknown).is_err());
        let local = SYNC.replace("remote_apply", "local");
        assert_eq!(Contract::parse("t.toml", &local).unwrap_err().field, "replication.synchronous_commit");
        let slow = SYNC.replace("heartbeat_ms = 5000", "heartbeat_ms = 29000");
        assert_eq!(Contract::parse("t.toml", &slow).unwrap_err().field, "lease.renewal_timeout_ms");
        let hb = SYNC.replace("heartbeat_ms = 5000", "heartbeat_ms = 40000");
        assert_eq!(Contract::parse("t.toml", &hb).unwrap_err().field, "lease.heartbeat_ms");
        let cont = format!("[database]\nbackend = \"container\"\nimage = \"fenceproof/postgres:15\"\n{SYNC}");
        let c = Contract::parse("t.toml", &cont).unwrap();
        assert_eq!(
            (c.database.backend, c.database.image.as_deref()),
            (BackendKind::Container, Some("fenceproof/postgres:15"))
        );
        assert_eq!(Contract::parse("t.toml", &format!("{cont}{hooks}")).unwrap_err().field, "failover");
        let spaced = cont.replace("fenceproof/postgres:15", "postgres 15");
        assert_eq!(Contract::parse("t.toml", &spaced).unwrap_err().field, "database.image");
        let native_image = cont.replace("\"container\"", "\"native\"");
        assert_eq!(Contract::parse("t.toml", &native_image).unwrap_err().field, "database.image");
        let cont_url = cont.replace("image = ", "url = \"postgres://p/db\"\nimage = ");
        assert_eq!(Contract::parse("t.toml", &cont_url).unwrap_err().field, "database.url");
        let missing = SYNC.replace("acknowledged_epochs_survive_failover = true\n", "");
        assert!(Contract::parse("t.toml", &missing)
            .unwrap_err()
            .message
            .contains("acknowledged_epochs_survive_failover"));
    }

    const PATRONI: &str = "[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n\n[failover]\nmanager = \"patroni\"\nmaximum_lag_on_failover = 2048\nttl = 30\n";

    #[test]
    fn a_patroni_failover_parses_with_defaults_and_bad_settings_name_the_field() {
        let c = Contract::parse("t.toml", PATRONI).unwrap();
        let p = c.patroni().expect("patroni settings");
        assert_eq!((p.synchronous_mode, p.maximum_lag_on_failover, p.ttl, p.loop_wait), (false, 2048, 30, 2));
        assert!(c.hooks().is_none());
        let field = |text: &str| Contract::parse("t.toml", text).unwrap_err().field;
        assert_eq!(field(&PATRONI.replace("ttl = 30", "ttl = 10")), "failover.ttl");
        assert_eq!(field(&format!("{PATRONI}loop_wait = 25\n")), "failover.loop_wait");
        assert_eq!(field(&format!("{PATRONI}synchronous_mode = true\n")), "failover.synchronous_mode");
        assert_eq!(field(&format!("{PATRONI}synchronous_mode_strict = true\n")), "failover.synchronous_mode_strict");
        assert_eq!(field(&format!("{PATRONI}synchronous_node_count = 2\n")), "failover.synchronous_node_count");
        assert_eq!(field(&format!("{PATRONI}fence_command = \"true\"\n")), "failover.fence_command");
        assert!(field(&PATRONI.replace("\"patroni\"", "\"pacemaker\"")).contains("line 6"));
        assert!(field(&format!("{PATRONI}ttl_s = 3\n")).contains("line"));
        let external = format!("[database]\nbackend = \"external\"\nurl = \"postgres://p/db\"\n{PATRONI}");
        assert_eq!(field(&external), "failover.manager");
        let sync = PATRONI.replace("\"async\"", "\"sync\"");
        let s = Contract::parse("t.toml", &sync).unwrap().patroni().unwrap();
        assert!(s.synchronous_mode && !s.synchronous_mode_strict);
        let hooks_with_ttl = "\n[failover]\nttl = 30\n";
        let ext = format!("[database]\nbackend = \"external\"\nurl = \"postgres://p/db\"\n{SYNC}{hooks_with_ttl}");
        assert_eq!(field(&ext), "failover.ttl");
    }

    #[test]
    fn a_teams_patroni_needs_external_and_http_addresses() {
        let field = |text: &str| Contract::parse("t.toml", text).unwrap_err().field;
        let ext = "[database]\nbackend = \"external\"\nurl = \"postgres://p/db\"\n";
        let rest = "rest = [\"http://db1:8008\", \"http://db2:8008\"]\n";
        let c = Contract::parse("t.toml", &format!("{ext}{PATRONI}{rest}")).unwrap();
        assert_eq!(c.patroni_rest().unwrap(), vec!["http://db1:8008", "http://db2:8008"]);
        assert!(c.patroni().is_some() && c.hooks().is_none());
        assert_eq!(field(&format!("{PATRONI}{rest}")), "failover.rest");
        assert_eq!(field(&format!("{ext}{PATRONI}rest = [\"db1:8008\"]\n")), "failover.rest");
        assert_eq!(field(&format!("{ext}{PATRONI}rest = []\n")), "failover.rest");
        assert_eq!(field(&format!("{ext}{SYNC}\n[failover]\n{rest}")), "failover.rest");
        assert!(Contract::parse("t.toml", PATRONI).unwrap().patroni_rest().is_none());
    }

    #[test]
    fn the_shipped_examples_are_valid() {
        for f in [
            "../examples/sync-no-loss.toml",
            "../examples/async-loss-allowed.toml",
            "../examples/async-claims-no-loss.toml",
            "../examples/container-sync-no-loss.toml",
            "../examples/patroni-async-claims-no-loss.toml",
            "../examples/patroni-sync-no-loss.toml",
            "../examples/patroni-team-cluster.toml",
        ] {
            let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
            Contract::load(&p).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// The team's migrations are read relative to the contract's folder, and only where the harness
    /// makes the database (a team's database already has its schema).
    #[test]
    fn the_teams_migrations_are_relative_to_the_contract() {
        let dir = std::env::temp_dir().join(format!("fp-contract-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("team.toml");
        std::fs::write(&path, format!("[database]\nmigrations = [\"schema/0001.sql\", \"/abs/0002.sql\"]\n{SYNC}"))
            .unwrap();
        let c = Contract::load(&path).unwrap();
        assert_eq!(c.database.migrations, vec![dir.join("schema/0001.sql"), std::path::PathBuf::from("/abs/0002.sql")]);
        let _ = std::fs::remove_dir_all(&dir);
        let ext =
            format!("[database]\nbackend = \"external\"\nurl = \"postgres://p/db\"\nmigrations = [\"a.sql\"]\n{SYNC}");
        assert_eq!(Contract::parse("t.toml", &ext).unwrap_err().field, "database.migrations");
    }
}
