//! Which experiments a command runs: `--only`, then what each command leaves out (the rows an
//! external database cannot run, the rows a mutant run does not judge). It reads what the
//! experiments declare (their needs and what they judge); it names none of them.

use fenceproof_harness::contract::Contract;
use fenceproof_protocol::write_path::WritePath;
use fenceproof_scenarios::experiment::{Judges, Need, TeamFailover};
use fenceproof_scenarios::Experiment;

/// The experiments named by `--only` (all without it), or the usage exit code after saying why.
/// A row that probes a team's own functions (P-api-team) comes only when named by its id, not with
/// its family (`--only P`): it needs a contract's `[database.functions]`, which `verify` checks.
/// An old spelling of a renamed id still selects its row, with one line on stderr naming the new id.
pub fn only(only: Option<&[String]>) -> Result<Vec<Experiment>, u8> {
    for old in only.unwrap_or_default() {
        if let Some(new) = fenceproof_scenarios::renamed(old) {
            eprintln!("fenceproof: {old} is now called {new}; --only {new} selects it");
        }
    }
    let mut found = fenceproof_scenarios::select(only).map_err(crate::fail::usage)?;
    let named = |id: &str| only.unwrap_or_default().iter().any(|o| o.eq_ignore_ascii_case(id));
    found.retain(|e| !e.needs(Need::TeamFunctions) || named(e.id));
    Ok(found)
}

/// `verify`'s rows: with a contract, only the rows whose standby runs in its replication mode
/// (rows without a standby stay); against a database URL, none of the rows whose needs only a
/// server of the harness's own meets (each skip said once on stderr, with the reason the
/// experiment's need gives).
pub fn for_verify(
    mut experiments: Vec<Experiment>,
    contract: Option<&Contract>,
    database_url: Option<&str>,
) -> Vec<Experiment> {
    if let Some(mode) = contract.and_then(Contract::replication_mode) {
        experiments.retain(|e| e.standby().is_none_or(|m| m == mode));
    }
    if database_url.is_none() {
        return experiments;
    }
    let team = TeamFailover::of(contract);
    // Each reason once, with the selected rows it skips.
    let mut skipped: Vec<(&str, Vec<&str>)> = Vec::new();
    experiments.retain(|e| match e.external_skip(team) {
        None => true,
        Some(why) => {
            match skipped.iter_mut().find(|(w, _)| *w == why) {
                Some((_, rows)) => rows.push(e.id),
                None => skipped.push((why, vec![e.id])),
            }
            false
        }
    });
    for (why, rows) in skipped {
        eprintln!("fenceproof: skipped against --database-url: {} ({why})", rows.join(", "));
    }
    let local: Vec<&str> = experiments
        .iter()
        .filter(|e| e.needs(fenceproof_scenarios::experiment::Need::ClockServer))
        .map(|e| e.id)
        .collect();
    if !local.is_empty() {
        eprintln!(
            "fenceproof: run on a local PostgreSQL of the harness's own, not in your database (their clock fault needs a server whose clock the harness sets): {}",
            local.join(", ")
        );
    }
    experiments
}

/// Whether the direct path skips row `e`: it probes the fenced `fp_*` functions or the worker role.
fn skipped_on_direct(e: &Experiment) -> bool {
    matches!(e.judges, Judges::Functions | Judges::Boundary) && !e.needs(Need::TeamFunctions)
}

/// [`for_write_path`] without its line on stderr (the docs count the rows it skips).
pub fn for_write_path_quiet(mut experiments: Vec<Experiment>, path: WritePath) -> Vec<Experiment> {
    if path == WritePath::Direct {
        experiments.retain(|e| !skipped_on_direct(e));
    }
    experiments
}

/// `verify`'s rows on a write path: on the direct path, none of the rows that judge the fp_*
/// functions or the worker role's boundary (the worker does not write through them), said once on
/// stderr with the rows it skips; on a team's schema (`team_schema`), that it has no fp_* functions
/// and how the team's own are probed instead. P-api-team, which probes the team's own, stays.
pub fn for_write_path(mut experiments: Vec<Experiment>, path: WritePath, team_schema: bool) -> Vec<Experiment> {
    if path == WritePath::Api {
        return experiments;
    }
    let skipped: Vec<&str> = experiments.iter().filter(|e| skipped_on_direct(e)).map(|e| e.id).collect();
    experiments = for_write_path_quiet(experiments, path);
    let why = if team_schema {
        "the team's schema has no fp_* functions and no fenceproof_worker role; P-api-team probes the team's own lease functions when the contract names them in [database.functions]"
    } else {
        "they probe the fenced fp_* functions and the fenceproof_worker role, which a worker on its own statements does not use"
    };
    if !skipped.is_empty() {
        eprintln!("fenceproof: skipped on the direct write path: {} ({why})", skipped.join(", "));
    }
    experiments
}

/// The row that probes the team's own functions (P-api-team): added to the default matrix when the
/// contract maps them (`[database.functions]`); named by `--only` without a mapping, bad input.
pub fn for_team_functions(
    mut experiments: Vec<Experiment>,
    contract: Option<&Contract>,
    only_given: bool,
) -> Result<Vec<Experiment>, String> {
    let mapped = contract.is_some_and(|c| !c.database.functions.is_empty());
    let wanted = experiments.iter().any(|e| e.needs(Need::TeamFunctions));
    if wanted && !mapped {
        return Err(
            "P-api-team probes the team's own functions: the contract must name them ([database.functions])".into()
        );
    }
    if mapped && !only_given && !wanted {
        experiments.extend(fenceproof_scenarios::all().into_iter().filter(|e| e.needs(Need::TeamFunctions)));
    }
    Ok(experiments)
}

/// The named mutants' rows without `--only`: the rows that judge the protocol as a worker keeps
/// it (a deployment row judges no worker; the role boundary and the fenced functions are outside
/// what a worker mutant changes).
pub fn for_named_mutants(mut experiments: Vec<Experiment>, only_given: bool) -> Vec<Experiment> {
    if !only_given {
        experiments.retain(|e| e.judges == Judges::Protocol);
    }
    experiments
}

/// The generated SQL mutants' rows: without `--only`, all but the deployment rows (the functions
/// are the protocol: every other row calls them), with the reference driver's probe of the fenced
/// functions along the model's paths (opt-in in `verify`); the probes of the fenced functions
/// first, short rows that kill most mutants.
pub fn for_sql_mutants(mut experiments: Vec<Experiment>, only_given: bool) -> Vec<Experiment> {
    if !only_given {
        experiments.retain(|e| e.judges != Judges::Deployment);
        experiments.extend(fenceproof_scenarios::all().into_iter().filter(|e| e.needs(Need::DatabaseProbe)));
    }
    experiments.sort_by_key(|e| e.judges != Judges::Functions);
    experiments
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenceproof_harness::contract::ReplicationMode;

    /// The replication modes of the standby rows `for_verify` keeps under `contract`.
    fn standbys(contract: &str) -> Vec<ReplicationMode> {
        let c = Contract::parse("t.toml", contract).unwrap();
        let kept = for_verify(fenceproof_scenarios::all(), Some(&c), None);
        let mut modes: Vec<ReplicationMode> = kept.iter().filter_map(|e| e.standby()).collect();
        modes.dedup();
        modes
    }

    #[test]
    fn a_contract_without_a_replication_claim_keeps_every_standby_row() {
        let all: Vec<ReplicationMode> = {
            let mut m: Vec<_> = fenceproof_scenarios::all().iter().filter_map(|e| e.standby()).collect();
            m.dedup();
            m
        };
        assert!(all.contains(&ReplicationMode::Async) && all.contains(&ReplicationMode::Sync), "{all:?}");
        assert_eq!(standbys("[database]\nmigrations = [\"s.sql\"]\n"), all);
        let sync = "[replication]\nmode = \"sync\"\nacknowledged_epochs_survive_failover = true\n";
        assert_eq!(standbys(sync), [ReplicationMode::Sync]);
    }
}
