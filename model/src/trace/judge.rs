//! The validation loop: every transaction of the history, in commit order, is explained change by
//! change by a model action ([`super::classify`]); the rows follow the committed changes. A change
//! that no action explains is reported, and the rows take the observed values so the rest of the
//! history is still read (the first finding is the one that matters; the count says how many more).

use super::classify;
use super::history::{transactions, Change, Env, Table, Txn};
use super::refine::{self, Ask, Explained};
use super::report::{Report, Step, Unexplained};
use super::rows::Rows;
use crate::config::{Ablation, Config};

/// Validates `changes` (one row's whole history) against the model's actions.
pub fn validate(changes: &[Change], env: &Env) -> Report {
    validate_with(changes, env, &[])
}

/// [`validate`], asking a model with `ablations` removed (what a weaker protocol would accept).
pub fn validate_with(changes: &[Change], env: &Env, ablations: &[Ablation]) -> Report {
    let cfg = super::scene::config(ablations);
    let txns = transactions(changes);
    let overlaps = classify::Overlaps::of(&txns, env);
    let mut rows = Rows::default();
    let mut report = Report { transactions: txns.len(), time_judged: !env.clock_moved_back, ..Report::default() };
    for t in &txns {
        if env.is_control(t.writer()) {
            for c in &t.changes {
                if let Some(kind) = classify::control_kind(c) {
                    report.steps.push(Step { seq: c.seq, kind, class: classify::class(&rows, c, t, &overlaps, kind) });
                }
                rows.apply(c, t.at());
                report.environment += 1;
            }
            continue;
        }
        judge_txn(t, env, &cfg, &overlaps, &mut rows, &mut report);
    }
    super::calls::judge(&rows, env, &mut report);
    report
}

fn judge_txn(t: &Txn, env: &Env, cfg: &Config, overlaps: &classify::Overlaps, rows: &mut Rows, report: &mut Report) {
    let start = rows.clone();
    for c in &t.changes {
        if c.table == Table::Other {
            continue;
        }
        if let Some(stale) = rows.stale(c) {
            if env.rows_may_roll_back {
                report.rollbacks += 1;
                rows.resync(c);
            } else {
                report.unexplained.push(Unexplained {
                    seq: c.seq,
                    writer: c.writer.clone(),
                    observed: stale,
                    allowed: "a row changes only by a recorded commit (no restore or promotion is on the timeline)"
                        .into(),
                    tried: Vec::new(),
                    rules: Vec::new(),
                });
                rows.resync(c);
            }
        }
        let control_plane = env.is_control_plane(&c.writer);
        let created = if control_plane { refine::create(c) } else { None };
        let explained =
            created.unwrap_or_else(|| refine::explain(&Ask::new(rows, &start, c, t, env, cfg), control_plane));
        match explained {
            Explained::Step(kind) => {
                report.explained += 1;
                report.steps.push(Step { seq: c.seq, kind, class: classify::class(rows, c, t, overlaps, kind) });
            }
            Explained::No { observed, allowed, tried, rules } => {
                report.unexplained.push(Unexplained {
                    seq: c.seq,
                    writer: c.writer.clone(),
                    observed,
                    allowed,
                    tried,
                    rules,
                });
            }
        }
        rows.apply(c, t.at());
    }
}
