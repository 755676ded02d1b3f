//! The one shape every fault has, after Jepsen's nemesis with its heal step: a [`Fault`] describes
//! what it does and to whom, injects and heals; [`inject`] drives it and answers an [`Injected`]
//! guard. The guard, not the fault nor the experiment, records every step in the timeline (the
//! injection once it is confirmed, the heal once it is done, a failure of either), and heals on
//! drop a fault nobody healed (an error path, an early return), recording that too. So a fault
//! written once is injected, healed and recorded the same way by every experiment and schedule.

use std::future::Future;
use std::ops::{Deref, DerefMut};

use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::record::timeline::{FaultMark, FaultStep, Timeline};

/// A fault the harness injects and heals.
pub trait Fault: Send {
    /// Its name in the timeline's `fault` field (`sigstop`, `server-freeze`, `db-barrier`, ...).
    fn name(&self) -> &'static str;
    /// What it hits: a worker's name, `database`, `tools`.
    fn target(&self) -> String;
    /// The timeline actions of its injection and its heal (`("sigstop", "sigcont")`): the
    /// report draws a pause or a partition from them.
    fn actions(&self) -> (&'static str, &'static str);
    /// What it is, recorded with every step (a pid, a barrier key, a pattern).
    fn describe(&self) -> Value {
        json!({})
    }
    /// Put the fault in effect and confirm it (bounded); answers what confirmed it, recorded
    /// with the injection.
    fn inject(&mut self) -> impl Future<Output = Result<Value>> + Send;
    /// End the fault and confirm it ended (bounded). Healing a fault that is not in effect
    /// (healed already, or never injected) does nothing.
    fn heal(&mut self) -> impl Future<Output = Result<()>> + Send;
    /// End the fault without waiting, best effort: the heal of a guard dropped unhealed, and the
    /// undoing of a failed injection.
    fn heal_now(&mut self);
}

/// An injected fault; healed by [`Injected::heal`], or on drop. Derefs to the fault, for what it
/// offers while it is in effect (a barrier's waiters, a proxy barrier's held statements).
pub struct Injected<F: Fault> {
    fault: F,
    timeline: Timeline,
    healed: bool,
}

/// Inject `fault` and record it in `timeline`. A failed injection is recorded, undone (best
/// effort) and answered as the error.
pub async fn inject<F: Fault>(mut fault: F, timeline: &Timeline) -> Result<Injected<F>> {
    let began = timeline.elapsed_ms();
    match fault.inject().await {
        Ok(evidence) => {
            record(&fault, timeline, FaultStep::Inject, began, evidence);
            Ok(Injected { fault, timeline: timeline.clone(), healed: false })
        }
        Err(e) => {
            fault.heal_now();
            record(&fault, timeline, FaultStep::InjectFailed, began, json!({"error": e.to_string()}));
            Err(e)
        }
    }
}

impl<F: Fault> Injected<F> {
    /// Heal the fault and record the heal (or its failure). The guard is spent either way.
    pub async fn heal(mut self) -> Result<()> {
        self.healed = true;
        let began = self.timeline.elapsed_ms();
        let r = self.fault.heal().await;
        let (step, detail) = match &r {
            Ok(()) => (FaultStep::Heal, json!({})),
            Err(e) => (FaultStep::HealFailed, json!({"error": e.to_string()})),
        };
        record(&self.fault, &self.timeline, step, began, detail);
        r
    }

    /// Record that the injected fault moved (`action`, with `detail`): a frozen clock set to
    /// another instant. The fault itself makes the move; this is its entry.
    pub fn record_change(&self, action: &str, detail: Value) {
        let mark =
            FaultMark { name: self.fault.name().into(), step: FaultStep::Change, began_ms: self.timeline.elapsed_ms() };
        self.timeline.record_fault(mark, action, &self.fault.target(), merge(self.fault.describe(), detail));
    }
}

impl<F: Fault> Deref for Injected<F> {
    type Target = F;
    fn deref(&self) -> &F {
        &self.fault
    }
}

impl<F: Fault> DerefMut for Injected<F> {
    fn deref_mut(&mut self) -> &mut F {
        &mut self.fault
    }
}

impl<F: Fault> Drop for Injected<F> {
    fn drop(&mut self) {
        if !self.healed {
            self.healed = true;
            let began = self.timeline.elapsed_ms();
            self.fault.heal_now();
            record(&self.fault, &self.timeline, FaultStep::HealOnDrop, began, json!({}));
        }
    }
}

fn record<F: Fault>(fault: &F, timeline: &Timeline, step: FaultStep, began_ms: f64, extra: Value) {
    let (injected, healed) = fault.actions();
    let action = match step {
        FaultStep::Inject => injected.to_string(),
        FaultStep::InjectFailed => format!("{injected} failed"),
        FaultStep::Change => injected.to_string(),
        FaultStep::Heal | FaultStep::HealOnDrop => healed.to_string(),
        FaultStep::HealFailed => format!("{healed} failed"),
    };
    let mark = FaultMark { name: fault.name().into(), step, began_ms };
    timeline.record_fault(mark, &action, &fault.target(), merge(fault.describe(), extra));
}

/// `a`'s fields, then `b`'s (an object); a non-object `b` is kept under `evidence`.
fn merge(a: Value, b: Value) -> Value {
    let mut out = match a {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        other => Map::from_iter([("what".to_string(), other)]),
    };
    match b {
        Value::Object(m) => out.extend(m),
        Value::Null => {}
        other => {
            out.insert("evidence".into(), other);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::error::HarnessError;

    /// A fault whose effect is a flag the test can read, and which counts its heals.
    #[derive(Default, Clone)]
    struct Flag {
        on: Arc<AtomicUsize>,
        heals: Arc<AtomicUsize>,
        fail_inject: bool,
    }

    impl Fault for Flag {
        fn name(&self) -> &'static str {
            "flag"
        }
        fn target(&self) -> String {
            "t".into()
        }
        fn actions(&self) -> (&'static str, &'static str) {
            ("flag_on", "flag_off")
        }
        fn describe(&self) -> Value {
            json!({"key": 7})
        }
        async fn inject(&mut self) -> Result<Value> {
            self.on.store(1, Ordering::SeqCst);
            if self.fail_inject {
                return Err(HarnessError::Other("refused".into()));
            }
            Ok(json!({"confirmed": true}))
        }
        async fn heal(&mut self) -> Result<()> {
            self.heal_now();
            Ok(())
        }
        fn heal_now(&mut self) {
            // Idempotent: only a fault in effect is healed.
            if self.on.swap(0, Ordering::SeqCst) == 1 {
                self.heals.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn steps(t: &Timeline) -> Vec<(String, FaultStep, Value)> {
        t.entries().into_iter().filter_map(|e| e.fault.map(|f| (e.action, f.step, e.detail))).collect()
    }

    #[tokio::test]
    async fn a_fault_records_its_injection_and_its_heal() {
        let t = Timeline::new();
        t.record("harness", "spawn", "a", json!({}));
        let f = Flag::default();
        let g = inject(f.clone(), &t).await.unwrap();
        assert_eq!(f.on.load(Ordering::SeqCst), 1, "in effect after inject");
        g.heal().await.unwrap();
        assert_eq!(f.on.load(Ordering::SeqCst), 0, "not in effect after heal");
        assert_eq!(f.heals.load(Ordering::SeqCst), 1);
        let s = steps(&t);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!((s[0].0.as_str(), s[0].1), ("flag_on", FaultStep::Inject));
        assert_eq!(s[0].2, json!({"key": 7, "confirmed": true}));
        assert_eq!((s[1].0.as_str(), s[1].1), ("flag_off", FaultStep::Heal));
        let line = serde_json::to_value(&t.entries()[1]).unwrap();
        assert_eq!(line["fault"]["name"], "flag");
        assert_eq!(line["fault"]["step"], "inject");
        assert_eq!(line["target"], "t");
        assert!(serde_json::to_value(&t.entries()[0]).unwrap().get("fault").is_none(), "other entries carry none");
    }

    #[tokio::test]
    async fn a_dropped_guard_heals_and_records_it() {
        let t = Timeline::new();
        let f = Flag::default();
        {
            let _g = inject(f.clone(), &t).await.unwrap();
        }
        assert_eq!(f.on.load(Ordering::SeqCst), 0, "healed by the drop");
        assert_eq!(f.heals.load(Ordering::SeqCst), 1);
        let s = steps(&t);
        assert_eq!(s.iter().map(|x| x.1).collect::<Vec<_>>(), vec![FaultStep::Inject, FaultStep::HealOnDrop]);
        assert_eq!(s[1].0, "flag_off");
    }

    #[tokio::test]
    async fn a_double_heal_is_harmless() {
        let t = Timeline::new();
        let f = Flag::default();
        let g = inject(f.clone(), &t).await.unwrap();
        g.heal().await.unwrap(); // the guard is spent; its drop must not heal nor record again
        assert_eq!(f.heals.load(Ordering::SeqCst), 1);
        assert_eq!(steps(&t).len(), 2);
        // The fault's own heal, twice more: nothing to heal, no error.
        let mut again = f.clone();
        again.heal().await.unwrap();
        again.heal().await.unwrap();
        assert_eq!(f.heals.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failed_injection_is_recorded_and_undone() {
        let t = Timeline::new();
        let f = Flag { fail_inject: true, ..Flag::default() };
        assert!(inject(f.clone(), &t).await.is_err());
        assert_eq!(f.on.load(Ordering::SeqCst), 0, "the half-done injection was undone");
        let s = steps(&t);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].0.as_str(), s[0].1), ("flag_on failed", FaultStep::InjectFailed));
        assert_eq!(s[0].2["error"], "refused");
    }

    #[tokio::test]
    async fn a_change_is_recorded_as_a_step_of_the_fault() {
        let t = Timeline::new();
        let g = inject(Flag::default(), &t).await.unwrap();
        g.record_change("flag_moved", json!({"to": 2}));
        let s = steps(&t);
        assert_eq!((s[1].0.as_str(), s[1].1), ("flag_moved", FaultStep::Change));
        assert_eq!(s[1].2, json!({"key": 7, "to": 2}));
    }
}
