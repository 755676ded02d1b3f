//! The model's paths (`model/paths.json`): for every transition of the denominator a driver can
//! reach, the shortest playable path to it. Regenerate with `FENCEPROOF_BLESS=1 cargo test -p
//! fenceproof-model --test paths` after a model change; this test keeps it current and checks that
//! every path is a behaviour of the model that ends in the transition it names.

use std::collections::BTreeMap;

use fenceproof_model::action::Action;
use fenceproof_model::config::Config;
use fenceproof_model::coverage::{
    classes, commits, denominator, key, observable, paths, reaches, replay, tour_playable, worker_paths,
    worker_playable, worker_tours, PATHS, TOUR_MAX, WORKER_PATHS, WORKER_TOURS,
};
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

/// The worker's paths (`model/worker_paths.json`): current, each a behaviour ending in the
/// transition it names whose every step the contract can drive a worker through; and what they
/// reach, against the driver's paths, is the figure docs/model.md gives.
#[test]
fn worker_paths_are_current_and_drive_only_what_the_contract_expresses() {
    let all = worker_paths(&ProtocolModel::new(Config::driver_bound()), 20_000_000).expect("bound exhausted");
    if std::env::var_os("FENCEPROOF_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&all).expect("json");
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/worker_paths.json"), text + "\n").expect("write");
        return;
    }
    let have: BTreeMap<String, Vec<Action>> = serde_json::from_str(WORKER_PATHS).expect("worker_paths.json");
    assert_eq!(have, all, "model/worker_paths.json is stale: regenerate with FENCEPROOF_BLESS=1");
    for (k, p) in &have {
        assert!(ends_in(p, k), "the worker's path to {k} is not a playable behaviour ending in it");
        let (_, states) = replay(p).expect("replays");
        assert!(p.iter().zip(&states).all(|(a, s)| worker_playable(s, a)), "{k}: a step the contract cannot drive");
    }
    // A claim held before its call is what the contract cannot express: no worker path holds one.
    let held = |p: &[Action]| {
        p.windows(2)
            .any(|w| matches!((w[0], w[1]), (Action::Claim(i, _), b) if b != Action::Call(i) && b != Action::GiveUp(i)))
    };
    assert!(have.values().all(|p| !held(p)), "a worker path holds a claim before its call");
    let driver: BTreeMap<String, Vec<Action>> = serde_json::from_str(PATHS).expect("paths.json");
    assert!(have.keys().all(|k| driver.contains_key(k)), "a worker path to a transition the driver cannot reach");
}

/// The worker's tours (`model/worker_tours.json`): each a behaviour whose every step the contract
/// can drive a worker through, with no step only the spec's statements take, at most `TOUR_MAX`
/// steps; together with the shortest paths of what they leave (the spec's own steps only), they
/// take every transition of the worker's paths. Regenerated with FENCEPROOF_BLESS=1 (a search of
/// about a minute); the test checks what the file promises rather than regenerating it.
#[test]
fn worker_tours_take_every_transition_of_the_worker_paths() {
    let paths: BTreeMap<String, Vec<Action>> = serde_json::from_str(WORKER_PATHS).expect("worker_paths.json");
    if std::env::var_os("FENCEPROOF_BLESS").is_some() {
        let (tours, _) = worker_tours(&paths);
        let text = serde_json::to_string_pretty(&tours).expect("json");
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/worker_tours.json"), text + "\n").expect("write");
        return;
    }
    let tours: BTreeMap<String, Vec<Action>> = serde_json::from_str(WORKER_TOURS).expect("worker_tours.json");
    let mut taken = std::collections::BTreeSet::new();
    for (name, t) in &tours {
        assert!(t.len() <= TOUR_MAX, "{name} is longer than a tour may be");
        let (_, states) = replay(t).unwrap_or_else(|| panic!("{name} is no behaviour of the model"));
        assert!(tour_playable(t) && states.len() == t.len() + 1, "{name}: a step a tour may not take");
        taken.extend(reaches(t));
    }
    let left = paths.keys().filter(|k| !taken.contains(*k)).count();
    assert!(
        !tours.is_empty() && tours.len() + left < paths.len() / 2,
        "{} tours and {left} paths for {}",
        tours.len(),
        paths.len()
    );
}
