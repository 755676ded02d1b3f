//! `fenceproof model`: the protocol's executable model. `model check` explores a bound
//! exhaustively and says whether every invariant held and which situations were reached;
//! `model weak-spots` runs each documented weak spot and shows the counterexample it yields.

use std::time::Duration;

use crate::cmd::model_report::{finish, print_outcome, steps, Bound, Print, Report};
use fenceproof_harness::report::exit;
use fenceproof_model::check;
use fenceproof_model::config::{Ablation, Config, Replication};
use fenceproof_model::weak_spots::WEAK_SPOTS;

/// Explore the protocol's model: every interleaving of a bounded configuration (docs/model.md).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    out: crate::cmd::output::Output,
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Explore a bound exhaustively. Exit 0: every invariant held in every state; 1: one broke
    /// (its counterexample is printed); 3: the exploration did not finish within --timeout-s.
    Check(CheckArgs),
    /// Run each documented weak spot. Exit 0: each broke the rule it names; 1: one did not.
    WeakSpots(Common),
    /// Join the folders of `model check --shard K/N --out DIR` runs into one result (the bounds
    /// in order, their states summed). Exit 0: every invariant held; 1: one broke; 3: a bound
    /// was not exhausted.
    Merge(crate::cmd::model_merge::Args),
}

#[derive(clap::Args, Debug)]
struct Common {
    /// Checker threads (default: this machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Give up after this many seconds (no verdict, exit 3).
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    common: Common,
    /// The standby's replication: sync (default), async or off.
    #[arg(long, value_parser = ["sync", "async", "off"], default_value = "sync")]
    replication: String,
    /// A restarted worker keeps its predecessor's owner id.
    #[arg(long)]
    owner_reuse: bool,
    /// Which bound: `database` (a promotion, a clock jump, a restore), `processes` (a kill, a
    /// lost reply, a 40001), or `all` (both, one after the other).
    #[arg(long, value_parser = ["all", "database", "processes"], default_value = "all")]
    bound: String,
    /// Also count the bound's reachable abstract transitions (state class × action: the
    /// denominator a run's coverage will be reported against; docs/model.md), a second walk.
    #[arg(long)]
    transitions: bool,
    /// Remove one thing the protocol relies on (repeatable): no-row-lock, no-recheck, ...
    #[arg(long, value_parser = parse_ablation)]
    without: Vec<Ablation>,
    /// Explore only the K-th of N deterministic shares of the bounds (bound i when i % N ==
    /// K - 1, in the order database, processes), e.g. 2/2; `model merge` joins the shards' --out
    /// folders.
    #[arg(long, requires = "out")]
    shard: Option<String>,
    /// Also write the result (the --json document) to model-check.json in this folder.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn parse_ablation(s: &str) -> Result<Ablation, String> {
    WEAK_SPOTS
        .iter()
        .filter_map(|w| (w.config)().ablations.first().copied().map(|a| (w.name, a)))
        .find(|(name, _)| *name == s)
        .map(|(_, a)| a)
        .ok_or_else(|| format!("no such ablation (one of: {})", ablation_names().join(", ")))
}

fn ablation_names() -> Vec<&'static str> {
    WEAK_SPOTS.iter().filter(|w| !(w.config)().ablations.is_empty()).map(|w| w.name).collect()
}

pub fn run(a: Args) -> u8 {
    let p = Print { json: a.out.json, quiet: a.out.quiet };
    match a.what {
        What::Check(c) => run_check(c, p),
        What::WeakSpots(c) => run_weak_spots(c, p),
        What::Merge(m) => crate::cmd::model_merge::run(m, p.json, p.quiet),
    }
}

fn threads(c: &Common) -> usize {
    c.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2))
}

/// The bounds `--bound` names (of `--shard`'s share), each with the flags' changes.
fn bounds(c: &CheckArgs, (k, n): (usize, usize)) -> Vec<(&'static str, Config)> {
    let all = [("database", Config::default_bound()), ("processes", Config::process_faults())];
    all.into_iter()
        .filter(|(name, _)| c.bound == "all" || c.bound == *name)
        .enumerate()
        .filter(|(i, _)| fenceproof_mutants::shard::takes(k, n, *i))
        .map(|(_, (name, cfg))| (name, with_flags(c, cfg)))
        .collect()
}

/// The flags that shape the bounds, as one line: shards merge only when theirs are the same.
fn flags(c: &CheckArgs) -> String {
    let mut s = format!("--bound {} --replication {}", c.bound, c.replication);
    if c.owner_reuse {
        s.push_str(" --owner-reuse");
    }
    for w in &c.without {
        s.push_str(&format!(" --without {w:?}"));
    }
    s
}

fn cfg_for(c: &CheckArgs, name: &str) -> Config {
    bounds(c, (1, 1)).into_iter().find(|(n, _)| *n == name).map(|(_, cfg)| cfg).expect("a bound of --bound")
}

fn print_transitions(cfg: &Config) {
    let model = fenceproof_model::ProtocolModel::new(cfg.clone());
    match fenceproof_model::coverage::reachable(&model, 20_000_000) {
        Some(t) => {
            let kinds: std::collections::BTreeSet<&str> = t.rules.iter().map(|(_, k)| *k).collect();
            outln!(
                "reachable abstract transitions: {} by what the rules read, {} by both operations' statuses \
                 (state class × action, {} kinds of action)",
                t.rules.len(),
                t.fine.len(),
                kinds.len()
            );
        }
        None => outln!("reachable abstract transitions: not counted (more than 20,000,000 states)"),
    }
}

fn with_flags(c: &CheckArgs, mut cfg: Config) -> Config {
    cfg.replication = match c.replication.as_str() {
        "async" => Replication::Async,
        "off" => Replication::Off,
        _ => Replication::Sync,
    };
    cfg.owner_reuse = c.owner_reuse;
    cfg.ablations = c.without.clone();
    cfg
}

fn run_check(c: CheckArgs, p: Print) -> u8 {
    let shard = match c.shard.as_deref().map(fenceproof_mutants::sql::parse_shard) {
        None => (1, 1),
        Some(Ok(s)) => s,
        Some(Err(msg)) => return crate::fail::usage(msg),
    };
    if let Some(out) = &c.out {
        if let Err(msg) = std::fs::create_dir_all(out).map_err(|e| e.to_string()).and_then(|_| writable(out)) {
            return crate::fail::usage(format!("cannot write to {}: {msg}", out.display()));
        }
    }
    let mut bounds_done = Vec::new();
    for (name, cfg) in bounds(&c, shard) {
        let describes = cfg.describe();
        let outcome = check::run(cfg, threads(&c.common), Duration::from_secs(c.common.timeout_s));
        if !p.json {
            print_outcome(name, &describes, &outcome, p.quiet);
        }
        if c.transitions && !p.json {
            print_transitions(&cfg_for(&c, name));
        }
        bounds_done.push(Bound { bound: name.to_string(), describes, outcome });
    }
    let report = Report::of(bounds_done, vec![format!("{}/{}", shard.0, shard.1)], flags(&c));
    if let Some(out) = &c.out {
        let path = out.join("model-check.json");
        if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json")) {
            return crate::fail::harness_failed(format!("cannot write {}: {e}", path.display()));
        }
    }
    finish(&report, p, false)
}

/// Whether a file can be made in `dir`.
fn writable(dir: &std::path::Path) -> Result<(), String> {
    let probe = dir.join(".fenceproof-write-probe");
    std::fs::write(&probe, b"").and_then(|_| std::fs::remove_file(&probe)).map_err(|e| e.to_string())
}

fn run_weak_spots(c: Common, p: Print) -> u8 {
    let mut code = exit::OK;
    let mut rows = Vec::new();
    for w in WEAK_SPOTS {
        let o = check::break_rule((w.config)(), w.breaks, threads(&c), Duration::from_secs(c.timeout_s));
        let found = o.broken.iter().find(|(r, _)| r == w.breaks).map(|(_, p)| p.clone());
        if found.is_none() {
            code = exit::FAILED;
        }
        if p.json {
            rows.push(serde_json::json!({"name": w.name, "what": w.what, "breaks": w.breaks, "counterexample": found}));
            continue;
        }
        match &found {
            Some(_) if p.quiet => {}
            Some(path) => {
                outln!("{:<30} breaks {}\n{:<30} {}\n{:<30} {}", w.name, w.breaks, "", w.what, "", steps(path))
            }
            None => outln!("{:<30} NO COUNTEREXAMPLE for {} ({} states)", w.name, w.breaks, o.unique_states),
        }
    }
    if p.json {
        outln!("{}", serde_json::Value::Array(rows));
    } else {
        let missed = if code == exit::OK { "each broke its rule" } else { "one or more did NOT break its rule" };
        outln!("{} weak spots: {missed}", WEAK_SPOTS.len());
    }
    code
}

#[cfg(test)]
mod tests {
    use fenceproof_model::outside::OUTSIDE;
    use fenceproof_model::properties::INVARIANTS;
    use fenceproof_scenarios::catalogue::RULES;

    /// Every rule of the catalogue is an invariant of the model or outside it with a reason, and
    /// the model names no rule the catalogue lacks.
    #[test]
    fn every_catalogue_rule_is_an_invariant_or_outside_the_model() {
        let modelled: Vec<&str> = INVARIANTS.iter().map(|i| i.rule).chain(OUTSIDE.iter().map(|o| o.rule)).collect();
        let missing: Vec<&str> = RULES.iter().map(|r| r.id).filter(|id| !modelled.contains(id)).collect();
        assert!(missing.is_empty(), "catalogue rules the model neither judges nor excludes: {missing:?}");
        let unknown: Vec<&&str> = modelled.iter().filter(|m| !RULES.iter().any(|r| r.id == **m)).collect();
        assert!(unknown.is_empty(), "model rules not in the catalogue: {unknown:?}");
        let twice: Vec<&&str> =
            OUTSIDE.iter().map(|o| &o.rule).filter(|r| INVARIANTS.iter().any(|i| i.rule == **r)).collect();
        assert!(twice.is_empty(), "both an invariant and outside: {twice:?}");
    }
}
