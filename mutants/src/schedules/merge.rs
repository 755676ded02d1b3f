//! Joining the summaries of `schedules run --shard K/N` runs (one seed, one budget of cases) into
//! the summary one unsharded run would have made: the cases in order, each once; the failure of
//! the first failing case (an unsharded run stops there, so the cases after it are left out); the
//! coverage and the operations counted again over the cases kept.

use super::{Coverage, Summary};

/// The shards' summaries as one, or what makes them not one run (another seed, a shard missing
/// or given twice, a case in two shards).
pub fn merge(parts: Vec<Summary>) -> Result<Summary, String> {
    let Some(first) = parts.first() else { return Err("nothing to merge".into()) };
    let seed = first.seed.clone();
    let (mut shards, mut played, mut failures, mut duration_ms) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for p in parts {
        if p.seed != seed {
            return Err(format!("the shards ran different seeds ({} and {seed})", p.seed));
        }
        shards.extend(p.shards);
        played.extend(p.played);
        failures.extend(p.failure);
        duration_ms += p.duration_ms;
    }
    crate::shard::complete(&shards)?;
    played.sort_by_key(|r| r.case);
    if let Some(w) = played.windows(2).find(|w| w[0].case == w[1].case) {
        return Err(format!("case {} is in two shards", w[0].case));
    }
    let failure = failures.into_iter().min_by_key(|f| f.case);
    if let Some(f) = &failure {
        played.retain(|r| r.case <= f.case);
    }
    Ok(Summary {
        seed,
        cases: played.len() as u32,
        operations: played.iter().map(|r| r.operations).sum(),
        duration_ms,
        coverage: Coverage::of(&played),
        model: super::model_coverage(&played),
        steered: false,
        failure,
        shards,
        played,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{CaseRun, Failure};
    use super::*;

    fn run(case: u32, held: bool) -> CaseRun {
        CaseRun { case, operations: 10, held, reached: vec!["late-result".into()], transitions: vec![], boosts: vec![] }
    }

    fn summary(shard: &str, runs: Vec<CaseRun>) -> Summary {
        let failed = runs.iter().find(|r| !r.held).map(|r| Failure {
            seed: "0x2a".into(),
            case: r.case,
            original_len: 10,
            schedule: vec![],
            failed_checks: vec![],
            log: vec![],
            saved_to: "f.json".into(),
            replay: String::new(),
        });
        Summary {
            seed: "0x2a".into(),
            cases: runs.len() as u32,
            operations: runs.len() * 10,
            duration_ms: 5,
            coverage: Coverage::of(&runs),
            model: Default::default(),
            steered: false,
            failure: failed,
            shards: vec![shard.into()],
            played: runs,
        }
    }

    #[test]
    fn the_first_failing_case_wins_and_the_cases_after_it_are_left_out() {
        let a = summary("1/2", vec![run(1, true), run(3, true), run(5, false)]);
        let b = summary("2/2", vec![run(2, true), run(4, false)]);
        let m = merge(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(m.played.iter().map(|r| r.case).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(m.failure.as_ref().map(|f| f.case), Some(4));
        assert_eq!((m.cases, m.operations, m.coverage.schedules), (4, 40, 4));
        assert!(merge(vec![a.clone(), a.clone()]).unwrap_err().contains("twice"));
        assert!(merge(vec![a]).unwrap_err().contains("2/2 is missing"));
    }
}
