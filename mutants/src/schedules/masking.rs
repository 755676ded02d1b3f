//! The schedules' judgement of the secrets they planned (`super::secret_plan`): no planned value
//! in a ledger row or in a commit the oracle recorded (rule secrets.masked).

use fenceproof_harness::check::Check;
use fenceproof_harness::record::oracle::CommitRow;
use fenceproof_scenarios::p_secret_masking::NO_ROW_CONTAINS_VALUE;

/// No secret value planned in the schedule is in a ledger row (`ledger_rows`, the request bodies
/// as text) or in a commit the oracle recorded.
pub fn judge(secrets: &[String], ledger_rows: &[String], commits: &[CommitRow]) -> Option<Check> {
    if secrets.is_empty() {
        return None;
    }
    let committed = serde_json::to_string(commits).unwrap_or_default();
    let bad: Vec<String> = secrets
        .iter()
        .filter(|v| committed.contains(v.as_str()) || ledger_rows.iter().any(|r| r.contains(v.as_str())))
        .map(|v| {
            format!("a secret value ({} characters, planned in this schedule) is in a ledger row or a commit", v.len())
        })
        .collect();
    Some(Check::from_violations(
        NO_ROW_CONTAINS_VALUE,
        bad,
        format!("{} planned secret value(s); none in a ledger row or a commit", secrets.len()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_in_a_ledger_row_fails_and_references_pass() {
        let secrets = vec!["sk_gen_abc".to_string()];
        assert!(judge(&[], &["anything".into()], &[]).is_none());
        assert!(judge(&secrets, &[r#"{"$secret":"key"}"#.into()], &[]).unwrap().passed());
        assert!(!judge(&secrets, &[r#"{"list":[{"$secret":{"value":"sk_gen_abc"}}]}"#.into()], &[]).unwrap().passed());
    }
}
