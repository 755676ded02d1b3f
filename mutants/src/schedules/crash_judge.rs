//! The judgement of the schedules' crashes after a plan's commit (`super::crash_plan`): every
//! secret value of a step a killed holder planned reached the tool once a dispatcher settled its
//! operation (rule crash.references-durable-first), from the final rows and the tools' ledger.

use fenceproof_harness::check::crash_points::{self, CrashCase};
use fenceproof_harness::check::Check;
use serde_json::Value;

/// The steps planned by killed holders (`planned`: step and secret values) whose operation a
/// dispatcher settled (`ops`: step, operation_id, status): each value reached the tool in a ledger
/// entry of the tools for that operation (`entries`). `None` when no such operation was settled.
pub fn judge(planned: &[(String, Vec<String>)], ops: &[(String, String, String)], entries: &[Value]) -> Option<Check> {
    let cases: Vec<CrashCase> = planned
        .iter()
        .filter_map(|(step, secrets)| {
            let (_, op, status) =
                ops.iter().find(|(s, _, st)| s == step && matches!(st.as_str(), "succeeded" | "failed_final"))?;
            let sent = entries.iter().filter(|e| e["operation_id"] == op.as_str()).map(|e| e.to_string()).collect();
            Some(CrashCase {
                command: "plan".into(),
                commit: 1,
                operation_id: Some(op.clone()),
                secrets: secrets.clone(),
                created: sent,
                status: Some(status.clone()),
                advanced: true,
            })
        })
        .collect();
    (!cases.is_empty()).then(|| crash_points::references_durable(&cases))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_settled_operation_without_its_values_fails_and_unsettled_ones_are_not_judged() {
        let planned = vec![("s1".to_string(), vec!["sk_gen_1".to_string()])];
        let sent = vec![json!({"kind": "created", "operation_id": "op1", "body": {"data": ["sk_gen_1"]}})];
        let settled = vec![("s1".to_string(), "op1".to_string(), "succeeded".to_string())];
        assert!(judge(&planned, &settled, &sent).unwrap().passed());
        let not_sent = vec![("s1".to_string(), "op1".to_string(), "failed_final".to_string())];
        assert!(!judge(&planned, &not_sent, &[]).unwrap().passed());
        let prepared = vec![("s1".to_string(), "op1".to_string(), "prepared".to_string())];
        assert!(judge(&planned, &prepared, &[]).is_none());
        assert!(judge(&[], &settled, &sent).is_none());
    }
}
