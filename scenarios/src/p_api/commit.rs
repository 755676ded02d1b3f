//! P-api-commit: fp_run_transition, the protected commit of spec §06–§08, probed at its boundaries:
//! owner + epoch + expiry under the lease row lock (on the database clock when it runs), the
//! revision compare-and-set, the from-state of the state machine, that run only; a required result
//! must be this run's own and settled; an intent registers in the same transaction as its
//! checkpoint, a re-registration of the same intent is recognized, and a mismatch commits nothing;
//! every (from, to) pair the state table does not give a worker is refused whatever the caller
//! names, and a final run's lease is never taken again ([`super::forbidden`]).

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use uuid::Uuid;

use super::{lit, op_key, outcome, owner, run_key, uuid, Answer, Prober, LONG_TTL_MS, SHORT_TTL_MS};
use crate::ctx::Ctx;
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::tags::{self, tagged};

pub const TITLE: &str = "Fenced protected commit (fp_run_transition) probed at each rule's boundary";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-api-commit",
    title: TITLE,
    section: "06, 07, 08",
    needs: &[Need::WorkerLogin],
    judges: Judges::Functions,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// An intent to register: operation_id, step, version, tool, digest.
type Intent<'a> = (&'a str, &'a str, i32, &'a str, &'a str);

#[derive(Clone, Copy)]
struct T<'a> {
    run: Uuid,
    owner: &'a str,
    epoch: i64,
    expected: i64,
    from: &'a str,
    to: &'a str,
    require: Option<&'a str>,
    intent: Option<Intent<'a>>,
}

impl T<'_> {
    fn sql(&self, held: bool) -> String {
        let opt = |s: Option<&str>| s.map(lit).unwrap_or_else(|| "NULL".into());
        let who = if held { format!("{} || {{held}}", lit(self.owner)) } else { lit(self.owner) };
        let (op, step, ver, tool, digest, body) = match self.intent {
            Some((op, step, ver, tool, digest)) => {
                (lit(op), lit(step), ver.to_string(), lit(tool), lit(digest), "'{\"probe\": true}'::jsonb".to_string())
            }
            None => ("NULL".into(), "NULL".into(), "NULL".into(), "NULL".into(), "NULL".into(), "NULL".into()),
        };
        format!(
            "SELECT to_jsonb(x) FROM {}fp_run_transition({}, {who}, {}, {}, {}, {}, '{{\"probe\": {}}}'::jsonb, {}, {op}, {step}, {ver}::integer, {tool}, {digest}, {body}) x",
            if held { "held, LATERAL " } else { "" },
            uuid(self.run),
            self.epoch,
            self.expected,
            lit(self.from),
            lit(self.to),
            self.expected + 1,
            opt(self.require),
        )
    }
}

fn is(want: &'static str) -> impl Fn(&Answer) -> bool {
    move |a| outcome(a) == want
}

/// `ok` at `revision`, with `detail` when given.
fn ok_at(revision: i64, detail: Option<&'static str>) -> impl Fn(&Answer) -> bool {
    move |a| match a {
        Ok(rows) if rows.len() == 1 => {
            rows[0]["outcome"] == "ok"
                && rows[0]["revision"].as_i64() == Some(revision)
                && detail.is_none_or(|d| rows[0]["detail"] == d)
        }
        _ => false,
    }
}

fn raised(code: &'static str) -> impl Fn(&Answer) -> bool {
    move |a| matches!(a, Err((c, _)) if c == code)
}

async fn acquire(p: &Prober<'_>, r: Uuid, o: &str, ttl: i64) -> Result<i64, HarnessError> {
    let a = p.call(o, &format!("SELECT to_jsonb(x) FROM fp_lease_acquire({}, {}, {ttl}) x", uuid(r), lit(o))).await?;
    match a {
        Ok(rows) if rows.len() == 1 => Ok(rows[0]["epoch"].as_i64().unwrap_or(-1)),
        other => Err(HarnessError::StepRefused { step: format!("acquire by {o}"), answer: super::show(&other) }),
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let Some(mut p) = Prober::new(ctx) else { return Ok(()) };
    let (r1, r2, r3) = (p.new_run("task-pc-1").await?, p.new_run("task-pc-2").await?, p.new_run("task-pc-3").await?);
    let (a, b) = (owner("a"), owner("b"));
    acquire(&p, r1, &a, LONG_TTL_MS).await?;
    acquire(&p, r2, &a, LONG_TTL_MS).await?;
    let base =
        T { run: r1, owner: &a, epoch: 1, expected: 0, from: "pending", to: "running", require: None, intent: None };
    starts(&mut p, base, r2).await?;
    let save = T { expected: 1, from: "running", to: "running", ..base };
    saves(&mut p, base, save, &b).await?;
    // A required result must exist, belong to this run, and be settled.
    required_results(&mut p, save, r2).await?;
    // Intents: registered with the checkpoint, recognized again, a mismatch commits nothing.
    intents(&mut p, save, r2).await?;
    // Terminal states are final.
    p.probe(
        tags::RUNS_TRANSITION_FROM_STATE,
        "the holder completes the run",
        &a,
        &T { expected: 5, to: "succeeded", ..save }.sql(false),
        ok_at(6, None),
        &[run_key(r1)],
    )
    .await?;
    p.probe(
        tags::RUNS_TERMINAL_FINAL,
        "a save of a succeeded run is refused as invalid_state",
        &a,
        &T { expected: 6, ..save }.sql(false),
        is("invalid_state"),
        &[],
    )
    .await?;
    // Every transition the state table does not give a worker, and no lease on a final run.
    super::forbidden::probe_all(&mut p).await?;
    // Expiry on the database clock, at the moment the function runs.
    expiry(&mut p, base, r3).await?;
    let final_rev: i64 =
        sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1").bind(r1).fetch_one(&p.ctx.pool).await?;
    p.ctx.check(Check::equal(
        tagged(tags::COMMIT_REVISION_CAS, "r1's revision after 6 accepted transitions"),
        final_rev,
        6,
    ));
    p.finish().await
}

/// The holder starts a pending run, and a second one at the same revision (`r2`), which changes
/// that run only.
async fn starts(p: &mut Prober<'_>, base: T<'_>, r2: Uuid) -> Result<(), HarnessError> {
    let a = base.owner;
    p.probe(
        tags::RUNS_START,
        "the holder starts a pending run (revision 0 -> 1)",
        a,
        &base.sql(false),
        ok_at(1, None),
        &[run_key(base.run)],
    )
    .await?;
    p.probe(
        tags::RUNS_START,
        "the holder starts a second run at the same revision, which changes that run only",
        a,
        &T { run: r2, ..base }.sql(false),
        ok_at(1, None),
        &[run_key(r2)],
    )
    .await
}

/// A save commits only under the current owner and epoch, at the current revision, from the
/// state it names, and changes that run only (`b` is another owner id).
async fn saves(p: &mut Prober<'_>, base: T<'_>, save: T<'_>, b: &str) -> Result<(), HarnessError> {
    let a = save.owner;
    let rule = tags::COMMIT_LEASE_OWNER_EPOCH_LIVE;
    p.probe(
        rule,
        "a save under another owner id with the current epoch is refused as lease_lost",
        b,
        &T { owner: b, ..save }.sql(false),
        is("lease_lost"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a save with a stale epoch (0) is refused as lease_lost",
        a,
        &T { epoch: 0, ..save }.sql(false),
        is("lease_lost"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a save with a future epoch (2) is refused as lease_lost",
        a,
        &T { epoch: 2, ..save }.sql(false),
        is("lease_lost"),
        &[],
    )
    .await?;
    let rule = tags::COMMIT_REVISION_CAS;
    p.probe(
        rule,
        "a save at a stale revision (0) is refused as a conflict",
        a,
        &T { expected: 0, ..save }.sql(false),
        is("conflict"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "a save at a future revision (7) is refused as a conflict",
        a,
        &T { expected: 7, ..save }.sql(false),
        is("conflict"),
        &[],
    )
    .await?;
    p.probe(
        tags::RUNS_TRANSITION_FROM_STATE,
        "a start of a running run is refused as invalid_state",
        a,
        &T { expected: 1, ..base }.sql(false),
        is("invalid_state"),
        &[],
    )
    .await?;
    p.probe(
        tags::COMMIT_REVISION_CAS,
        "a save at the current revision commits revision + 1 of that run only (another run is at the same revision)",
        a,
        &save.sql(false),
        ok_at(2, None),
        &[run_key(save.run)],
    )
    .await
}

/// Advancing on a required result: it must exist, belong to this run (not `r2`), and be settled.
async fn required_results(p: &mut Prober<'_>, save: T<'_>, r2: Uuid) -> Result<(), HarnessError> {
    let (r1, a) = (save.run, save.owner);
    p.admin(&format!(
        "INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status, revision)
         VALUES ('pc-settled-{r1}', '{r1}', 'settled', 1, 'idem', 'd', '{{}}', 'succeeded', 3),
                ('pc-unknown-{r1}', '{r1}', 'open', 1, 'idem', 'd', '{{}}', 'unknown', 2),
                ('pc-foreign-{r2}', '{r2}', 'settled', 1, 'idem', 'd', '{{}}', 'succeeded', 3)"
    ))
    .await?;
    let (settled, open, foreign) = (format!("pc-settled-{r1}"), format!("pc-unknown-{r1}"), format!("pc-foreign-{r2}"));
    let need = T { expected: 2, ..save };
    let rule = tags::COMMIT_REQUIRED_RESULT_OWN_SETTLED;
    p.probe(
        rule,
        "advancing on a result that does not exist is refused",
        a,
        &T { require: Some("pc-missing"), ..need }.sql(false),
        is("operation_not_found"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "advancing on another run's result is refused (foreign_operation)",
        a,
        &T { require: Some(&foreign), ..need }.sql(false),
        is("foreign_operation"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "advancing on an unsettled (unknown) result is refused",
        a,
        &T { require: Some(&open), ..need }.sql(false),
        is("operation_not_settled"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "advancing on this run's settled result commits",
        a,
        &T { require: Some(&settled), ..need }.sql(false),
        ok_at(3, None),
        &[run_key(r1)],
    )
    .await
}

/// An intent registers with its checkpoint, is recognized when registered again, and a mismatch
/// (another digest, tool or run — `r2` —, or another id for the same step) commits nothing.
async fn intents(p: &mut Prober<'_>, save: T<'_>, r2: Uuid) -> Result<(), HarnessError> {
    let (r1, a) = (save.run, save.owner);
    let op = format!("pc-intent-{r1}");
    let plan = T { expected: 3, intent: Some((&op, "s1", 1, "idem", "digest-1")), ..save };
    p.probe(
        tags::INTENT_SAME_TRANSACTION,
        "planning a step registers its intent with the checkpoint, as new",
        a,
        &plan.sql(false),
        ok_at(4, Some("new")),
        &[run_key(r1), op_key(&op)],
    )
    .await?;
    p.probe(
        tags::INTENT_SAME_INTENT_RECOGNIZED,
        "planning the same intent again is recognized as already registered",
        a,
        &T { expected: 4, ..plan }.sql(false),
        ok_at(5, Some("already_registered")),
        &[run_key(r1)],
    )
    .await?;
    let rule = tags::INTENT_MISMATCH_COMMITS_NOTHING;
    p.probe(
        rule,
        "the same operation_id with another request digest raises FP001 and commits nothing",
        a,
        &T { expected: 5, intent: Some((&op, "s1", 1, "idem", "digest-2")), ..plan }.sql(false),
        raised("FP001"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "the same operation_id with another tool raises FP001 and commits nothing",
        a,
        &T { expected: 5, intent: Some((&op, "s1", 1, "plain", "digest-1")), ..plan }.sql(false),
        raised("FP001"),
        &[],
    )
    .await?;
    p.probe(
        rule,
        "the same operation_id from another run raises FP001 and commits nothing",
        a,
        &T { run: r2, expected: 1, ..plan }.sql(false),
        raised("FP001"),
        &[],
    )
    .await?;
    let other = format!("pc-other-{r1}");
    p.probe(
        rule,
        "the same (run, step, version) under another operation_id raises FP001 and commits nothing",
        a,
        &T { expected: 5, intent: Some((&other, "s1", 1, "idem", "digest-1")), ..plan }.sql(false),
        raised("FP001"),
        &[],
    )
    .await
}

/// A transition whose statement began before the lease (of `r3`) expired but runs after it is
/// refused; retried with a longer lease while inconclusive (the statement began after the expiry
/// on a loaded machine).
async fn expiry(p: &mut Prober<'_>, base: T<'_>, r3: Uuid) -> Result<(), HarnessError> {
    let a = base.owner;
    let mut expected = 0;
    let mut started = false;
    for ttl in [SHORT_TTL_MS, 2_000, 5_000] {
        p.until("r3's lease to be free or expired", &format!("(SELECT owner IS NULL OR expires_at <= clock_timestamp() FROM worker_leases WHERE run_id = '{r3}'::uuid)")).await?;
        let e = acquire(p, r3, a, ttl).await?;
        let t = if started {
            T { run: r3, epoch: e, expected, from: "running", to: "running", ..base }
        } else {
            T { run: r3, epoch: e, ..base }
        };
        let moment = format!("(SELECT expires_at FROM worker_leases WHERE run_id = '{r3}'::uuid)");
        let rule = tags::COMMIT_LEASE_OWNER_EPOCH_LIVE;
        if let Some(_a) = p
            .probe_held(rule, "a transition whose statement began before the lease expired but runs after it is refused as lease_lost", a, &t.sql(true), &moment, is("lease_lost"), &[])
            .await?
        {
            return p.probe(rule, "a transition on an expired lease is refused as lease_lost", a, &t.sql(false), is("lease_lost"), &[]).await;
        }
        // Inconclusive: whatever the held call did is now the run's state.
        let rev: i64 = sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1")
            .bind(r3)
            .fetch_one(&p.ctx.pool)
            .await?;
        started = rev > 0;
        expected = rev;
    }
    Err(HarnessError::Inconclusive(
        "the expiry probe stayed inconclusive with a 5 s lease (a very loaded machine)".into(),
    ))
}
