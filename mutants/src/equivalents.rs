//! The reviewed list of generated SQL mutants that no correct check can observe
//! (`equivalent_mutants.toml`, beside the rule catalogue), each with its proof sketch. A mutant
//! listed here that an experiment kills makes the entry wrong; the mutation run reports it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The reviewed file, compiled in.
pub const FILE: &str = include_str!("equivalent_mutants.toml");

#[derive(Debug, Deserialize)]
struct Listing {
    #[serde(default)]
    equivalent: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    id: String,
    reason: String,
}

/// Mutant id → why it is equivalent.
pub fn load() -> Result<BTreeMap<String, String>, String> {
    parse(FILE)
}

fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    let l: Listing = toml::from_str(text).map_err(|e| format!("equivalent_mutants.toml: {e}"))?;
    let mut m = BTreeMap::new();
    for e in l.equivalent {
        if e.reason.trim().len() < 40 {
            return Err(format!(
                "equivalent_mutants.toml: {} needs a reason (a proof sketch), not '{}'",
                e.id, e.reason
            ));
        }
        if m.insert(e.id.clone(), e.reason).is_some() {
            return Err(format!("equivalent_mutants.toml: {} is listed twice", e.id));
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_function_mutant_exists() {
        // The direct-path statements live in the protocol crate; the scenarios crate checks those.
        let listed = load().unwrap();
        let generated: Vec<String> = crate::sqlmut::generate().into_iter().map(|m| m.id).collect();
        for id in listed.keys().filter(|id| id.starts_with("fp_")) {
            assert!(generated.contains(id), "{id} is listed as equivalent but is not generated");
        }
    }

    #[test]
    fn a_reason_must_be_a_sketch_not_a_shrug() {
        assert!(parse("[[equivalent]]\nid = \"x\"\nreason = \"same\"\n").unwrap_err().contains("needs a reason"));
    }
}
