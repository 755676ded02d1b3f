//! Mutation as routine (after cargo-mutants): the named broken variants of the worker run through
//! the matrix ([`named`]), the generated mutants of the fenced fp_* functions and the direct path
//! ([`sqlmut`] makes them, [`sql`] runs them, through the rows that [`reach`] their statements, [`equivalents`] lists the reviewed ones no correct
//! check can observe), and the randomized operation schedules that hunt either ([`schedules`]).

pub mod equivalents;
pub mod kill_order;
pub mod named;
pub mod reach;
pub mod schedules;
pub mod shard;
pub mod sql;
pub mod sqlmut;
