//! Whether a committed change is a step of the model, asked of the model itself: the change's
//! rows before and after are abstracted to the model's state ([`super::scene`]), each action that
//! could have written that row is tried there (with the hidden steps it needs first: a protected
//! commit locks and validates, a result follows its call), and the change is explained when the
//! model enables the action and its effect leaves the rows as the commit did, with every invariant
//! of the model holding after it. No guard is written here: what is enabled, what follows and what
//! breaks a rule is the model's `enabled`, `step::next` and `properties`.

use serde::Serialize;

use super::history::{Change, Env, Table, Txn};
use super::rows::{short, Rows};
use super::scene::{self, Clock, Holds, RunRows, View};
use crate::action::Action;
use crate::config::Config;
use crate::state::{RunStatus, State, Write};
use crate::ProtocolModel;

/// The time between a commit and its becoming visible that a claim is granted (a commit's WAL flush
/// follows its deferred triggers): a cancel counts as seen by a claim only when it committed this
/// long before the claim's transaction began.
pub const VISIBLE_AFTER_US: i64 = 1_000_000;

/// One action the model was asked, and what it answered.
#[derive(Clone, Debug, Serialize)]
pub struct Tried {
    /// The step's kind, as a history names it (`commit`, `renew`, …).
    pub kind: &'static str,
    /// The model's action (the last of its steps).
    pub action: Action,
    pub outcome: Outcome,
}

/// Why a tried action does not explain a change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// The model does not enable `step` in any state the rows allow, after the hidden steps
    /// `after` (a protected commit locks and validates first).
    NotEnabled { step: &'static str, after: Vec<&'static str> },
    /// The model takes it, and leaves the rows otherwise than the commit did.
    Differs { model: View, observed: View },
    /// The model takes it with this effect, and a rule of the model breaks.
    Breaks { rule: &'static str },
}

/// How a change is explained.
pub enum Explained {
    /// By a model action of this kind.
    Step(&'static str),
    /// By none: what was committed, what the model answered, and each action tried.
    No { observed: String, allowed: String, tried: Vec<Tried>, rules: Vec<&'static str> },
}

/// A candidate: the action's kind, what its writer holds, and its steps (hidden ones first).
type Candidate = (&'static str, Holds, Vec<Action>);

const W: u8 = scene::WRITER;

fn commit(w: Write) -> Vec<Action> {
    vec![Action::Lock(W), Action::Validate(W), Action::Commit(W, w)]
}

/// The actions that write a row as `c` did.
fn candidates(c: &Change, control_plane: bool) -> Vec<Candidate> {
    let cancel = ("cancel", Holds::Nothing, vec![Action::Cancel]);
    match (c.table, c.op.as_str()) {
        (Table::Leases, "UPDATE") => vec![
            ("acquire", Holds::Nothing, vec![Action::Acquire(W)]),
            ("renew", Holds::Lease, vec![Action::Renew(W)]),
            ("release", Holds::Lease, vec![Action::Release(W)]),
        ],
        (Table::Runs, "UPDATE") if control_plane => vec![cancel],
        (Table::Runs, "UPDATE") => {
            [Write::Start, Write::Checkpoint, Write::Complete].map(|w| ("commit", Holds::Lease, commit(w))).into()
        }
        (Table::Operations, "INSERT") => vec![("plan", Holds::Lease, commit(Write::Plan(0)))],
        (Table::Operations, "UPDATE") => vec![
            ("claim", Holds::Nothing, vec![Action::Claim(W, 0)]),
            ("write-result", Holds::Claim { called: true }, vec![Action::WriteResult(W)]),
            ("give-up-unknown", Holds::Claim { called: true }, vec![Action::GiveUp(W)]),
            ("give-up-unknown", Holds::Claim { called: false }, vec![Action::GiveUp(W)]),
            ("mark-unknown", Holds::Nothing, vec![Action::MarkUnknown(0)]),
            ("reconcile", Holds::Nothing, vec![Action::Reconcile(0)]),
            cancel,
        ],
        _ => Vec::new(),
    }
}

/// What one change is judged on: the rows before it, the rows it leaves, and the clock.
#[derive(Clone)]
pub struct Ask<'a> {
    pub c: &'a Change,
    pub pre: RunRows,
    pub post: RunRows,
    pub max_epoch: i64,
    pub clock: Clock,
    pub cfg: Config,
}

impl<'a> Ask<'a> {
    /// The question for change `c` of transaction `t`: `rows` is the history before `c`, `start`
    /// the history before `t` (an intent or a cancelled operation is judged with its run's change
    /// in the same transaction, as the model's one step that writes both).
    pub fn new(rows: &Rows, start: &Rows, c: &'a Change, t: &Txn, env: &Env, cfg: &Config) -> Ask<'a> {
        let run = scene::run_of(c);
        let op = (c.table == Table::Operations).then(|| c.key());
        let mut pre = RunRows::of(rows, &run, op.as_deref(), &c.writer);
        let mut post = pre.after(c);
        if c.table == Table::Operations {
            pre.run = start.runs.get(&run).cloned();
            post.run = pre.run.clone();
            for r in t.of(Table::Runs).filter(|r| r.key() == run) {
                post = post.after(r);
            }
        }
        let mut cfg = cfg.clone();
        cfg.caps[0] = scene::capability(c, env);
        let clock = Clock { began: t.began(), at: t.at(), judged: !env.clock_moved_back };
        let max_epoch = rows.max_epoch.get(&run).copied().unwrap_or(0);
        Ask { c, pre, post, max_epoch, clock, cfg }
    }
}

/// The model action explaining `ask`'s change, or what the model answered each one tried.
pub fn explain(ask: &Ask, control_plane: bool) -> Explained {
    let c = ask.c;
    if c.table == Table::Operations && c.op == "UPDATE" {
        if let Some(no) = ledger_revision(ask) {
            return no;
        }
    }
    let Some(observed) = scene::observed(&ask.pre, &ask.post, ask.max_epoch, &c.writer, &ask.clock) else {
        return no(ask, "the rows hold a status word the protocol does not define", Vec::new());
    };
    let mut tried = Vec::new();
    for (kind, holds, steps) in candidates(c, control_plane) {
        match try_candidate(ask, holds, &steps, observed) {
            Ok(()) => return Explained::Step(kind),
            Err(outcome) => tried.push(Tried { kind, action: steps[steps.len() - 1], outcome }),
        }
    }
    if stays_unknown(c) {
        // A reconciler's retry that leaves the operation unknown records its evidence: the
        // model's state does not move (it keeps no evidence and no ledger revision).
        return Explained::Step("reconcile");
    }
    let allowed = if tried.is_empty() {
        "no step of the model writes this row so (only the control plane creates runs; no row is deleted)".into()
    } else {
        render(ask, &tried)
    };
    let rules = diagnose(ask, control_plane, observed, &tried);
    Explained::No { observed: describe(ask), allowed, tried, rules }
}

fn no(ask: &Ask, allowed: &str, tried: Vec<Tried>) -> Explained {
    Explained::No { observed: describe(ask), allowed: allowed.to_string(), tried, rules: Vec::new() }
}

/// The rules an unexplained change breaks, as the model names them: an invariant an asked action
/// broke, and the rule of each of the model's weak spots whose removed mechanism would let the
/// model take the change (the mechanism that refused it). Empty: the model names no rule of its
/// own (the change is simply no step of it).
fn diagnose(ask: &Ask, control_plane: bool, observed: View, tried: &[Tried]) -> Vec<&'static str> {
    let mut rules: Vec<&'static str> = tried
        .iter()
        .filter_map(|t| match t.outcome {
            Outcome::Breaks { rule } => Some(rule),
            _ => None,
        })
        .collect();
    for spot in crate::weak_spots::WEAK_SPOTS {
        let ablations = (spot.config)().ablations;
        if ablations.is_empty() {
            continue;
        }
        let mut weak = ask.clone();
        weak.cfg.ablations = ablations;
        // Without the re-check, a takeover may have evaluated its condition before it waited.
        let mut asked = candidates(ask.c, control_plane);
        if ask.c.table == Table::Leases {
            asked.push(("acquire", Holds::Checked, vec![Action::Acquire(W)]));
        }
        let explains = asked.into_iter().any(|(_, holds, steps)| {
            matches!(try_candidate(&weak, holds, &steps, observed), Ok(()) | Err(Outcome::Breaks { .. }))
        });
        if explains {
            rules.push(spot.breaks);
        }
    }
    rules.sort_unstable();
    rules.dedup();
    rules
}

/// Tries one candidate in every state the rows allow: the first state where the model takes all
/// its steps, leaves the observed rows and keeps its invariants explains the change.
fn try_candidate(ask: &Ask, holds: Holds, steps: &[Action], observed: View) -> Result<(), Outcome> {
    let mut best: Option<Outcome> = None;
    for (pre, observed) in pre_states(ask, holds, steps, observed) {
        let outcome = match run_steps(&ask.cfg, &pre, steps) {
            Err(n) => {
                Outcome::NotEnabled { step: steps[n].kind(), after: steps[..n].iter().map(|a| a.kind()).collect() }
            }
            Ok(post) => {
                let model = scene::modelled(&ask.cfg, &pre, &post);
                // A step that writes no row commits nothing: it is no commit's explanation.
                if model != observed || post.primary == pre.primary {
                    Outcome::Differs { model, observed }
                } else if let Some(rule) = broken(&ask.cfg, &post) {
                    Outcome::Breaks { rule }
                } else {
                    return Ok(());
                }
            }
        };
        // The most telling answer: a broken rule, then a different effect, then a refusal.
        let rank = |o: &Outcome| match o {
            Outcome::Breaks { .. } => 2,
            Outcome::Differs { .. } => 1,
            Outcome::NotEnabled { .. } => 0,
        };
        if best.as_ref().is_none_or(|b| rank(&outcome) > rank(b)) {
            best = Some(outcome);
        }
    }
    Err(best.unwrap_or(Outcome::NotEnabled { step: "a state of the model's bound", after: Vec::new() }))
}

/// The model's states the change may have been taken from. A claim reads its run's status when
/// its transaction began; a run that became final less than [`VISIBLE_AFTER_US`] before may not
/// have been visible to it yet, so the state before the final write is tried too.
fn pre_states(ask: &Ask, holds: Holds, steps: &[Action], observed: View) -> Vec<(State, View)> {
    let mut variants = vec![(ask.pre.clone(), observed)];
    let claims = steps.iter().any(|a| matches!(a, Action::Claim(..)));
    if claims {
        if let Some(run) = ask.pre.run.as_ref().filter(|r| super::rows::terminal(&r.status)) {
            let seen = run.terminal_at.is_some_and(|t| ask.clock.judged && t + VISIBLE_AFTER_US <= ask.clock.began);
            if !seen {
                // The claim read the run as it was before its final write: so does the comparison
                // (the claim itself does not write the run).
                let mut v = ask.pre.clone();
                v.run = Some(super::rows::Run { status: "running".into(), ..run.clone() });
                let mut post = ask.post.clone();
                if post.run == ask.pre.run {
                    post.run = v.run.clone();
                }
                if let Some(seen_so) = scene::observed(&v, &post, ask.max_epoch, &ask.c.writer, &ask.clock) {
                    variants.push((v, seen_so));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (pre, seen_so) in &variants {
        for s in scene::states(&ask.cfg, pre, ask.max_epoch, &ask.c.writer, holds, &ask.clock).into_iter().flatten() {
            out.push((s, *seen_so));
        }
    }
    out
}

/// Takes `steps` in the model from `pre`: each must be enabled where it is taken (`Err`: the
/// index of the first that is not, or that changes nothing).
fn run_steps(cfg: &Config, pre: &State, steps: &[Action]) -> Result<State, usize> {
    let mut s = pre.clone();
    for (n, a) in steps.iter().enumerate() {
        let mut enabled = Vec::new();
        crate::enabled::enabled(cfg, &s, &mut enabled);
        if !enabled.contains(a) {
            return Err(n);
        }
        s = crate::step::next(cfg, &s, *a).ok_or(n)?;
    }
    Ok(s)
}

/// The first invariant of the model that does not hold in `s`.
fn broken(cfg: &Config, s: &State) -> Option<&'static str> {
    let m = ProtocolModel::new(cfg.clone());
    crate::properties::INVARIANTS.iter().find(|i| !(i.holds)(&m, s)).map(|i| i.rule)
}

fn stays_unknown(c: &Change) -> bool {
    let status = |v: &Option<serde_json::Value>| v.as_ref().and_then(|v| v.get("status")).cloned();
    status(&c.old) == Some("unknown".into()) && status(&c.new) == Some("unknown".into())
}

/// The ledger's revision is how the rows count an operation's steps, which the model does not
/// keep: every ledger write raises it by one (a retry that leaves the operation unknown may keep
/// it, never lower it).
fn ledger_revision(ask: &Ask) -> Option<Explained> {
    let (o, n) = (ask.c.old.as_ref()?, ask.c.new.as_ref()?);
    let rev = |v: &serde_json::Value| v.get("revision").and_then(serde_json::Value::as_i64).unwrap_or(0);
    let (a, b) = (rev(o), rev(n));
    if b == a + 1 || (stays_unknown(ask.c) && b >= a) {
        return None;
    }
    Some(no(
        ask,
        "every ledger write raises the operation's revision by one (the rows count the ledger's steps)",
        Vec::new(),
    ))
}

/// The recorded change in words, its values as the rows hold them.
fn describe(ask: &Ask) -> String {
    let c = ask.c;
    let run = short(&scene::run_of(c)).to_string();
    let lease = |r: &RunRows| {
        r.lease.as_ref().map_or("none".into(), |l| {
            format!("{}/epoch {} until {}", l.owner.as_deref().unwrap_or("free"), l.epoch, ts(l.expires))
        })
    };
    let runw = |r: &RunRows| r.run.as_ref().map_or("none".into(), |r| format!("{} r{}", r.status, r.revision));
    let opw = |r: &RunRows| r.op.as_ref().map_or("none".into(), |o| format!("{} r{}", o.status, o.revision));
    let (a, b) = (&ask.pre, &ask.post);
    match c.table {
        Table::Leases => format!("{} {} run {run}'s lease {} → {}", c.writer, c.op, lease(a), lease(b)),
        Table::Runs => format!("{} {} run {run} {} → {}", c.writer, c.op, runw(a), runw(b)),
        Table::Operations => {
            format!(
                "{} {} operation {} {} → {} (run {run} {} → {})",
                c.writer,
                c.op,
                c.key(),
                opw(a),
                opw(b),
                runw(a),
                runw(b)
            )
        }
        Table::Other => format!("{} {} a row the protocol does not define", c.writer, c.op),
    }
}

/// What the model answered, with the terms as the clock reads them.
fn render(ask: &Ask, tried: &[Tried]) -> String {
    let answers: Vec<String> = tried
        .iter()
        .map(|t| match &t.outcome {
            Outcome::NotEnabled { step, after } if after.is_empty() => format!("{}: {step} not enabled", name(t)),
            Outcome::NotEnabled { step, after } => {
                format!("{}: {step} not enabled after {}", name(t), after.join(", "))
            }
            Outcome::Differs { model, .. } => format!("{}: would leave {}", name(t), view(model)),
            Outcome::Breaks { rule } => format!("{}: breaks {rule}", name(t)),
        })
        .collect();
    format!("the model's steps here ({}): {}; the commit left {}", terms(ask), answers.join("; "), observed_view(ask))
}

/// A tried step's name: its kind, and what a commit writes.
fn name(t: &Tried) -> String {
    match t.action {
        Action::Commit(_, w) => format!("{} ({})", t.kind, format!("{w:?}").to_lowercase()),
        _ => t.kind.to_string(),
    }
}

fn observed_view(ask: &Ask) -> String {
    scene::observed(&ask.pre, &ask.post, ask.max_epoch, &ask.c.writer, &ask.clock).map_or("?".into(), |v| view(&v))
}

fn view(v: &View) -> String {
    let run = match v.run {
        RunStatus::Succeeded => "final".to_string(),
        s => format!("{s:?}").to_lowercase(),
    };
    format!(
        "run {run} (+{} revision), lease {:?}/epoch {}{}, operation {:?}{}",
        v.revision,
        v.owner,
        v.epoch,
        if v.term_moved { " with a new term" } else { "" },
        v.op,
        if v.holder != scene::Who::Nobody {
            format!(" held by {:?}, live {}", v.holder, v.claim_live)
        } else {
            String::new()
        }
    )
}

/// The lease's and the claim's terms against the transaction's clock readings.
fn terms(ask: &Ask) -> String {
    let k = &ask.clock;
    let mut out = vec![format!("the transaction ran {} .. {}", ts(k.began), ts(k.at))];
    if let Some(l) = ask.pre.lease.as_ref().filter(|l| l.owner.is_some()) {
        out.push(format!(
            "the lease of {} (epoch {}) {}",
            l.owner.as_deref().unwrap_or(""),
            l.epoch,
            reading(k, l.expires)
        ));
    }
    if let Some(u) = ask.pre.op.as_ref().filter(|o| o.status == "dispatching").and_then(|o| o.until) {
        out.push(format!("the claim {}", reading(k, u)));
    }
    if let Some(r) = ask.pre.run.as_ref() {
        out.push(format!("run {} r{}", r.status, r.revision));
    }
    out.join(", ")
}

fn reading(k: &Clock, t: i64) -> String {
    match k.terms(Some(t)).as_slice() {
        _ if !k.judged => format!("ends {} (time not judged: the server's clock moved back)", ts(t)),
        [0] => format!("had expired at {} before the transaction began", ts(t)),
        [1] => format!("was live until {} at every reading", ts(t)),
        _ => format!("ends {}, within the transaction", ts(t)),
    }
}

/// A database-clock time for messages.
pub fn ts(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us).map(|t| t.format("%H:%M:%S%.6f").to_string()).unwrap_or_default()
}

/// The contract's control plane creates a run (as the model's initial rows: pending) with a free
/// lease. `None`: not a creation.
pub fn create(c: &Change) -> Option<Explained> {
    if c.op != "INSERT" || !matches!(c.table, Table::Runs | Table::Leases) {
        return None;
    }
    let created = crate::state::Rows::created();
    let new = c.new.as_ref()?;
    let fits = match c.table {
        Table::Runs => scene::run_status(new.get("status").and_then(|v| v.as_str()).unwrap_or("")) == Some(created.run),
        _ => new.get("owner").is_none_or(|o| o.is_null()) == created.lease.owner.is_none(),
    };
    Some(if fits {
        Explained::Step("create")
    } else {
        Explained::No {
            observed: format!(
                "{} created {} {} unlike the model's new run",
                c.writer,
                if c.table == Table::Runs { "run" } else { "the lease of run" },
                short(&c.key())
            ),
            allowed: "a new run starts pending with a free lease".into(),
            tried: Vec::new(),
            rules: Vec::new(),
        }
    })
}
