//! What trace validation reports: the steps it explained (with the class of rows each was taken
//! from, the coverage numerator) and the changes the model cannot explain.

use serde::Serialize;

use crate::coverage::Class;

/// One explained step: the model action's kind, the class of the rows it was taken from (the
/// coverage numerator) and the commit it explains.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub seq: i64,
    pub kind: &'static str,
    pub class: Class,
}

impl Step {
    /// The model transition this step exercises (a line of `transitions.txt`), if it is one: an
    /// observable action's own change. An intent's insert is part of its run's commit, and the
    /// prepared operations a cancel carries along are part of the run's cancel.
    pub fn transition(&self) -> Option<String> {
        let kind = crate::coverage::observable(self.kind)?;
        if kind == "cancel" && self.class.op.is_some() {
            return None;
        }
        Some(crate::coverage::key(&self.class, kind))
    }
}

/// A committed change the model cannot explain.
#[derive(Clone, Debug, Serialize)]
pub struct Unexplained {
    pub seq: i64,
    pub writer: String,
    /// What was committed.
    pub observed: String,
    /// Why no model action has this effect here, and what the model allows at this point.
    pub allowed: String,
    /// Each model action asked, and what the model answered (empty where no action writes the row
    /// so, or the judgement is not a step's: the tools' ledger, a row that changed unrecorded).
    pub tried: Vec<super::refine::Tried>,
    /// The rules of the catalogue the model names for it (an invariant broken, or the rule of the
    /// weak spot whose mechanism refused it); empty when it names none.
    pub rules: Vec<&'static str>,
}

/// The outcome of validating one history.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub transactions: usize,
    /// Changes explained by a model action of a worker, dispatcher or reconciler.
    pub explained: usize,
    /// Changes of the control plane or the harness (the environment's steps).
    pub environment: usize,
    /// Hidden restores or promotions the history needed (rows that lost committed changes).
    pub rollbacks: usize,
    pub steps: Vec<Step>,
    pub unexplained: Vec<Unexplained>,
    /// False when the server's clock moved back: time guards were not judged.
    pub time_judged: bool,
}

impl Report {
    /// The history is a behaviour of the model.
    pub fn holds(&self) -> bool {
        self.unexplained.is_empty()
    }
}
