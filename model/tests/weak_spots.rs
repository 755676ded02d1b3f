//! Every documented weak spot of the protocol yields a counterexample for the rule it names: the
//! model can reject (a model that explains everything would be worthless), and each thing the
//! protocol relies on is shown to matter.

use std::time::Duration;

use fenceproof_model::check::break_rule;
use fenceproof_model::weak_spots::WEAK_SPOTS;

#[test]
fn every_weak_spot_breaks_its_rule() {
    let mut missed = Vec::new();
    for w in WEAK_SPOTS {
        let o = break_rule((w.config)(), w.breaks, 2, Duration::from_secs(120));
        let found = o.broken.iter().find(|(r, _)| r == w.breaks);
        eprintln!("{}: {} states, {:.1}s, {:?}", w.name, o.unique_states, o.seconds, found.map(|f| &f.1));
        if found.is_none() {
            missed.push(w.name);
        }
    }
    assert!(missed.is_empty(), "weak spots without a counterexample: {missed:?}");
}
