//! `fenceproof docs`: the tables and counts the docs show that describe the code, generated from
//! the code, and the rewrite of the generated blocks of `README.md` and `docs/*.md`.
//!
//! A generated block sits between `<!-- generated:NAME -->` and `<!-- /generated -->`. A table
//! (a generator whose text ends with a newline) starts on the line after the opening marker and
//! the closing marker has a line of its own; a count or a list is inline, between the markers.
//! `fenceproof docs` rewrites every block in place; `--check` writes nothing and names each stale
//! block in one line (exit 1), which `cli/tests/generated_docs.rs` runs. Both also name every
//! spec section the code cites that docs/protocol.md has no heading for (exit 1; `sections`).

use std::path::{Path, PathBuf};

use fenceproof_harness::contract::ReplicationMode;
use fenceproof_harness::report::exit;
use fenceproof_scenarios::experiment::{Need, TeamFailover};

const OPEN: &str = "<!-- generated:";
const OPEN_END: &str = " -->";
const CLOSE: &str = "<!-- /generated -->";

/// One generated block: the name its markers carry and the function that writes it.
struct Block {
    name: &'static str,
    make: fn() -> String,
}

const BLOCKS: &[Block] = &[
    Block { name: "experiments", make: experiments_markdown },
    Block { name: "matrix", make: matrix_markdown },
    Block { name: "experiment-count", make: experiment_count },
    Block { name: "rules", make: rules_markdown },
    Block { name: "rule-count", make: rule_count },
    Block { name: "checker-count", make: checker_count },
    Block { name: "named-mutants", make: named_mutants_markdown },
    Block { name: "named-mutant-count", make: named_mutant_count },
    Block { name: "worker-mutant-count", make: worker_mutant_count },
    Block { name: "sql-mutants", make: sql_mutants_markdown },
    Block { name: "sql-mutant-count", make: sql_mutant_count },
    Block { name: "equivalent-count", make: equivalent_count },
    Block { name: "fp-functions", make: super::fp_functions::markdown },
    Block { name: "direct-tables", make: super::direct_path::tables_markdown },
    Block { name: "direct-statements", make: super::direct_path::statements_markdown },
    Block { name: "direct-skipped", make: super::direct_path::skipped_list },
    Block { name: "direct-skipped-count", make: super::direct_path::skipped_count },
    Block { name: "direct-row-count", make: super::direct_path::kept_count },
    Block { name: "worker-flags", make: fenceproof_harness::procs::flags::markdown },
    Block { name: "external-rows", make: external_rows },
    Block { name: "external-row-count", make: external_row_count },
    Block { name: "external-inside-count", make: || external_inside().len().to_string() },
    Block { name: "external-local-rows", make: || external_local().join(", ") },
    Block { name: "external-skipped", make: external_skipped_markdown },
    Block { name: "audit-libraries", make: audit_libraries_markdown },
    Block { name: "audit-experiments", make: audit_experiments_markdown },
    Block { name: "audit-production", make: audit_production_markdown },
    Block { name: "audit-results", make: audit_results_markdown },
    Block { name: "audit-notes", make: audit_notes_markdown },
    Block { name: "audit-results-production", make: audit_results_production_markdown },
    Block { name: "audit-notes-production", make: audit_notes_production_markdown },
    Block { name: "audit-dbos", make: || audit_library("dbos") },
    Block { name: "audit-absurd", make: || audit_library("absurd") },
    Block { name: "audit-sqlxmq", make: || audit_library("sqlxmq") },
    Block { name: "audit-underway", make: || audit_library("underway") },
    Block { name: "audit-apalis", make: || audit_library("apalis") },
    Block { name: "audit-graphile_worker", make: || audit_library("graphile_worker") },
    Block { name: "audit-saq", make: || audit_library("saq") },
    Block { name: "audit-django_q2", make: || audit_library("django_q2") },
    Block { name: "audit-pgmq", make: || audit_library("pgmq") },
    Block { name: "audit-fang", make: || audit_library("fang") },
    Block { name: "audit-procrastinate", make: || audit_library("procrastinate") },
    Block { name: "audit-pgqueuer", make: || audit_library("pgqueuer") },
    Block { name: "audit-chancy", make: || audit_library("chancy") },
    Block { name: "audit-django_tasks", make: || audit_library("django_tasks") },
    Block { name: "audit-settings-django_tasks", make: || audit_settings("django_tasks") },
    Block { name: "audit-dramatiq_pg", make: || audit_library("dramatiq_pg") },
    Block { name: "audit-settings-dramatiq_pg", make: || audit_settings("dramatiq_pg") },
    Block { name: "audit-huey", make: || audit_library("huey") },
    Block { name: "audit-settings-huey", make: || audit_settings("huey") },
    Block { name: "audit-rexecutor", make: || audit_library("rexecutor") },
    Block { name: "audit-settings-rexecutor", make: || audit_settings("rexecutor") },
    Block { name: "audit-background_jobs", make: || audit_library("background_jobs") },
    Block { name: "audit-settings-background_jobs", make: || audit_settings("background_jobs") },
    Block { name: "audit-backie", make: || audit_library("backie") },
    Block { name: "audit-settings-backie", make: || audit_settings("backie") },
    Block { name: "audit-hammerwork", make: || audit_library("hammerwork") },
    Block { name: "audit-settings-hammerwork", make: || audit_settings("hammerwork") },
    Block { name: "audit-saq_sweeper", make: || audit_library("saq_sweeper") },
    Block { name: "audit-settings-saq_sweeper", make: || audit_settings("saq_sweeper") },
    Block { name: "audit-settings-dbos", make: || audit_settings("dbos") },
    Block { name: "audit-settings-absurd", make: || audit_settings("absurd") },
    Block { name: "audit-settings-sqlxmq", make: || audit_settings("sqlxmq") },
    Block { name: "audit-settings-underway", make: || audit_settings("underway") },
    Block { name: "audit-settings-apalis", make: || audit_settings("apalis") },
    Block { name: "audit-settings-graphile_worker", make: || audit_settings("graphile_worker") },
    Block { name: "audit-settings-saq", make: || audit_settings("saq") },
    Block { name: "audit-settings-django_q2", make: || audit_settings("django_q2") },
    Block { name: "audit-settings-pgmq", make: || audit_settings("pgmq") },
    Block { name: "audit-settings-fang", make: || audit_settings("fang") },
    Block { name: "audit-settings-procrastinate", make: || audit_settings("procrastinate") },
    Block { name: "audit-settings-pgqueuer", make: || audit_settings("pgqueuer") },
    Block { name: "audit-settings-chancy", make: || audit_settings("chancy") },
    Block { name: "model-invariants", make: model_invariants_markdown },
    Block { name: "model-situations", make: model_situations_markdown },
    Block { name: "model-outside", make: model_outside_markdown },
    Block { name: "model-weak-spots", make: model_weak_spots_markdown },
    Block { name: "coverage-reasons", make: fenceproof_scenarios::unreached::markdown },
];

/// The model's invariants, each a rule of the catalogue with its statement.
pub fn model_invariants_markdown() -> String {
    let mut s = String::from("| rule | statement |\n|---|---|\n");
    for i in fenceproof_model::properties::INVARIANTS {
        let statement = fenceproof_scenarios::catalogue::RULES.iter().find(|r| r.id == i.rule).map(|r| r.statement);
        s.push_str(&format!("| `{}` | {} |\n", i.rule, cell(statement.unwrap_or("(not in the catalogue)"))));
    }
    s
}

/// The situations each bound must reach.
pub fn model_situations_markdown() -> String {
    fenceproof_model::properties::SITUATIONS.iter().map(|s| format!("- {}\n", s.name)).collect()
}

/// The catalogue's rules judged only outside the model, with why.
pub fn model_outside_markdown() -> String {
    let mut s = String::from("| rule | why outside the model |\n|---|---|\n");
    for o in fenceproof_model::outside::OUTSIDE {
        s.push_str(&format!("| `{}` | {} |\n", o.rule, cell(o.reason)));
    }
    s
}

/// The weak spots: what each removes, the rule it breaks, and how PostgreSQL confirms it.
pub fn model_weak_spots_markdown() -> String {
    let mut s =
        String::from("| weak spot | what is removed or changed | breaks | on PostgreSQL |\n|---|---|---|---|\n");
    for w in fenceproof_model::weak_spots::WEAK_SPOTS {
        s.push_str(&format!("| `{}` | {} | `{}` | {} |\n", w.name, cell(w.what), w.breaks, cell(w.on_postgres)));
    }
    s
}

/// One library's cells of the published results.
/// The settings paragraph of library `name`'s page.
fn audit_settings(name: &str) -> String {
    let lib = fenceproof_audit::libraries::LIBRARIES.iter().find(|l| l.name == name);
    lib.map(fenceproof_audit::page_settings::markdown).unwrap_or_default()
}

fn audit_library(name: &str) -> String {
    fenceproof_audit::report::summary_library_markdown(&audit_results(), name)
}

/// The published audit results: a run's `summary.json`, copied (so the matrix is the audit's own
/// output; a new run is published by copying its file and running `fenceproof docs`).
const AUDIT_RESULTS: &str = include_str!("../../../docs/audit/results.json");

fn audit_results() -> serde_json::Value {
    serde_json::from_str(AUDIT_RESULTS).unwrap_or(serde_json::Value::Null)
}

/// The audit's results matrix, one row per library.
pub fn audit_results_markdown() -> String {
    fenceproof_audit::report::summary_markdown(&audit_results())
}

/// Why each N/A (or ERROR) cell of the published results has no verdict.
pub fn audit_notes_markdown() -> String {
    fenceproof_audit::report::summary_notes(&audit_results())
}

/// The published production run's results: the `summary.json` of a `--settings production` run.
const AUDIT_RESULTS_PRODUCTION: &str = include_str!("../../../docs/audit/results-production.json");

fn audit_results_production() -> serde_json::Value {
    serde_json::from_str(AUDIT_RESULTS_PRODUCTION).unwrap_or(serde_json::Value::Null)
}

/// The production run's matrix, one row per library it ran, one column per experiment it ran.
pub fn audit_results_production_markdown() -> String {
    fenceproof_audit::report::summary_markdown(&audit_results_production())
}

/// Why each cell of the production run without a verdict has none.
pub fn audit_notes_production_markdown() -> String {
    match fenceproof_audit::report::summary_notes(&audit_results_production()) {
        notes if notes.is_empty() => "- none: every cell reached a verdict\n".into(),
        notes => notes,
    }
}

/// The text of the block called `name`, or `None` for a name no generator has.
pub fn generate(name: &str) -> Option<String> {
    BLOCKS.iter().find(|b| b.name == name).map(|b| (b.make)())
}

/// A Markdown table cell: pipes escaped, line breaks folded.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The experiment table, one line per row of the matrix, as `list --markdown` prints it.
pub fn experiments_markdown() -> String {
    let mut s =
        String::from("| id | experiment | spec § | needs | against `--database-url` |\n|---|---|---|---|---|\n");
    for e in fenceproof_scenarios::all() {
        let needs: Vec<&str> = e.needs.iter().map(|n| need_label(*n)).collect();
        let needs = if needs.is_empty() { "-".to_string() } else { needs.join(", ") };
        let external = match (
            e.external_skip(TeamFailover::None),
            e.external_skip(TeamFailover::Hooks),
            e.external_skip(TeamFailover::Patroni),
        ) {
            (None, _, _) => "runs",
            (Some(_), None, _) => "with `[failover]` hooks",
            (Some(_), _, None) => "with a team's Patroni (`failover.rest`)",
            (Some(_), Some(_), Some(_)) => "skipped",
        };
        s.push_str(&format!("| {} | {} | {} | {needs} | {external} |\n", e.id, cell(e.title), e.section));
    }
    s
}

/// A need as the experiment table names it.
fn need_label(n: Need) -> &'static str {
    match n {
        Need::WorkerLogin => "worker login",
        Need::LegacyLogin => "legacy login",
        Need::ServerFreeze => "server freeze",
        Need::OwnServer => "own server",
        Need::Standby(ReplicationMode::Async) => "async standby",
        Need::Standby(ReplicationMode::Sync) => "sync standby",
        Need::Patroni(ReplicationMode::Async) => "Patroni (async), opt-in",
        Need::Patroni(ReplicationMode::Sync) => "Patroni (sync), opt-in",
        Need::PatroniSwitchover => "Patroni switchover (own or a team's), opt-in",
        Need::ClockServer => "clock server",
        Need::Redis => "Redis",
        Need::QuietMachine => "runs alone (measures timing)",
        Need::ModelPaths => "plays the model's paths (a longer story)",
        Need::DatabaseProbe => {
            "drives the database with fenceproof's own driver (not counted as your worker's coverage)"
        }
        Need::TeamFunctions => "a contract's [database.functions], opt-in",
    }
}

/// The README's one-line-per-row summary of the default matrix (opt-in rows left out).
pub fn matrix_markdown() -> String {
    let mut s = String::from("| id | what the row tests |\n|---|---|\n");
    // The default matrix: the opt-in rows are in docs/experiments.md.
    for e in fenceproof_scenarios::all().into_iter().filter(|e| !e.opt_in()) {
        s.push_str(&format!("| {} | {} |\n", e.id, cell(e.title)));
    }
    s
}

fn experiment_count() -> String {
    fenceproof_scenarios::all().len().to_string()
}

/// The rule catalogue: per rule its section, statement, and how many checks judge it and rows
/// exercise it, as `rules --markdown` prints it.
pub fn rules_markdown() -> String {
    let mut s = String::from("| rule | § | statement | checks | rows |\n|---|---|---|---|---|\n");
    for r in catalogue::rules() {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            r.id,
            r.section,
            cell(r.statement),
            r.checkers.len(),
            catalogue::exercised_by(r)
        ));
    }
    s.push_str(&format!("\n{} rules, judged by {} distinct checks.\n", rule_count(), checker_count()));
    s
}

fn rule_count() -> String {
    catalogue::rules().len().to_string()
}

fn checker_count() -> String {
    let names: std::collections::BTreeSet<&str> =
        catalogue::rules().iter().flat_map(|r| r.checkers.iter().copied()).collect();
    names.len().to_string()
}

/// The named worker mutants, each with the rule it removes.
pub fn named_mutants_markdown() -> String {
    use fenceproof_protocol::mutant::Mutant;
    let mut s = String::from("| mutant | the rule it removes |\n|---|---|\n");
    for m in Mutant::ALL {
        let rule = match fenceproof_scenarios::operator_experiment(*m) {
            Some(row) => format!("{} (an operator step, run in {})", m.rule(), row.id),
            None => m.rule().to_string(),
        };
        s.push_str(&format!("| `{}` | {} |\n", m.name(), cell(&rule)));
    }
    s
}

fn named_mutant_count() -> String {
    fenceproof_protocol::mutant::Mutant::ALL.len().to_string()
}

/// The named mutants of worker code (all but the operator mutants), which the schedules search.
fn worker_mutant_count() -> String {
    let all = fenceproof_protocol::mutant::Mutant::ALL;
    all.iter().filter(|m| !m.is_operator()).count().to_string()
}

/// The generated SQL mutants per fenced function and per direct-path statement.
pub fn sql_mutants_markdown() -> String {
    let mut per: Vec<(String, usize)> = Vec::new();
    for m in fenceproof_mutants::sql::all_mutants() {
        match per.iter_mut().find(|(f, _)| *f == m.function) {
            Some((_, n)) => *n += 1,
            None => per.push((m.function.clone(), 1)),
        }
    }
    let mut s = String::from("| function or statement | mutants |\n|---|---|\n");
    for (f, n) in &per {
        s.push_str(&format!("| `{f}` | {n} |\n"));
    }
    let direct: usize = per.iter().filter(|(f, _)| fenceproof_mutants::sql::is_direct(f)).map(|(_, n)| n).sum();
    let total: usize = per.iter().map(|(_, n)| n).sum();
    s.push_str(&format!(
        "\n{total} mutants: {} of the `fp_*` functions, {direct} of the direct-path statements; {} reviewed as equivalent.\n",
        total - direct,
        equivalent_count()
    ));
    s
}

fn sql_mutant_count() -> String {
    fenceproof_mutants::sql::all_mutants().len().to_string()
}

fn equivalent_count() -> String {
    fenceproof_mutants::equivalents::load().map(|m| m.len()).unwrap_or(0).to_string()
}

/// The ids of the rows that run against `--database-url` without a contract's failover hooks.
fn external_ids() -> Vec<&'static str> {
    fenceproof_scenarios::all().iter().filter(|e| e.external_skip(TeamFailover::None).is_none()).map(|e| e.id).collect()
}

fn external_rows() -> String {
    external_ids().join(", ")
}

fn external_row_count() -> String {
    external_ids().len().to_string()
}

/// The rows that run against `--database-url` on a local server of the harness's own instead
/// (they set the database clock, under libfaketime): local PostgreSQL binaries or Docker.
pub fn external_local() -> Vec<&'static str> {
    let all = fenceproof_scenarios::all();
    external_ids().into_iter().filter(|id| all.iter().any(|e| e.id == *id && e.needs(Need::ClockServer))).collect()
}

/// The rows that run inside the database of `--database-url`.
pub fn external_inside() -> Vec<&'static str> {
    let local = external_local();
    external_ids().into_iter().filter(|id| !local.contains(id)).collect()
}

/// `verify --database-url`'s help, from the rows' declarations.
pub fn database_url_help() -> String {
    format!(
        "Run the rows inside dedicated schemas of this existing database instead of a throwaway cluster \
         ({} rows; {} run on a local server of the harness's own, whose clock they set; rows that need \
         a server of the harness's own are skipped with a note). The role needs CREATE on the \
         database; everything is dropped afterwards. Give the password in PGPASSWORD",
        external_inside().len(),
        external_local().join(", ")
    )
}

/// The rows an external database does not run (without a contract's hooks), each with the reason.
pub fn external_skipped_markdown() -> String {
    let mut s = String::from("| row | why it does not run against `--database-url` |\n|---|---|\n");
    for e in fenceproof_scenarios::all() {
        if let Some(why) = e.external_skip(TeamFailover::None) {
            s.push_str(&format!("| {} | {} |\n", e.id, cell(why)));
        }
    }
    s
}

/// The job queues `fenceproof audit` runs, with their pinned versions and how they are configured.
pub fn audit_libraries_markdown() -> String {
    let mut s = String::from(
        "| library | version | stall recovery as configured | completion guarded by | the takeover writes |\n|---|---|---|---|---|\n",
    );
    for l in fenceproof_audit::libraries::LIBRARIES {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            l.name,
            cell(l.version),
            cell(l.recovery),
            cell(l.completion_guard),
            cell(l.takeover_touches)
        ));
    }
    s
}

/// Each library's documented production defaults (what `--settings production` runs), with where
/// each comes from, the numbers, and what a production run keeps from the fast settings.
pub fn audit_production_markdown() -> String {
    let mut s = String::from(
        "| library | production defaults (pinned source) | threshold, heartbeat, sweep (s) | a production run differs by |\n|---|---|---|---|\n",
    );
    for l in fenceproof_audit::libraries::LIBRARIES {
        let t = l.production.timing;
        let heartbeat = if t.heartbeat_s > 0.0 { t.heartbeat_s.to_string() } else { "none".into() };
        s.push_str(&format!(
            "| {} | {} | {}, {heartbeat}, {} | {} |\n",
            l.name,
            cell(l.production.defaults),
            t.stall_s,
            t.sweep_s,
            if l.production.deviation.is_empty() { "-".into() } else { cell(l.production.deviation) }
        ));
    }
    s
}

/// The audit's fixed experiments, each run against every library.
pub fn audit_experiments_markdown() -> String {
    let mut s = String::from("| experiment | what happens |\n|---|---|\n");
    for e in fenceproof_audit::experiments::EXPERIMENTS {
        s.push_str(&format!("| `{}` | {} |\n", e.id, cell(e.title)));
    }
    s
}

/// The rule catalogue, wherever it lives.
mod catalogue {
    pub use fenceproof_harness::check::rule::Rule;

    pub fn rules() -> &'static [&'static Rule] {
        fenceproof_scenarios::catalogue::RULES
    }

    /// How many rows exercise rule `r`.
    pub fn exercised_by(r: &Rule) -> usize {
        fenceproof_scenarios::catalogue::exercised_by(r).len()
    }
}

/// One block whose text differs from what the code generates.
#[derive(Debug, PartialEq, Eq)]
pub struct Stale {
    /// The 1-based line of the opening marker.
    pub line: usize,
    pub name: String,
    /// The first line of the block (1-based, counted from the marker's) that differs.
    pub first_difference: usize,
}

/// `text` with every generated block rewritten, and the blocks that were stale; an error for an
/// unknown block name or a marker left open.
pub fn rewrite(text: &str) -> Result<(String, Vec<Stale>), String> {
    rewrite_with(text, generate)
}

fn rewrite_with(text: &str, make: impl Fn(&str) -> Option<String>) -> Result<(String, Vec<Stale>), String> {
    let (mut out, mut stale, mut rest) = (String::new(), Vec::new(), text);
    while let Some(at) = find_marker(rest, OPEN) {
        let line = text[..text.len() - rest.len() + at].matches('\n').count() + 1;
        let after = &rest[at + OPEN.len()..];
        let name_end = after.find(OPEN_END).ok_or(format!("line {line}: a generated marker without ` -->`"))?;
        let name = &after[..name_end];
        let body_start = at + OPEN.len() + name_end + OPEN_END.len();
        let close =
            find_marker(&rest[body_start..], CLOSE).ok_or(format!("line {line}: generated:{name} is never closed"))?;
        let old = &rest[body_start..body_start + close];
        let fresh = make(name).ok_or(format!("line {line}: no generator is called `{name}`"))?;
        let new = if fresh.ends_with('\n') { format!("\n{fresh}") } else { fresh };
        if old != new {
            let first_difference = old.lines().zip(new.lines()).take_while(|(a, b)| a == b).count() + 1;
            stale.push(Stale { line, name: name.to_string(), first_difference });
        }
        out.push_str(&rest[..body_start]);
        out.push_str(&new);
        rest = &rest[body_start + close..];
    }
    out.push_str(rest);
    Ok((out, stale))
}

/// The first `marker` in `text` that is not quoted as code (preceded by a backtick), so a page can
/// name the markers without opening a block.
fn find_marker(text: &str, marker: &str) -> Option<usize> {
    text.match_indices(marker).map(|(i, _)| i).find(|&i| !text[..i].ends_with('`'))
}

/// The Markdown files that may hold generated blocks: `README.md`, `docs/*.md` and
/// `docs/audit/*.md` under `root`.
fn files(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v = vec![root.join("README.md")];
    for dir in [root.join("docs"), root.join("docs").join("audit")] {
        if !dir.is_dir() {
            continue;
        }
        let mut docs: Vec<PathBuf> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        v.extend(docs);
    }
    Ok(v)
}

/// One stale block as `--json` lists it.
#[derive(serde::Serialize)]
struct StaleIn {
    file: String,
    line: usize,
    name: String,
    first_difference: usize,
}

/// Rewrite the generated blocks under `a.root` (with `--check`, only list the stale ones), and
/// list every spec section the code cites that docs/protocol.md has no heading for (which no
/// rewrite can mend). Exit 0 when nothing was stale (or everything was rewritten) and every
/// section is defined, 1 when `--check` found a stale block or a section is undefined, 2 for a
/// folder without the docs or a malformed marker, 3 when a page cannot be written.
pub fn run(a: &Args) -> u8 {
    let found = match blocks(a.root.as_path(), a.check) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let undefined = match super::sections::undefined(&a.root) {
        Ok(u) => u,
        Err(msg) => return crate::fail::usage(msg),
    };
    print(&found, &undefined, a);
    if (a.check && !found.is_empty()) || !undefined.is_empty() {
        exit::FAILED
    } else {
        exit::OK
    }
}

/// The stale generated blocks of the pages under `root`, each rewritten unless `check`; the exit
/// code after saying why when a page cannot be read, parsed or written.
fn blocks(root: &Path, check: bool) -> Result<Vec<StaleIn>, u8> {
    let paths =
        files(root).map_err(|e| crate::fail::usage(format!("cannot read {}: {e}", root.join("docs").display())))?;
    let mut found = Vec::new();
    for path in paths {
        let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
        let text =
            std::fs::read_to_string(&path).map_err(|e| crate::fail::usage(format!("cannot read {shown}: {e}")))?;
        let (new, stale) = rewrite(&text).map_err(|msg| crate::fail::usage(format!("{shown}: {msg}")))?;
        if !check && !stale.is_empty() {
            std::fs::write(&path, new)
                .map_err(|e| crate::fail::harness_failed(format!("cannot write {shown}: {e}")))?;
        }
        found.extend(stale.into_iter().map(|s| StaleIn {
            file: shown.clone(),
            line: s.line,
            name: s.name,
            first_difference: s.first_difference,
        }));
    }
    Ok(found)
}

/// The stale (or rewritten) blocks and the undefined sections: one line each and a closing line,
/// or one JSON document.
fn print(found: &[StaleIn], undefined: &[super::sections::Undefined], a: &Args) {
    if a.out.json {
        let v = serde_json::json!({ "stale": found, "rewritten": !a.check, "undefined_sections": undefined });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return;
    }
    let verb = if a.check { "is stale" } else { "rewritten" };
    if !a.out.quiet {
        for s in found {
            outln!(
                "{}:{}: generated:{} {verb} (first difference at its line {})",
                s.file,
                s.line,
                s.name,
                s.first_difference
            );
        }
        for u in undefined {
            outln!("{}: {} is not a heading of {}", u.at, u.section, super::sections::PAGE);
        }
    }
    if a.check && !found.is_empty() {
        outln!("{} generated block(s) differ from the code; run `fenceproof docs` (or `just docs`)", found.len());
    } else if !a.check && !found.is_empty() {
        outln!("{} generated block(s) rewritten", found.len());
    } else {
        outln!("every generated block matches the code");
    }
    if !undefined.is_empty() {
        outln!(
            "{} cited section(s) have no heading in {}: add the heading or name the section instead",
            undefined.len(),
            super::sections::PAGE
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(name: &str) -> Option<String> {
        match name {
            "table" => Some("| a |\n|---|\n| 1 |\n".into()),
            "count" => Some("3".into()),
            _ => None,
        }
    }

    #[test]
    fn blocks_and_inline_counts_are_rewritten_and_reported_stale() {
        let text = "x <!-- generated:count -->2<!-- /generated --> y\n<!-- generated:table -->\n| a |\n|---|\n| 0 |\n<!-- /generated -->\nend\n";
        let (new, stale) = rewrite_with(text, fixed).unwrap();
        assert_eq!(
            new,
            "x <!-- generated:count -->3<!-- /generated --> y\n<!-- generated:table -->\n| a |\n|---|\n| 1 |\n<!-- /generated -->\nend\n"
        );
        assert_eq!(
            stale,
            vec![
                Stale { line: 1, name: "count".into(), first_difference: 1 },
                Stale { line: 2, name: "table".into(), first_difference: 4 },
            ]
        );
        let (again, none) = rewrite_with(&new, fixed).unwrap();
        assert_eq!((again.as_str(), none.len()), (new.as_str(), 0), "a rewritten text is current");
    }

    #[test]
    fn unknown_names_and_open_markers_are_errors() {
        assert!(rewrite_with("<!-- generated:nope -->x<!-- /generated -->", fixed).unwrap_err().contains("nope"));
        assert!(rewrite_with("a\n<!-- generated:count -->3", fixed).unwrap_err().contains("line 2"));
        let quoted = "blocks sit between `<!-- generated:NAME -->` and `<!-- /generated -->`\n";
        assert_eq!(rewrite_with(quoted, fixed).unwrap(), (quoted.to_string(), vec![]), "quoted markers are text");
    }

    #[test]
    fn every_generator_writes_something() {
        for b in BLOCKS {
            assert!(!(b.make)().trim().is_empty(), "generated:{} is empty", b.name);
        }
        assert_eq!(experiments_markdown().lines().count(), fenceproof_scenarios::all().len() + 2);
    }
}

/// Rewrite the tables and counts of README.md and docs/*.md that are generated from the code
/// (between `<!-- generated:NAME -->` and `<!-- /generated -->`); `--check` only lists the
/// stale ones, one line each, and exits 1. Both exit 1 on a spec section (`§05.2`) the code or a
/// row or rule cites that docs/protocol.md has no heading for.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Write nothing: list each stale block and exit 1 when there is one.
    #[arg(long)]
    pub check: bool,
    /// The folder holding README.md and docs/.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    #[command(flatten)]
    pub out: crate::cmd::output::Output,
}
