//! The subcommands that came after `verify`, one file each; `main.rs` only parses and dispatches.

pub mod audit;
pub mod conformance;
pub mod input;
pub mod merge;
pub mod mutants_sql;
pub mod rules;
pub mod schedules;
pub mod writers;
