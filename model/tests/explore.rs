//! Exhaustive exploration of the two default bounds: every invariant holds in every reachable
//! state, every situation but the other bound's own is reached, and the state counts are pinned
//! (a change to the model shows up here, to be explained in the commit that makes it).

use std::time::Duration;

use fenceproof_model::check::run;
use fenceproof_model::config::Config;

#[test]
fn database_bound_keeps_every_invariant() {
    let o = run(Config::default_bound(), 2, Duration::from_secs(900));
    assert!(o.complete, "not exhausted in {:.0} s", o.seconds);
    assert!(o.broken.is_empty(), "broken: {:?}", o.broken);
    assert_eq!(o.unreached, vec!["a lost reply to be read back".to_string()]);
    // 2,442,772 before a claim's holder could give its own claim up as unknown (give-up-unknown);
    // 2,761,572 before a cancel raised the run's revision (as every committed run write does).
    assert_eq!(o.unique_states, 3_122_000, "the database bound's state count changed");
}

#[test]
fn process_bound_keeps_every_invariant() {
    let o = run(Config::process_faults(), 2, Duration::from_secs(900));
    assert!(o.complete, "not exhausted in {:.0} s", o.seconds);
    assert!(o.broken.is_empty(), "broken: {:?}", o.broken);
    assert_eq!(o.unreached, vec!["restored from a backup".to_string()]);
    // 1,353,440 before a claim's holder could give its own claim up as unknown (give-up-unknown);
    // 1,568,928 before a cancel raised the run's revision (as every committed run write does).
    assert_eq!(o.unique_states, 1_755_516, "the process bound's state count changed");
}
