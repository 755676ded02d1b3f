//! The model's paths (`model/paths.json`): for every transition of the denominator a driver can
//! reach, the shortest playable path to it. Regenerate with `FENCEPROOF_BLESS=1 cargo test -p
//! fenceproof-model --test paths` after a model change; this test keeps it current and checks that
//! every path is a behaviour of the model that ends in the transition it names.

use std::collections::BTreeMap;

use fenceproof_model::action::Action;
use fenceproof_model::config::Config;
use fenceproof_model::coverage::{classes, commits, denominator, key, observable, paths, replay, PATHS};
use fenceproof_model::ProtocolModel;

fn generated() -> BTreeMap<String, Vec<Action>> {
    paths(&ProtocolModel::new(Config::driver_bound()), 20_000_000).expect("bound exhausted")
}

#[test]
fn paths_are_current_and_each_ends_in_its_transition() {
    let all = generated();
    let denominator = denominator();
    assert!(all.keys().all(|k| denominator.contains(k.as_str())), "a path to a transition outside the denominator");
    if std::env::var_os("FENCEPROOF_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&all).expect("json");
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/paths.json"), text + "\n").expect("write");
        return;
    }
    let have: BTreeMap<String, Vec<Action>> = serde_json::from_str(PATHS).expect("paths.json");
    assert_eq!(have, all, "model/paths.json is stale: regenerate with FENCEPROOF_BLESS=1");
    for (k, p) in &have {
        assert!(ends_in(p, k), "the path to {k} is not a playable behaviour ending in it");
    }
}

/// Whether `path` is playable step by step in one of the bounds and its last step takes `k`.
fn ends_in(path: &[Action], k: &str) -> bool {
    let Some((_, states)) = replay(path) else { return false };
    let (s, n, a) = (&states[states.len() - 2], &states[states.len() - 1], path[path.len() - 1]);
    commits(s, a, n) && observable(a.kind()).is_some_and(|o| key(&classes(s, a).0, o) == k)
}
