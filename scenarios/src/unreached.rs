//! Why a transition of the model's denominator goes unreached: each [`Reason`] names a set of
//! transitions (by their class's factors and kind) and says why a run of the matrix or the
//! schedules may not exercise them, on one of two grounds: the fp_* functions refuse the step the
//! spec allows, or only Model-paths-db's restore on a second database arranges it (both are played by
//! Model-paths-db where the database allows, so on the harness's own servers no reason applies). A reason is a claim about the protocol, PostgreSQL and
//! the harness's experiments and schedules; each one's text says what it rests on. The transitions
//! no reason covers are listed as such (no run reached them, and nothing known rules them out):
//! they are what `schedules run --steer` aims at.

use std::fmt::Write as _;

/// A transition's line, read back into its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition<'a> {
    pub kind: &'a str,
    pub lease: &'a str,
    pub run: &'a str,
    pub op: &'a str,
    pub other_in_flight: bool,
    pub open: bool,
    pub stale: bool,
}

/// A line of `transitions.txt` as its fields; `None` for a line of another shape.
pub fn parse(line: &str) -> Option<Transition<'_>> {
    let (class, kind) = line.rsplit_once(" | ")?;
    let field = |name: &str| class.split(' ').find_map(|f| f.strip_prefix(name)?.strip_prefix('='));
    Some(Transition {
        kind,
        lease: field("lease")?,
        run: field("run")?,
        op: field("op")?,
        other_in_flight: field("other-in-flight")? == "true",
        open: field("open")? == "true",
        stale: field("stale")? == "true",
    })
}

/// Why no run reaches a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grounds {
    /// The reference's fenced functions (the write path every run uses) refuse a step the model's
    /// action, as the spec's, allows.
    Refused,
    /// Only Model-paths-db's restore on a second database of the row's server arranges it.
    RestoredOnly,
}

impl Grounds {
    pub fn label(self) -> &'static str {
        match self {
            Grounds::Refused => "the reference refuses it",
            Grounds::RestoredOnly => "only Model-paths-db's restore arranges it",
        }
    }
}

/// A reason some transitions go unreached.
pub struct Reason {
    pub id: &'static str,
    pub grounds: Grounds,
    /// Which transitions, in words.
    pub which: &'static str,
    pub why: &'static str,
    pub applies: fn(&Transition) -> bool,
}

pub const REASONS: &[Reason] = &[
    Reason {
        id: "pending-run-with-operations",
        grounds: Grounds::RestoredOnly,
        which: "any step while the run is pending and has an operation (acted on, or in flight beside)",
        why: "an operation is planned only by a protected commit of a running run, and a run never returns to \
              pending but by a restore from a backup older than its start, whose recovery registers unknown the \
              operations the tools hold. The harness's N-restore backs up a run that is already running; Model-paths-db's \
              driver restores each such path's run to its rows as created on a second database of the row's \
              server and runs the reference's recovery there, so these go unreached only where it cannot: a team's \
              database (a schema, where the harness adds no database), or a run without Model-paths-db",
        applies: |t| t.run == "pending" && (t.op != "-" || t.other_in_flight),
    },
    Reason {
        id: "takeover-of-a-final-run",
        grounds: Grounds::Refused,
        which: "a takeover of the lease of a succeeded or cancelled run",
        why: "fp_lease_acquire takes no lease of a succeeded, failed or cancelled run (migration 0002), while the \
              spec's takeover and the model's read no run status; the rows and the schedules write through the \
              fp_* functions (the default write path). Model-paths-db's driver plays these paths with the spec's own \
              statements (protocol/src/sql.rs, LEASE_ACQUIRE) as the direct login of the harness's clusters, so \
              they go unreached only where it cannot: a team's database without that login, or a run without Model-paths-db",
        applies: |t| t.kind == "acquire" && matches!(t.run, "succeeded" | "cancelled" | "failed"),
    },
];

/// The reason `line` goes unreached, if one is known.
pub fn reason_of(line: &str) -> Option<&'static Reason> {
    let t = parse(line)?;
    REASONS.iter().find(|r| (r.applies)(&t))
}

/// The reasons as a Markdown table, each with how many of the model's transitions it covers (the
/// generated block `coverage-reasons` of docs/model.md).
pub fn markdown() -> String {
    let all = fenceproof_model::coverage::denominator();
    let mut s = String::from("| reason | grounds | transitions | which, and why |\n|---|---|---|---|\n");
    for r in REASONS {
        let n = all.iter().filter(|l| reason_of(l).is_some_and(|x| x.id == r.id)).count();
        let _ = writeln!(s, "| `{}` | {} | {n} | {}: {} |", r.id, r.grounds.label(), r.which, r.why);
    }
    let rest = all.iter().filter(|l| reason_of(l).is_none()).count();
    let _ = writeln!(
        s,
        "| (none) | | {rest} | no reason is established: reachable as far as is known, the ones `schedules run --steer` aims at |"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_denominator_parses_and_every_reason_covers_some() {
        let all = fenceproof_model::coverage::denominator();
        assert!(all.iter().all(|l| parse(l).is_some()));
        for r in REASONS {
            assert!(all.iter().any(|l| reason_of(l).is_some_and(|x| x.id == r.id)), "{} covers nothing", r.id);
        }
    }

    #[test]
    fn a_reason_is_read_from_the_class() {
        let open_claim = "lease=live run=running op=prepared other-in-flight=false open=true stale=false | claim";
        assert!(reason_of(open_claim).is_none(), "Model-paths holds a validated commit open beside a claim");
        let pending = "lease=free run=pending op=unknown other-in-flight=false open=false stale=false | reconcile";
        assert_eq!(reason_of(pending).map(|r| r.id), Some("pending-run-with-operations"));
        let final_takeover = "lease=expired run=succeeded op=- other-in-flight=false open=false stale=false | acquire";
        assert_eq!(reason_of(final_takeover).map(|r| r.grounds), Some(Grounds::Refused));
        let plain = "lease=live run=running op=- other-in-flight=false open=false stale=false | renew";
        assert!(reason_of(plain).is_none());
    }
}
