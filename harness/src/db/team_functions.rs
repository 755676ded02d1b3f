//! A team's own fenced functions, named by the deployment contract (`[database.functions]`): each
//! of the protocol's operations mapped to the team's function, its arguments written in the team's
//! order with the protocol's words, e.g. `renew = "team_renew_lease(run_id, owner, epoch, ttl_ms)"`.
//! P-api-team calls them with forged and stale terms and judges what changed in the database.
//! The operations that can be mapped so far are the lease's (spec §05).

use std::collections::BTreeMap;

/// The operations that can be mapped, with the words their arguments may use (each exactly once).
pub const OPERATIONS: &[(&str, &[&str])] = &[
    ("acquire", &["run_id", "owner", "ttl_ms"]),
    ("renew", &["run_id", "owner", "epoch", "ttl_ms"]),
    ("release", &["run_id", "owner", "epoch"]),
];

/// One mapped function: its (possibly schema-qualified) name and its arguments' words in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamFunction {
    pub name: String,
    pub args: Vec<String>,
}

impl TeamFunction {
    /// `SELECT count(*) FROM name(...) ` with each word's SQL literal put in its place: a call that
    /// works whatever the function returns (a table, a scalar, void).
    pub fn call(&self, values: &BTreeMap<&str, String>) -> String {
        let args: Vec<&str> =
            self.args.iter().map(|a| values.get(a.as_str()).map(String::as_str).unwrap_or("NULL")).collect();
        format!("SELECT to_jsonb(count(*)) FROM {}({}) x", self.name, args.join(", "))
    }
}

/// Parse `template` as a call of operation `op`: a name (letters, digits, `_`, one optional
/// `schema.`) and the operation's words, each once, in any order.
pub fn parse(op: &str, template: &str) -> Result<TeamFunction, String> {
    let Some((_, words)) = OPERATIONS.iter().find(|(o, _)| *o == op) else {
        let known: Vec<&str> = OPERATIONS.iter().map(|(o, _)| *o).collect();
        return Err(format!("'{op}' is not an operation that can be mapped ({})", known.join(", ")));
    };
    let t = template.trim();
    let (name, rest) = t.split_once('(').ok_or_else(|| format!("'{t}' is not a call: name(word, ...)"))?;
    let inner = rest.strip_suffix(')').ok_or_else(|| format!("'{t}' does not end with ')'"))?;
    let name = name.trim();
    let good_name = !name.is_empty()
        && name.split('.').count() <= 2
        && name.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    if !good_name {
        return Err(format!("'{name}' is not a function name (letters, digits, _ and one optional schema.)"));
    }
    let args: Vec<String> = inner.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
    for a in &args {
        if !words.contains(&a.as_str()) {
            return Err(format!("'{a}' is not an argument of {op} (its words: {})", words.join(", ")));
        }
        if args.iter().filter(|b| *b == a).count() > 1 {
            return Err(format!("'{a}' is named twice"));
        }
    }
    if args.len() != words.len() {
        let missing: Vec<&str> = words.iter().filter(|w| !args.iter().any(|a| a == *w)).copied().collect();
        return Err(format!("{op} needs {} too", missing.join(", ")));
    }
    Ok(TeamFunction { name: name.to_string(), args })
}

/// Every mapping of a contract, parsed; the first bad one as (operation, why).
/// The lease's three operations are mapped together or not at all (P-api-team judges all three).
pub fn parse_all(map: &BTreeMap<String, String>) -> Result<BTreeMap<String, TeamFunction>, (String, String)> {
    let parsed: BTreeMap<String, TeamFunction> = map
        .iter()
        .map(|(op, t)| parse(op, t).map(|f| (op.clone(), f)).map_err(|e| (op.clone(), e)))
        .collect::<Result<_, _>>()?;
    if let Some((op, _)) = OPERATIONS.iter().find(|(op, _)| !parsed.is_empty() && !parsed.contains_key(*op)) {
        return Err((op.to_string(), "the lease's operations (acquire, renew, release) are mapped together".into()));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_is_a_name_and_the_operations_words_in_the_teams_order() {
        let f = parse("renew", " app.renew_lease(epoch, run_id, owner, ttl_ms) ").unwrap();
        assert_eq!(f.name, "app.renew_lease");
        assert_eq!(f.args, ["epoch", "run_id", "owner", "ttl_ms"]);
        let values: BTreeMap<&str, String> =
            [("run_id", "'r'".to_string()), ("owner", "'o'".into()), ("epoch", "1".into()), ("ttl_ms", "9".into())]
                .into();
        assert_eq!(f.call(&values), "SELECT to_jsonb(count(*)) FROM app.renew_lease(1, 'r', 'o', 9) x");
        for (op, bad, says) in [
            ("renew", "renew_lease(run_id, owner, epoch)", "needs ttl_ms"),
            ("renew", "renew_lease(run_id, owner, epoch, epoch, ttl_ms)", "twice"),
            ("renew", "renew_lease(run_id, owner, epoch, revision)", "'revision' is not an argument"),
            ("claim", "claim(owner)", "not an operation"),
            ("release", "drop table x; f(run_id, owner, epoch)", "not a function name"),
            ("release", "f(run_id, owner, epoch", "does not end"),
        ] {
            let e = parse(op, bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let map = |ops: &[&str]| -> BTreeMap<String, String> {
            ops.iter()
                .map(|o| {
                    (o.to_string(), format!("f({})", OPERATIONS.iter().find(|(x, _)| x == o).unwrap().1.join(", ")))
                })
                .collect()
        };
        assert_eq!(parse_all(&map(&[])).unwrap().len(), 0);
        assert_eq!(parse_all(&map(&["acquire", "renew", "release"])).unwrap().len(), 3);
        assert_eq!(parse_all(&map(&["renew", "release"])).unwrap_err().0, "acquire");
    }
}
