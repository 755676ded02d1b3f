//! The row that killed each generated SQL mutant in an earlier run, tried first for that mutant
//! (`kill_order.json` beside this file, copied from a run folder's `kill-order.json`). Only the
//! order changes: a mutant its hinted row does not kill goes on through every other row, and a
//! mutant without a hint (new, or renamed by an edit of its function) keeps the default order. With
//! `--first-kill` a mutant then usually costs one row instead of walking the matrix to its killer.

use std::collections::BTreeMap;

use fenceproof_scenarios::Experiment;

/// The committed hints: mutant id → experiment id.
pub const FILE: &str = include_str!("kill_order.json");

/// The committed hints (a file that does not parse is a build-time mistake the unit test catches).
pub fn load() -> BTreeMap<String, String> {
    serde_json::from_str(FILE).unwrap_or_default()
}

/// `hints` updated with the first row that killed each mutant: `kills` gives a mutant's id and its
/// kill matrix entries (`"<row>: <checks>"`), so a shard updates its own mutants only.
pub fn updated<'a>(
    mut hints: BTreeMap<String, String>,
    kills: impl IntoIterator<Item = (&'a str, &'a [String])>,
) -> BTreeMap<String, String> {
    for (id, killed_by) in kills {
        if let Some(first) = killed_by.first().and_then(|k| k.split(':').next()) {
            hints.insert(id.to_string(), first.trim().to_string());
        }
    }
    hints
}

/// `exps` with the experiment named `first` moved to the front, when it is among them.
pub fn front<'e>(mut exps: Vec<&'e Experiment>, first: Option<&String>) -> Vec<&'e Experiment> {
    if let Some(pos) = first.and_then(|f| exps.iter().position(|e| e.id == f.as_str())) {
        let e = exps.remove(pos);
        exps.insert(0, e);
    }
    exps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_hints_parse_and_name_known_mutants_and_rows() {
        let hints: BTreeMap<String, String> = serde_json::from_str(FILE).expect("kill_order.json parses");
        let ids: Vec<String> = crate::sql::all_mutants().into_iter().map(|m| m.id).collect();
        let rows: Vec<&str> = fenceproof_scenarios::all().iter().map(|e| e.id).collect();
        for (m, row) in &hints {
            assert!(ids.contains(m), "kill_order.json names {m}, which is not generated");
            assert!(rows.contains(&row.as_str()), "kill_order.json names row {row}, which is not in the catalogue");
        }
    }

    #[test]
    fn a_killed_mutant_records_its_first_killing_row_and_front_moves_it_first() {
        let killed_by = vec!["D: x / y".to_string(), "A: z".to_string()];
        let none: Vec<String> = vec![];
        let kills = [("fp_claim/drop-lock/1", killed_by.as_slice()), ("fp_claim/drop-lock/2", none.as_slice())];
        let hints = updated(BTreeMap::from([("old/x/1".to_string(), "A".to_string())]), kills);
        assert_eq!(hints.get("fp_claim/drop-lock/1").map(String::as_str), Some("D"));
        assert_eq!(hints.get("old/x/1").map(String::as_str), Some("A"), "other hints are kept");
        assert!(!hints.contains_key("fp_claim/drop-lock/2"), "a survivor gets no hint");
        let all = fenceproof_scenarios::all();
        let exps: Vec<&Experiment> = all.iter().take(5).collect();
        let last = exps[4].id.to_string();
        let moved = front(exps.clone(), Some(&last));
        assert_eq!(moved[0].id, last);
        assert_eq!(moved.len(), 5);
        assert_eq!(front(exps.clone(), Some(&"no-such-row".to_string()))[0].id, exps[0].id);
    }
}
