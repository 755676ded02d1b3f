//! Running the checker over a configuration and summarising what it found: the states explored,
//! the time and rate, each invariant held or broken (with the shortest counterexample, as
//! actions), and each situation reached or not.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stateright::{Checker, HasDiscoveries, Model};

use crate::action::Action;
use crate::config::Config;
use crate::properties::{Invariant, INVARIANTS, SITUATIONS};
use crate::ProtocolModel;

/// What one exhaustive exploration found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    pub seconds: f64,
    pub complete: bool,
    /// Each invariant broken, with the actions of its counterexample.
    pub broken: Vec<(String, Vec<Action>)>,
    /// The invariants that held in every explored state.
    pub held: Vec<String>,
    /// The situations never reached.
    pub unreached: Vec<String>,
}

impl Outcome {
    /// States explored per second.
    pub fn rate(&self) -> f64 {
        self.unique_states as f64 / self.seconds.max(1e-6)
    }
}

/// Explores `cfg` breadth-first on `threads` threads, stopping at `timeout`.
pub fn run(cfg: Config, threads: usize, timeout: Duration) -> Outcome {
    explore(cfg, threads, timeout, None)
}

/// Explores `cfg` until the invariant `rule` has a counterexample (the shortest, breadth-first),
/// or the space is exhausted, or `timeout`.
pub fn break_rule(cfg: Config, rule: &'static str, threads: usize, timeout: Duration) -> Outcome {
    explore(cfg, threads, timeout, Some(rule))
}

/// The counterexample's actions up to the first state that breaks `inv` (the checker may report
/// a later state of the same behaviour: a broken invariant stays broken).
fn trim(model: &ProtocolModel, inv: &Invariant, actions: Vec<Action>) -> Vec<Action> {
    let mut s = model.initial();
    for (k, a) in actions.iter().enumerate() {
        match model.next_state(&s, *a) {
            Some(n) => s = n,
            None => return actions,
        }
        if !(inv.holds)(model, &s) {
            return actions[..=k].to_vec();
        }
    }
    actions
}

fn explore(cfg: Config, threads: usize, timeout: Duration, until: Option<&'static str>) -> Outcome {
    let start = Instant::now();
    let mut builder = ProtocolModel::new(cfg.clone()).checker().threads(threads).timeout(timeout);
    if let Some(rule) = until {
        builder = builder.finish_when(HasDiscoveries::AllOf([rule].into_iter().collect()));
    }
    let model = ProtocolModel::new(cfg);
    let checker = builder.spawn_bfs().join();
    let seconds = start.elapsed().as_secs_f64();
    let found = checker.discoveries();
    let mut broken = Vec::new();
    let mut held = Vec::new();
    for inv in INVARIANTS {
        match found.get(inv.rule) {
            Some(path) => broken.push((inv.rule.to_string(), trim(&model, inv, path.clone().into_actions()))),
            None => held.push(inv.rule.to_string()),
        }
    }
    let unreached = SITUATIONS.iter().filter(|s| !found.contains_key(s.name)).map(|s| s.name.to_string()).collect();
    Outcome {
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        seconds,
        complete: checker.is_done() && seconds < timeout.as_secs_f64(),
        broken,
        held,
        unreached,
    }
}
