//! The schedules' secrets: the holder plans a step whose request carries secrets at any depth
//! (P-secret's generated bodies: in arrays, in objects inside arrays, nested, several, unicode
//! names); the values are kept for the judgement at the end: no row of the ledger table and no
//! commit the oracle recorded may contain one ([`judge`]).

use fenceproof_harness::check::Check;
use fenceproof_harness::record::oracle::CommitRow;
use fenceproof_harness::HarnessError;
use fenceproof_scenarios::p_secret_masking::{generated_body, NO_ROW_CONTAINS_VALUE};
use serde_json::json;

use super::exec::Exec;
use super::ops::Tool;

impl Exec<'_> {
    /// The holder plans a step for `tool` whose request carries generated secrets.
    pub(super) async fn plan_secret(&mut self, tool: Tool) -> Result<String, HarnessError> {
        let Some(w) = self.make_holder(None).await? else { return Ok("no live holder could be made".into()) };
        self.note_write(w, false).await?;
        let n = self.next();
        let step = format!("s{n}");
        let (body, values) = generated_body(u64::from(n));
        let name = format!("res-{}-{step}", &self.run_id.simple().to_string()[..8]);
        let request = json!({"name": name, "size": n, "data": body});
        let got = self
            .tell(w, json!({"cmd": "plan", "step_id": step, "tool": tool.name(), "request": request}), None)
            .await?;
        if got == "ok" {
            self.reached.insert("secret-planned");
        }
        self.secrets.extend(values);
        Ok(format!("w{w} planned {step} with secrets at depth: {got}"))
    }
}

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
