//! The shards of a long search (`--shard K/N`): which items a shard takes (every N-th, from the
//! K-th), and whether the shards a merge is given make one whole run.

/// Whether the item at `index` (0-based) is shard `k`'s of `n` (1-based `k`).
pub fn takes(k: usize, n: usize, index: usize) -> bool {
    n > 0 && index % n == k.saturating_sub(1)
}

/// `labels` (`K/N` each) are every shard of one `N`, each once; else what is wrong, in one line.
pub fn complete(labels: &[String]) -> Result<(), String> {
    let parsed: Result<Vec<(usize, usize)>, String> = labels.iter().map(|l| crate::sql::parse_shard(l)).collect();
    let parsed = parsed?;
    let Some(&(_, n)) = parsed.first() else { return Err("nothing to merge".into()) };
    if let Some((k, m)) = parsed.iter().find(|(_, m)| *m != n) {
        return Err(format!("shard {k}/{m} is not one of {n} shards like the others"));
    }
    for k in 1..=n {
        match parsed.iter().filter(|(x, _)| *x == k).count() {
            0 => return Err(format!("shard {k}/{n} is missing")),
            1 => {}
            _ => return Err(format!("shard {k}/{n} is given twice")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_take_every_nth_and_merges_need_each_once() {
        let taken: Vec<usize> = (0..7).filter(|i| takes(2, 3, *i)).collect();
        assert_eq!(taken, vec![1, 4]);
        let l = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(complete(&l(&["2/2", "1/2"])), Ok(()));
        assert_eq!(complete(&l(&["1/1"])), Ok(()));
        assert!(complete(&l(&["1/3", "2/3"])).unwrap_err().contains("3/3 is missing"));
        assert!(complete(&l(&["1/2", "1/2", "2/2"])).unwrap_err().contains("twice"));
        assert!(complete(&l(&["1/2", "2/3"])).unwrap_err().contains("2/3"));
    }
}
