//! The shape of a rule of the spec and how a check names the rules it judges. The rules
//! themselves, linked to the checks' constant names, are the scenarios crate's catalogue: the
//! harness knows no particular experiment or rule.

use serde::Serialize;

/// One normative rule of the spec.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    /// A short, stable id (`lease.renew-unexpired`).
    pub id: &'static str,
    /// The spec section (`05.2`).
    pub section: &'static str,
    /// The rule in one line.
    pub statement: &'static str,
    /// The checks that judge it: each a checker's constant name, or a pattern (`*` matches any
    /// text) for names built at run time.
    pub checkers: &'static [&'static str],
}

/// A rule as a report shows it beside a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RuleRef {
    pub id: String,
    pub section: String,
    pub statement: String,
}

impl RuleRef {
    /// A rule named by id alone, its section and words to be filled in from the catalogue.
    pub fn id(id: &str) -> RuleRef {
        RuleRef { id: id.into(), section: String::new(), statement: String::new() }
    }
}

impl From<&Rule> for RuleRef {
    fn from(r: &Rule) -> RuleRef {
        RuleRef { id: r.id.into(), section: r.section.into(), statement: r.statement.into() }
    }
}

/// Whether check `name` is one of `pattern` (a trailing `*`, or a `*` anywhere, matches any text).
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head) && {
                let rest = &name[head.len()..];
                tail.is_empty() || tail.split('*').all(|part| rest.contains(part))
            }
        }
    }
}

/// Whether `rule` is judged by a check named `name`.
pub fn judged_by(rule: &Rule, name: &str) -> bool {
    rule.checkers.iter().any(|p| matches(p, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_probe_names_and_exact_names() {
        assert!(matches("[lease.renew-unexpired]*", "[lease.renew-unexpired] renewing an expired lease is refused"));
        assert!(!matches("[lease.renew-unexpired]*", "[lease.renew-owner-epoch] x"));
        assert!(matches("* commits nothing after #*", "worker-a-1 commits nothing after #6"));
        assert!(!matches("* commits nothing after #*", "worker-a-1 committed after #6"));
        assert!(matches("exact", "exact") && !matches("exact", "exact!"));
    }
}
