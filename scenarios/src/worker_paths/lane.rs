//! The processes a path drives: one worker process of the binary under test per model process
//! (each also a dispatcher, as the model's processes are), a reconciler, the control plane, and a
//! spare worker that tries the takeovers the model refuses. They are started when a path first
//! needs them and kept across paths (each path is a run of its own); a model process the path
//! kills is started afresh, with a new owner id, when a later path needs it.

use std::net::SocketAddr;

use fenceproof_harness::procs::flags::Launch;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;

use crate::ctx::{Ctx, STEP};

/// The model processes a worker path may name (slot 2, the restart slot, is no worker's: a worker
/// path never restarts a process).
pub const SLOTS: usize = 2;

/// Which process of the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// Model process `i`.
    Slot(u8),
    Reconciler,
    ControlPlane,
    /// The spare worker that tries what the model refuses.
    Probe,
}

/// The lane's processes.
pub struct Lane {
    tools: SocketAddr,
    slots: [Option<WorkerProc>; SLOTS],
    reconciler: Option<WorkerProc>,
    control: Option<WorkerProc>,
    probe: Option<WorkerProc>,
    /// Processes started so far (each gets a name of its own: a killed slot's successor too).
    started: usize,
    /// The owner ids the control plane ran under (the invariants' authorized control plane).
    pub control_owners: Vec<String>,
}

impl Lane {
    pub fn new(tools: SocketAddr) -> Lane {
        Lane {
            tools,
            slots: [None, None],
            reconciler: None,
            control: None,
            probe: None,
            started: 0,
            control_owners: Vec::new(),
        }
    }

    /// The fake tools' address (their faults are armed there).
    pub fn tools(&self) -> SocketAddr {
        self.tools
    }

    /// The process `who`, started now when it is not running.
    pub async fn get(&mut self, ctx: &Ctx, who: Who) -> Result<&mut WorkerProc, HarnessError> {
        if self.place(who).is_none() {
            self.started += 1;
            let w = match who {
                Who::ControlPlane => {
                    let w = ctx.spawn_control_plane().await?;
                    self.control_owners.push(w.owner.clone());
                    w
                }
                _ => {
                    let name = format!("{}-{}", name(who), self.started);
                    let mut w = ctx.spawn_worker(&name, Launch::dispatcher(self.tools)).await?;
                    w.wait_event("the worker's ready event", STEP, |e| e["event"] == "ready").await?;
                    w
                }
            };
            *self.place(who) = Some(w);
        }
        Ok(self.place(who).as_mut().expect("started above"))
    }

    /// SIGKILL `who` (a model process's kill); a later path starts a new one.
    pub async fn kill(&mut self, who: Who) -> Result<(), HarnessError> {
        if let Some(mut w) = self.place(who).take() {
            w.kill().await?;
        }
        Ok(())
    }

    /// Ask every process to exit.
    pub async fn stop(&mut self) -> Result<(), HarnessError> {
        let all = [Who::Slot(0), Who::Slot(1), Who::Reconciler, Who::ControlPlane, Who::Probe];
        for who in all {
            if let Some(mut w) = self.place(who).take() {
                w.shutdown(STEP).await?;
            }
        }
        Ok(())
    }

    fn place(&mut self, who: Who) -> &mut Option<WorkerProc> {
        match who {
            Who::Slot(i) => &mut self.slots[i as usize % SLOTS],
            Who::Reconciler => &mut self.reconciler,
            Who::ControlPlane => &mut self.control,
            Who::Probe => &mut self.probe,
        }
    }
}

/// A process's name in the row's folder (events, stderr) and timeline.
fn name(who: Who) -> String {
    match who {
        Who::Slot(i) => format!("p{i}"),
        Who::Reconciler => "reconciler".into(),
        Who::ControlPlane => "cp".into(),
        Who::Probe => "probe".into(),
    }
}
