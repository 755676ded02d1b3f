//! The worker contract's JSON Schema (`contract/worker-protocol.v2.schema.json`), compiled once.
//! The harness checks every event a worker prints against `#/$defs/event` and every command it
//! sends against `#/$defs/command`, so the schema in the repository is the contract actually in
//! force. A violation is described by the field (a JSON pointer into the line) and what is wrong
//! with it; [`crate::procs::worker`] adds the command the event answers and turns it into an error
//! (an experiment's ERROR: a worker that breaks the language gets no verdict).

use std::sync::OnceLock;

use serde_json::{json, Value};

/// The contract's version: the schema file's name carries it.
pub const VERSION: u32 = 2;
/// The schema, as it is in the repository.
pub const SCHEMA: &str = include_str!("../../../contract/worker-protocol.v2.schema.json");

struct Compiled {
    event: jsonschema::Validator,
    command: jsonschema::Validator,
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| {
        let doc: Value = serde_json::from_str(SCHEMA).expect("the contract schema is JSON");
        let part = |def: &str| {
            let mut d = doc.clone();
            d["$ref"] = json!(format!("#/$defs/{def}"));
            jsonschema::validator_for(&d).expect("the contract schema compiles")
        };
        Compiled { event: part("event"), command: part("command") }
    })
}

fn first_violation(v: &jsonschema::Validator, line: &Value) -> Option<String> {
    let e = v.iter_errors(line).next()?;
    let at = e.instance_path().to_string();
    let field = if at.is_empty() { "the event itself".to_string() } else { format!("field {at}") };
    Some(format!("{field}: {e}"))
}

/// What is wrong with `event` under the contract, naming the field; `None` when it is valid.
pub fn event_violation(event: &Value) -> Option<String> {
    first_violation(&compiled().event, event)
}

/// What is wrong with a command the harness is about to send; `None` when it is valid.
pub fn command_violation(cmd: &Value) -> Option<String> {
    first_violation(&compiled().command, cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(event: &str, outcome: &str) -> Value {
        json!({"time": "t", "owner": "w", "run_id": null, "epoch": null, "revision": null,
               "event": event, "id": 3, "outcome": outcome})
    }

    #[test]
    fn a_valid_answer_passes_and_each_broken_field_is_named() {
        assert_eq!(event_violation(&answer("save", "ok")), None);
        let mut e = answer("save", "ok");
        e["revision"] = json!("2");
        let v = event_violation(&e).expect("a string revision is refused");
        assert!(v.starts_with("field /revision:"), "{v}");
        let mut e = answer("save", "ok");
        e.as_object_mut().unwrap().remove("outcome");
        let v = event_violation(&e).expect("a missing outcome is refused");
        assert!(v.contains("\"outcome\" is a required property"), "{v}");
        let mut e = answer("save", "Lease Lost");
        e["id"] = json!(3);
        assert!(event_violation(&e).unwrap().starts_with("field /outcome:"));
    }

    #[test]
    fn answers_with_data_need_their_shape() {
        let mut acq = answer("acquire", "ok");
        let v = event_violation(&acq).expect("an ok acquire names its epoch");
        assert!(v.starts_with("field /epoch:"), "{v}");
        acq["run_id"] = json!("6f1c3a52-6b9e-4c1e-9d41-0a4f2b9a7c10");
        acq["epoch"] = json!(2);
        assert_eq!(event_violation(&acq), None);
        let mut plan = answer("plan", "ok");
        plan["data"] = json!({"operation_id": "tenant1/6f1c3a52-6b9e-4c1e-9d41-0a4f2b9a7c10/pay/v1"});
        assert_eq!(event_violation(&plan), None);
        // v2: the operation_id is opaque (any non-empty string); what it must never carry is
        // judged from behaviour.
        plan["data"] = json!({"operation_id": "pay-1"});
        assert_eq!(event_violation(&plan), None);
        plan["data"] = json!({"operation_id": ""});
        assert!(event_violation(&plan).unwrap().starts_with("field /data/operation_id:"));
        let mut d = answer("dispatch", "ok");
        d["data"] = json!([{"operation_id": "o", "tool": "idem", "outcome": "done"}]);
        assert!(event_violation(&d).unwrap().starts_with("field /data/0/outcome:"));
        let mut m = answer("metrics", "ok");
        m["data"] = json!({"text": 5});
        assert!(event_violation(&m).unwrap().starts_with("field /data/text:"));
        let mut hb = answer("heartbeat_lost", "lost");
        hb["id"] = Value::Null;
        assert!(event_violation(&hb).unwrap().starts_with("field /outcome:"));
    }

    #[test]
    fn commands_are_checked_too() {
        assert_eq!(command_violation(&json!({"id": 1, "cmd": "save", "checkpoint": {"a": 1}})), None);
        let v = command_violation(&json!({"id": 1, "cmd": "save", "checkpoint": {}, "revision": 2})).unwrap();
        assert!(v.contains("revision"), "{v}");
        assert!(command_violation(
            &json!({"id": 1, "cmd": "acquire", "run_id": "x", "ttl_ms": 1, "heartbeat_ms": 1, "renew_timeout_ms": 1})
        )
        .is_some());
        assert!(command_violation(&json!({"id": 1, "cmd": "teleport"})).is_some());
    }
}
