//! The subcommands, one file each, each with its `Args` (its flags) and its `run`; `main.rs`
//! only parses and dispatches.

pub mod audit;
pub mod bench;
pub mod conformance;
pub mod docs;
pub mod input;
pub mod list;
pub mod merge;
pub mod mutants;
pub mod mutants_sql;
pub mod rules;
pub mod schedules;
pub mod schedules_mutants;
pub mod verify;
pub mod verify_versions;
pub mod writers;
