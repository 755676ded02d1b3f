//! The schedules' secrets: the holder plans a step whose request carries secrets at any depth
//! (P-secret's generated bodies: in arrays, in objects inside arrays, nested, several, unicode
//! names); the values are kept for the judgement at the end: no row of the ledger table and no
//! commit the oracle recorded may contain one (`super::masking::judge`).

use fenceproof_harness::HarnessError;
use fenceproof_scenarios::p_secret_masking::generated_body;
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
