//! Trace validation on histories written by hand: a legal run is explained step by step, and each
//! one-place bug of the spec's warnings leaves a commit the model cannot explain, named by its seq.

use fenceproof_model::config::Ablation;
use fenceproof_model::coverage::{denominator, key, observable, LeaseClass};
use fenceproof_model::state::OpStatus;
use fenceproof_model::trace::{validate, validate_with, Call, Change, Env, Outcome, Table, Unexplained};
use serde_json::{json, Value};

const RUN: &str = "11111111-2222-3333-4444-555555555555";
const S: i64 = 1_000_000;

/// A history under construction: the rows as they are, and the changes so far.
struct H {
    run: Value,
    lease: Value,
    ops: std::collections::BTreeMap<String, Value>,
    out: Vec<Change>,
    xid: u32,
}

fn time(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us).unwrap().to_rfc3339()
}

impl H {
    fn new() -> H {
        let run = json!({"run_id": RUN, "status": "pending", "revision": 0});
        let lease = json!({"run_id": RUN, "owner": null, "epoch": 0, "expires_at": time(0)});
        let mut h = H { run: Value::Null, lease: Value::Null, ops: Default::default(), out: vec![], xid: 0 };
        h.txn("fenceproof-control", 0, 1, vec![(Table::Runs, None, Some(run)), (Table::Leases, None, Some(lease))]);
        h
    }

    /// One transaction of `writer`, begun at `b` s and committed at `a` s.
    fn txn(&mut self, writer: &str, b: i64, a: i64, rows: Vec<(Table, Option<Value>, Option<Value>)>) {
        self.xid += 1;
        for (table, old, new) in rows {
            let op = match (&old, &new) {
                (None, _) => "INSERT",
                (_, None) => "DELETE",
                _ => "UPDATE",
            };
            self.out.push(Change {
                seq: self.out.len() as i64 + 1,
                xid: self.xid.to_string(),
                table,
                op: op.into(),
                writer: writer.into(),
                began: b * S,
                at: a * S,
                old,
                new: new.clone(),
            });
            match (table, new) {
                (Table::Runs, Some(v)) => self.run = v,
                (Table::Leases, Some(v)) => self.lease = v,
                (Table::Operations, Some(v)) => {
                    self.ops.insert(v["operation_id"].as_str().unwrap().to_string(), v);
                }
                _ => {}
            }
        }
    }

    fn lease_to(&mut self, writer: &str, b: i64, a: i64, owner: Option<&str>, epoch: i64, expires: i64) {
        let old = self.lease.clone();
        let new = json!({"run_id": RUN, "owner": owner, "epoch": epoch, "expires_at": time(expires * S)});
        self.txn(writer, b, a, vec![(Table::Leases, Some(old), Some(new))]);
    }

    fn run_to(&mut self, writer: &str, b: i64, a: i64, status: &str, revision: i64) {
        let old = self.run.clone();
        let new = json!({"run_id": RUN, "status": status, "revision": revision});
        self.txn(writer, b, a, vec![(Table::Runs, Some(old), Some(new))]);
    }

    fn plan(&mut self, writer: &str, b: i64, a: i64, op: &str) {
        let old = self.run.clone();
        let rev = old["revision"].as_i64().unwrap() + 1;
        let new = json!({"run_id": RUN, "status": "running", "revision": rev});
        let row = json!({"operation_id": op, "run_id": RUN, "status": "prepared", "revision": 0});
        self.txn(writer, b, a, vec![(Table::Runs, Some(old), Some(new)), (Table::Operations, None, Some(row))]);
    }

    fn op_to(&mut self, writer: &str, b: i64, a: i64, op: &str, to: (&str, Option<&str>, Option<i64>)) {
        let (status, owner, until) = to;
        let old = self.ops[op].clone();
        let rev = old["revision"].as_i64().unwrap() + 1;
        let new = json!({"operation_id": op, "run_id": RUN, "status": status, "revision": rev,
                         "dispatch_owner": owner, "dispatch_until": until.map(|u| time(u * S))});
        self.txn(writer, b, a, vec![(Table::Operations, Some(old), Some(new))]);
    }

    fn first_unexplained(&self, env: &Env) -> Option<(i64, String)> {
        self.first(env).map(|u| (u.seq, format!("{} / {}", u.observed, u.allowed)))
    }

    fn first(&self, env: &Env) -> Option<Unexplained> {
        validate(&self.out, env).unexplained.first().cloned()
    }
}

/// What the model answered to the step of this kind, in the finding `u`.
fn answer<'a>(u: &'a Unexplained, kind: &str) -> Vec<&'a Outcome> {
    u.tried.iter().filter(|t| t.kind == kind).map(|t| &t.outcome).collect()
}

/// The model refuses `kind` here: it is not enabled (after its hidden steps, if any).
fn refused(u: &Unexplained, kind: &str, step: &str) -> bool {
    answer(u, kind).iter().all(|o| matches!(o, Outcome::NotEnabled { step: s, .. } if *s == step))
        && !answer(u, kind).is_empty()
}

/// The model takes `kind` here, and its effect is not the commit's.
fn differs(u: &Unexplained, kind: &str) -> bool {
    answer(u, kind).iter().any(|o| matches!(o, Outcome::Differs { .. }))
}

fn env() -> Env {
    Env { control: vec!["fenceproof-control".into()], ..Env::default() }
}

/// A legal run: A takes the lease, starts, plans an operation, a dispatcher claims and settles it,
/// A renews and completes and releases.
fn legal() -> H {
    let mut h = H::new();
    h.lease_to("A", 2, 2, Some("A"), 1, 12);
    h.run_to("A", 3, 3, "running", 1);
    h.plan("A", 4, 4, "op-1");
    h.op_to("D", 5, 5, "op-1", ("dispatching", Some("D"), Some(20)));
    h.op_to("D", 6, 6, "op-1", ("succeeded", None, None));
    h.lease_to("A", 7, 7, Some("A"), 1, 17);
    h.run_to("A", 8, 8, "succeeded", 3);
    h.lease_to("A", 9, 9, None, 1, 9);
    h
}

#[test]
fn a_legal_history_is_explained_step_by_step() {
    let h = legal();
    let r = validate(&h.out, &env());
    assert!(r.holds(), "{:?}", r.unexplained);
    let kinds: Vec<&str> = r.steps.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, ["acquire", "commit", "commit", "plan", "claim", "write-result", "renew", "commit", "release"]);
    assert_eq!(r.environment, 2);
}

#[test]
fn a_legal_history_exercises_transitions_of_the_denominator() {
    let r = validate(&legal().out, &env());
    let claim = r.steps.iter().find(|s| s.kind == "claim").expect("a claim step");
    assert_eq!(claim.class.op, Some(OpStatus::Prepared), "the claim acts on its prepared operation");
    let renew = r.steps.iter().find(|s| s.kind == "renew").expect("a renewal step");
    assert_eq!(renew.class.op, None, "a renewal acts on no operation");
    let all = denominator();
    let keys: Vec<String> = r.steps.iter().filter_map(|s| s.transition()).collect();
    assert_eq!(keys.len(), 8, "every step but the intent's insert is a transition");
    assert_eq!(keys[0], key(&r.steps[0].class, "acquire"), "a transition is its class's line");
    assert!(r.steps.iter().any(|s| s.kind == "plan" && observable(s.kind).is_none()));
    for k in keys {
        assert!(all.contains(k.as_str()), "{k} is not a transition of model/transitions.txt");
    }
}

#[test]
fn a_takeover_after_expiry_is_explained_and_the_old_owner_is_then_refused() {
    let mut h = H::new();
    h.lease_to("A", 2, 2, Some("A"), 1, 5);
    h.run_to("A", 3, 3, "running", 1);
    h.lease_to("B", 6, 6, Some("B"), 2, 16);
    h.run_to("B", 7, 7, "running", 2);
    assert_eq!(h.first_unexplained(&env()), None);
    h.run_to("A", 8, 8, "running", 3);
    let u = h.first(&env()).expect("A's stale commit");
    assert_eq!(u.seq, h.out.len() as i64, "{u:?}");
    // A locks and validates; its validation finds B's lease, so the model has no commit of A.
    let after = answer(&u, "commit");
    assert!(
        after.len() == 3
            && after.iter().all(|o| **o == Outcome::NotEnabled { step: "commit", after: vec!["lock", "validate"] }),
        "{u:?}"
    );
}

/// What the model answers, for a finding.
type Says = fn(&Unexplained) -> bool;

#[test]
fn each_one_place_bug_is_a_commit_the_model_cannot_explain() {
    type Bug = fn(&mut H);
    let bugs: &[(&str, Bug, Says)] = &[
        // The rule the model names: the one its weak spot breaks once the refusing mechanism is gone.
        (
            "takeover of a live lease",
            |h| h.lease_to("B", 3, 3, Some("B"), 2, 13),
            |u| refused(u, "acquire", "acquire") && u.rules == ["lease.acquire-free-or-expired"],
        ),
        (
            "renewal of an expired lease",
            |h| h.lease_to("A", 20, 20, Some("A"), 1, 30),
            |u| differs(u, "renew") && u.rules == ["lease.renew-unexpired"],
        ),
        (
            "release that zeroes the epoch",
            |h| h.lease_to("A", 3, 3, None, 0, 3),
            |u| differs(u, "release") && u.rules == ["lease.epoch-plus-one"],
        ),
        ("epoch that skips", |h| h.lease_to("B", 20, 20, Some("B"), 5, 30), |u| differs(u, "acquire")),
        ("owner changed within an epoch", |h| h.lease_to("B", 20, 20, Some("B"), 1, 30), |u| differs(u, "acquire")),
        ("takeover for another owner", |h| h.lease_to("B", 20, 20, Some("C"), 2, 30), |u| differs(u, "acquire")),
        ("commit on an expired lease", |h| h.run_to("A", 20, 20, "running", 2), |u| refused(u, "commit", "commit")),
        ("blind revision overwrite", |h| h.run_to("A", 3, 3, "running", 7), |u| differs(u, "commit")),
        (
            "worker cancels",
            |h| h.run_to("A", 3, 3, "cancelled", 2),
            |u| differs(u, "commit") && answer(u, "cancel").is_empty(),
        ),
        (
            "intent outside the protected transaction",
            |h| {
                let row = json!({"operation_id": "op-9", "run_id": RUN, "status": "prepared", "revision": 0});
                h.txn("A", 3, 3, vec![(Table::Operations, None, Some(row))]);
            },
            |u| differs(u, "plan"),
        ),
    ];
    for (name, bug, says) in bugs {
        let mut h = H::new();
        h.lease_to("A", 1, 1, Some("A"), 1, 11);
        h.run_to("A", 2, 2, "running", 1);
        assert_eq!(h.first_unexplained(&env()), None, "{name}: the prefix");
        bug(&mut h);
        let u = h.first(&env()).unwrap_or_else(|| panic!("{name}: explained"));
        assert_eq!(u.seq, h.out.len() as i64, "{name}: {u:?}");
        assert!(says(&u), "{name}: {u:?}");
    }
}

/// Trace validation asks the model's own guards and effects: a model with one of them removed
/// accepts what the protocol's model refuses, or refuses it by the rule the removal breaks.
#[test]
fn a_weaker_model_changes_what_trace_validation_accepts() {
    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.lease_to("A", 3, 3, None, 0, 3);
    let zeroed = |a: &[Ablation]| validate_with(&h.out, &env(), a).unexplained;
    assert_eq!(zeroed(&[]).len(), 1, "the protocol's release keeps the epoch");
    assert!(zeroed(&[Ablation::ReleaseZeroesEpoch]).is_empty(), "{:?}", zeroed(&[Ablation::ReleaseZeroesEpoch]));

    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.lease_to("A", 20, 20, Some("A"), 1, 30);
    let renewed = |a: &[Ablation]| validate_with(&h.out, &env(), a).unexplained;
    assert!(differs(&renewed(&[])[0], "renew"), "the renewal's guard refuses an expired lease");
    let weak = renewed(&[Ablation::RenewWithoutExpiry]);
    let rule = answer(&weak[0], "renew");
    assert_eq!(rule, [&Outcome::Breaks { rule: "lease.renew-unexpired" }], "{weak:?}");

    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    h.run_to("fenceproof-control", 4, 4, "cancelled", 3);
    h.op_to("D", 9, 9, "op-1", ("dispatching", Some("D"), Some(30)));
    let claimed = |a: &[Ablation]| validate_with(&h.out, &env(), a).unexplained;
    assert!(refused(&claimed(&[])[0], "claim", "claim"), "{:?}", claimed(&[]));
    let weak = claimed(&[Ablation::ClaimWithoutRunStatus]);
    assert_eq!(answer(&weak[0], "claim"), [&Outcome::Breaks { rule: "claim.prepared-of-live-runs" }], "{weak:?}");
}

#[test]
fn ledger_bugs_are_unexplained() {
    let mut h = legal();
    h.op_to("D", 10, 10, "op-1", ("prepared", None, None));
    let u = h.first(&env()).expect("an operation back to prepared");
    assert_eq!(u.seq, h.out.len() as i64);
    assert!(u.tried.iter().all(|t| !matches!(t.outcome, Outcome::Breaks { .. })), "no step of the model: {u:?}");

    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    h.op_to("D", 4, 4, "op-1", ("dispatching", Some("D"), Some(30)));
    h.op_to("R", 5, 5, "op-1", ("unknown", None, None));
    let u = h.first(&env()).expect("a live claim marked unknown");
    assert!(refused(&u, "mark-unknown", "mark-unknown") && u.allowed.contains("was live until"), "{u:?}");

    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    h.run_to("fenceproof-control", 4, 4, "cancelled", 3);
    h.op_to("D", 9, 9, "op-1", ("dispatching", Some("D"), Some(30)));
    let u = h.first(&env()).expect("a claim of a cancelled run's operation");
    assert!(refused(&u, "claim", "claim"), "{u:?}");
}

/// A claim whose transaction began before the run's final write could be visible to it (within
/// `VISIBLE_AFTER_US`) read the run as it was: the model's claim of a running run explains it. The
/// same claim a few seconds later is refused.
#[test]
fn a_claim_racing_the_runs_final_write_is_judged_by_what_it_could_see() {
    let history = |claim_at: i64| {
        let mut h = H::new();
        h.lease_to("A", 1, 1, Some("A"), 1, 30);
        h.run_to("A", 2, 2, "running", 1);
        h.plan("A", 3, 3, "op-1");
        h.run_to("A", 4, 4, "succeeded", 3);
        h.op_to("D", claim_at, claim_at, "op-1", ("dispatching", Some("D"), Some(40)));
        h
    };
    assert_eq!(history(4).first_unexplained(&env()), None, "began as the final write committed");
    let late = history(9).first(&env()).expect("a claim of a finished run");
    assert!(refused(&late, "claim", "claim"), "{late:?}");
}

#[test]
fn a_moved_clock_leaves_time_unjudged_and_a_restore_allows_lost_commits() {
    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.lease_to("B", 3, 3, Some("B"), 2, 13);
    assert!(h.first_unexplained(&env()).is_some());
    let moved = Env { clock_moved_back: true, ..env() };
    assert_eq!(h.first_unexplained(&moved), None);

    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.run = json!({"run_id": RUN, "status": "pending", "revision": 0});
    h.run_to("A", 3, 3, "running", 1);
    assert!(h.first_unexplained(&env()).is_some_and(|(_, w)| w.contains("recorded commit")));
    let restored = Env { rows_may_roll_back: true, ..env() };
    assert_eq!(h.first_unexplained(&restored), None);
}

#[test]
fn the_claim_holder_may_give_its_claim_up_as_unknown_before_it_expires() {
    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    h.op_to("D", 4, 4, "op-1", ("dispatching", Some("D"), Some(30)));
    h.op_to("D", 5, 5, "op-1", ("unknown", None, None));
    h.op_to("R", 6, 6, "op-1", ("succeeded", None, None));
    assert_eq!(h.first_unexplained(&env()), None);
    let kinds: Vec<&str> = validate(&h.out, &env()).steps.iter().map(|s| s.kind).collect();
    assert_eq!(kinds[kinds.len() - 3..], ["claim", "give-up-unknown", "reconcile"], "the holder's own step");
}

#[test]
fn a_retry_that_leaves_an_operation_unknown_may_keep_its_revision_but_never_lower_it() {
    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    h.op_to("D", 4, 4, "op-1", ("dispatching", Some("D"), Some(30)));
    h.op_to("D", 5, 5, "op-1", ("unknown", None, None));
    let old = h.ops["op-1"].clone();
    let mut same = old.clone();
    same["revision"] = json!(2);
    h.txn("R", 6, 6, vec![(Table::Operations, Some(old.clone()), Some(same))]);
    assert_eq!(h.first_unexplained(&env()), None);
    let mut lower = old.clone();
    lower["revision"] = json!(1);
    h.txn("R", 7, 7, vec![(Table::Operations, Some(old), Some(lower))]);
    assert!(h.first_unexplained(&env()).is_some_and(|(_, w)| w.contains("raises the operation's revision")));
}

#[test]
fn a_cancel_is_one_transition_though_it_cancels_operations_too() {
    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    let (run, op) = (h.run.clone(), h.ops["op-1"].clone());
    let (mut run2, mut op2) = (run.clone(), op.clone());
    run2["status"] = json!("cancelled");
    run2["revision"] = json!(3);
    op2["status"] = json!("cancelled");
    op2["revision"] = json!(1);
    let rows = vec![(Table::Runs, Some(run), Some(run2)), (Table::Operations, Some(op), Some(op2))];
    h.txn("control-api", 4, 4, rows);
    let env = Env { control_prefixes: vec!["control-".into()], ..env() };
    let r = validate(&h.out, &env);
    assert!(r.holds(), "{:?}", r.unexplained);
    let cancels: Vec<String> = r.steps.iter().filter(|s| s.kind == "cancel").filter_map(|s| s.transition()).collect();
    assert_eq!(cancels.len(), 1, "the run's cancel is the transition: {cancels:?}");
    assert!(cancels[0].contains("run=running op=-"), "{}", cancels[0]);
    assert_eq!(r.steps.iter().filter(|s| s.kind == "cancel").count(), 2, "both changes are explained");
}

/// A session writes under its own owner id; the statements that renew or release a lease, and
/// the one that writes a claim's result, name that owner (§05.2, §09.3). Another session's
/// renewal, release or result matches no row, so a history that shows one is not the protocol's.
#[test]
fn only_the_owner_renews_or_releases_and_only_the_claim_holder_writes_its_result() {
    type Bug = fn(&mut H);
    let bugs: &[(&str, Bug, &str)] = &[
        ("another session renews", |h| h.lease_to("B", 3, 3, Some("A"), 1, 13), "renew"),
        ("another session releases", |h| h.lease_to("B", 3, 3, None, 1, 3), "release"),
        (
            "another dispatcher writes the result",
            |h| h.op_to("E", 6, 6, "op-1", ("succeeded", None, None)),
            "write-result",
        ),
    ];
    for (name, bug, kind) in bugs {
        let mut h = H::new();
        h.lease_to("A", 1, 1, Some("A"), 1, 11);
        h.run_to("A", 2, 2, "running", 1);
        if name.contains("result") {
            h.plan("A", 4, 4, "op-1");
            h.op_to("D", 5, 5, "op-1", ("dispatching", Some("D"), Some(20)));
        }
        assert_eq!(h.first_unexplained(&env()), None, "{name}: the prefix");
        bug(&mut h);
        let u = h.first(&env()).unwrap_or_else(|| panic!("{name}: explained"));
        assert_eq!(u.seq, h.out.len() as i64, "{name}: {u:?}");
        // The model takes the step, and it changes no row: the statement names its owner.
        assert!(differs(&u, kind), "{name}: {u:?}");
    }
}

/// The control plane's cancel of the planned run, at these new revisions of the run and its
/// prepared operation (they were at 2 and 0); what trace validation finds.
fn cancel_at(run_revision: i64, op_revision: i64) -> Vec<Unexplained> {
    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 11);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    let (run, op) = (h.run.clone(), h.ops["op-1"].clone());
    let (mut run2, mut op2) = (run.clone(), op.clone());
    run2["status"] = json!("cancelled");
    run2["revision"] = json!(run_revision);
    op2["status"] = json!("cancelled");
    op2["revision"] = json!(op_revision);
    h.txn("control-api", 4, 4, vec![(Table::Runs, Some(run), Some(run2)), (Table::Operations, Some(op), Some(op2))]);
    let env = Env { control_prefixes: vec!["control-".into()], ..env() };
    validate(&h.out, &env).unexplained
}

/// A cancel raises the run's and each cancelled operation's revision by one, like every
/// committed write; a cancel that leaves a revision where it was is not the protocol's.
#[test]
fn a_cancel_raises_the_revisions_it_writes() {
    assert!(cancel_at(3, 1).is_empty(), "{:?}", cancel_at(3, 1));
    // The model's cancel raises the run's revision: one that keeps it is not its step (nor is the
    // operations' part of that cancel, which the model takes with the run's in one step).
    let run_kept = cancel_at(2, 1);
    let revisions = |u: &Unexplained| {
        answer(u, "cancel").iter().find_map(|o| match o {
            Outcome::Differs { model, observed } => Some((model.revision, observed.revision)),
            _ => None,
        })
    };
    assert_eq!(run_kept.iter().map(revisions).collect::<Vec<_>>(), [Some((1, 0)), Some((1, 0))], "{run_kept:?}");
    let op_kept = cancel_at(3, 0);
    assert!(
        op_kept.len() == 1 && op_kept[0].tried.is_empty() && op_kept[0].allowed.contains("revision"),
        "{op_kept:?}"
    );
}

/// The class factors a history gives a step, read as the step's own guard proves them: a step that
/// needs the lease row (here a renewal) never commits inside another process's validated commit,
/// and a process's heartbeat is not "another process" beside its own protected commit; a
/// renewal's lease was live at its statement even when its commit lands after the old term's end.
/// A claim inside another process's open commit counts that commit as open; a control-plane
/// cancel is no validated commit.
#[test]
fn the_class_of_a_step_reads_its_factors_as_its_guard_proves_them() {
    let mut h = H::new();
    h.lease_to("A", 1, 1, Some("A"), 1, 10);
    h.run_to("A", 2, 2, "running", 1);
    h.plan("A", 3, 3, "op-1");
    h.plan("A", 4, 4, "op-2");
    // A's save is open from 5 to 8; its heartbeat renews at 6, a dispatcher claims op-1 at 7.
    let (run, mut saved) = (h.run.clone(), h.run.clone());
    saved["revision"] = json!(4);
    h.lease_to("A", 6, 6, Some("A"), 1, 15);
    h.op_to("D", 7, 7, "op-1", ("dispatching", Some("D"), Some(30)));
    h.txn("A", 5, 8, vec![(Table::Runs, Some(run), Some(saved))]);
    // A renewal that began at 14, on a lease live until 15, committed at 16.
    h.lease_to("A", 14, 16, Some("A"), 1, 26);
    let r = validate(&h.out, &env());
    assert!(r.holds(), "{:?}", r.unexplained);
    let renewals: Vec<_> = r.steps.iter().filter(|s| s.kind == "renew").collect();
    assert_eq!(renewals.len(), 2);
    assert!(renewals.iter().all(|s| !s.class.validated_open), "a heartbeat beside its own commit: {renewals:?}");
    assert!(renewals.iter().all(|s| s.class.lease == LeaseClass::Live), "{renewals:?}");
    let claim = r.steps.iter().find(|s| s.kind == "claim").expect("the claim");
    assert!(claim.class.validated_open, "the claim committed inside A's commit: {claim:?}");
    let all = denominator();
    for k in r.steps.iter().filter_map(|s| s.transition()) {
        assert!(all.contains(k.as_str()), "{k} is not a transition of model/transitions.txt");
    }
    // The dispatcher claims op-2 at 10 while the control plane's cancel is open (9 to 11).
    let (run, mut cancelled) = (h.run.clone(), h.run.clone());
    cancelled["status"] = json!("cancelled");
    cancelled["revision"] = json!(5);
    h.op_to("D", 10, 10, "op-2", ("dispatching", Some("D"), Some(30)));
    h.txn("control-api", 9, 11, vec![(Table::Runs, Some(run), Some(cancelled))]);
    let env = Env { control_prefixes: vec!["control-".into()], ..env() };
    let r = validate(&h.out, &env);
    let claims: Vec<_> = r.steps.iter().filter(|s| s.kind == "claim").collect();
    assert!(!claims[1].class.validated_open, "a cancel validates no lease: {:?}", claims[1]);
}

#[test]
fn a_second_resource_for_one_operation_is_no_step_of_the_model_even_after_a_restore() {
    let h = legal();
    let call = |at: i64| Call { operation_id: "op-1".into(), at };
    // The dispatcher's one creation, after its claim: a step.
    let once = Env { calls: vec![call(5)], ..env() };
    assert_eq!(h.first_unexplained(&once), None);
    // A second resource for op-1, after a restore whose history lost the first claim (the
    // restore-without-recovery weak spot): named, though the rows may have rolled back.
    let twice = Env { calls: vec![call(5), call(8)], rows_may_roll_back: true, ..env() };
    let (seq, why) = h.first_unexplained(&twice).expect("a second resource is unexplained");
    assert_eq!(seq, 0, "the tools' ledger, not a commit");
    assert!(why.contains("second resource") && why.contains("op-1"), "{why}");
    // After a promotion the deployment's failover contract decides, not the model's bound.
    let promoted = Env { promoted: true, ..twice };
    assert_eq!(h.first_unexplained(&promoted), None);
}
