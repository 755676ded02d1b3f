//! The processes a lane of paths drives, on the lane's database: one worker process of the binary
//! under test per model process (each also a dispatcher, as the model's processes are), a
//! reconciler, the control plane, and a spare worker that tries the takeovers the model refuses;
//! the lane's own fake tools (a tool fault armed for one lane's call is no other lane's). They are
//! started when a path first needs them and kept across the lane's paths (each path is a run of
//! its own); a model process a path kills is started afresh, with a new owner id, when a later
//! path needs it. Lanes run side by side, each on a database of its own: a dispatcher claims, and
//! a reconciler settles, any run's operations of its database.

use fenceproof_harness::procs::flags::Launch;
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use sqlx::PgPool;

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
    /// A second spare worker, the probe's rival in a race of two takeovers.
    Rival,
}

/// Every process of a lane.
const ALL: [Who; 6] = [Who::Slot(0), Who::Slot(1), Who::Reconciler, Who::ControlPlane, Who::Probe, Who::Rival];

/// Where a lane plays: its database (`None`: the row's own), an owner's URL and an observer there.
pub struct Place {
    pub name: String,
    pub database: Option<String>,
    /// The schema owner's URL of the lane's database (barriers are taken there).
    pub url: String,
    /// An observer's pool on it (the control login).
    pub pool: PgPool,
}

/// The lane's processes.
pub struct Lane {
    pub place: Place,
    tools: ToolsProc,
    slots: [Option<WorkerProc>; SLOTS],
    reconciler: Option<WorkerProc>,
    control: Option<WorkerProc>,
    probe: Option<WorkerProc>,
    rival: Option<WorkerProc>,
    /// Processes started so far (each gets a name of its own: a killed slot's successor too).
    started: usize,
    /// The owner ids the control plane ran under (the invariants' authorized control plane).
    pub control_owners: Vec<String>,
}

impl Lane {
    pub fn new(place: Place, tools: ToolsProc) -> Lane {
        Lane {
            place,
            tools,
            slots: [None, None],
            reconciler: None,
            control: None,
            probe: None,
            rival: None,
            started: 0,
            control_owners: Vec::new(),
        }
    }

    /// The fake tools' address (their faults are armed there).
    pub fn tools(&self) -> std::net::SocketAddr {
        self.tools.addr
    }

    /// The process `who`, started now when it is not running.
    pub async fn get(&mut self, ctx: &Ctx, who: Who) -> Result<&mut WorkerProc, HarnessError> {
        if self.slot(who).is_none() {
            self.started += 1;
            let name = format!("{}{}-{}", self.place.name, name(who), self.started);
            let w = match (who, &self.place.database) {
                (Who::ControlPlane, None) => ctx.spawn_control_plane().await?,
                (Who::ControlPlane, Some(db)) => ctx.spawn_control_plane_in(&name, db).await?,
                (_, None) => ctx.spawn_worker(&name, Launch::dispatcher(self.tools.addr)).await?,
                (_, Some(db)) => ctx.spawn_worker_in(&name, db, Launch::dispatcher(self.tools.addr)).await?,
            };
            let mut w = w;
            if who == Who::ControlPlane {
                self.control_owners.push(w.owner.clone());
            } else {
                w.wait_event("the worker's ready event", STEP, |e| e["event"] == "ready").await?;
            }
            *self.slot(who) = Some(w);
        }
        Ok(self.slot(who).as_mut().expect("started above"))
    }

    /// Start every process of the lane now (a process started in the middle of a path, a Python
    /// interpreter's start-up say, would let a short term lapse before its first command).
    pub async fn warm(&mut self, ctx: &Ctx) -> Result<(), HarnessError> {
        for who in ALL {
            self.get(ctx, who).await?;
        }
        Ok(())
    }

    /// SIGKILL `who` (a model process's kill); a later path starts a new one.
    pub async fn kill(&mut self, who: Who) -> Result<(), HarnessError> {
        if let Some(mut w) = self.slot(who).take() {
            w.kill().await?;
        }
        Ok(())
    }

    /// Ask every process to exit.
    pub async fn stop(&mut self) -> Result<(), HarnessError> {
        for who in ALL {
            if let Some(mut w) = self.slot(who).take() {
                w.shutdown(STEP).await?;
            }
        }
        Ok(())
    }

    fn slot(&mut self, who: Who) -> &mut Option<WorkerProc> {
        match who {
            Who::Slot(i) => &mut self.slots[i as usize % SLOTS],
            Who::Reconciler => &mut self.reconciler,
            Who::ControlPlane => &mut self.control,
            Who::Probe => &mut self.probe,
            Who::Rival => &mut self.rival,
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
        Who::Rival => "rival".into(),
    }
}
