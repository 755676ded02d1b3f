//! Child processes under the harness's control.
//!
//! Every child runs in its own process group (so a signal reaches it and whatever it spawned),
//! carries a parent-death signal (so it dies with the harness even on SIGKILL), and is entered in
//! the [`registry`] so a panic or Ctrl-C still kills it.

pub mod adapter;
pub mod cgroup;
pub mod event_schema;
pub mod flags;
pub mod freezer;
pub mod passfile;
pub mod redis;
pub mod registry;
pub mod signals;
pub mod spawn;
pub mod tools;
pub mod worker;
