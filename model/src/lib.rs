//! An executable model of the lease + fencing + outbox protocol, explored by the `stateright` model
//! checker. Its state is what the protocol talks about (the run, lease and ledger rows, the
//! database clock, each process's condition and beliefs, the tools' resources, a standby and a
//! backup); its actions are the contract's commands at the grain of committed transactions plus
//! the faults; its properties are the catalogue's rules (`always`) and the schedules' situations
//! (`sometimes`). PostgreSQL's behaviour the protocol relies on — a statement waits on a locked
//! row and then re-evaluates its condition on the committed row, a 40001 aborts the transaction
//! whole — is modelled explicitly, so an [`config::Ablation`] removing it shows what breaks.

pub mod action;
pub mod check;
pub mod config;
pub mod coverage;
pub mod enabled;
pub mod outside;
pub mod properties;
pub mod state;
pub mod step;
pub mod symmetry;
pub mod trace;
pub mod weak_spots;

use stateright::{Model, Property};

use action::Action;
use config::{Config, Replication};
use state::{Budget, Cond, Ghost, Proc, Rows, State, PROCS};

/// The protocol as a `stateright` model, for one configuration.
#[derive(Clone, Debug)]
pub struct ProtocolModel {
    pub cfg: Config,
}

impl ProtocolModel {
    pub fn new(cfg: Config) -> ProtocolModel {
        ProtocolModel { cfg }
    }

    /// The one initial state: the creating transaction committed, the workers started.
    pub fn initial(&self) -> State {
        let c = &self.cfg;
        let mut procs = [Proc::new(Cond::Absent); PROCS];
        for p in procs.iter_mut().take(c.workers.min(2) as usize) {
            p.cond = Cond::Running;
        }
        let rows = Rows::created();
        State {
            primary: rows,
            standby: (c.replication != Replication::Off).then_some(rows),
            backup: (c.restores > 0).then_some(rows),
            restored: false,
            lock: None,
            procs,
            resources: [0; state::OPS],
            budget: Budget {
                kills: c.kills,
                jumps: c.jumps,
                promotes: c.promotes,
                restores: c.restores,
                aborts: c.aborts,
                lost_acks: c.lost_acks,
                restarts: c.restarts,
            },
            ghost: Ghost::default(),
        }
    }
}

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        enabled::enabled(&self.cfg, s, out);
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        step::next(&self.cfg, s, a)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p: Vec<Property<Self>> =
            properties::INVARIANTS.iter().map(|i| Property::always(i.rule, i.holds)).collect();
        p.extend(properties::SITUATIONS.iter().map(|s| Property::sometimes(s.name, s.reached)));
        p
    }
}
