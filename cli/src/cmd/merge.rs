//! `fenceproof merge DIR...`: join the run folders of one sharded run into the report one
//! unsharded run writes. The folders say what they are: the file each kind of run leaves
//! (`mutants-sql.json`, `schedules.json`, `audit-shard.json`, `model-check.json`) picks the
//! merge; folders of two kinds are a usage error.

use std::path::{Path, PathBuf};

use crate::cmd::{audit_merge, model_merge, mutants_sql_merge, schedules_merge};

/// Join the run folders of `mutants sql`, `schedules run`, `audit` or `model check` runs with
/// `--shard K/N` into one report; the file each folder holds says which.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run folders of one sharded run (every shard of one N, each once).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where the merged report goes (default: reports/merged, reports/schedules-merged,
    /// reports/audit-merged or reports/model-merged, by the folders' kind).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Audit folders only: exit 1 when any library fails a check, not only the control.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    output: crate::cmd::output::Output,
}

/// What a run folder holds, by the file its kind of run leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SqlMutants,
    Schedules,
    Audit,
    Model,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::SqlMutants, Kind::Schedules, Kind::Audit, Kind::Model];

    /// The file that marks a folder of this kind.
    fn mark(self) -> &'static str {
        match self {
            Kind::SqlMutants => mutants_sql_merge::MARK,
            Kind::Schedules => schedules_merge::MARK,
            Kind::Audit => audit_merge::MARK,
            Kind::Model => model_merge::MARK,
        }
    }

    /// What the run was, as a person names it.
    fn what(self) -> &'static str {
        match self {
            Kind::SqlMutants => "`mutants sql`",
            Kind::Schedules => "`schedules run`",
            Kind::Audit => "`audit`",
            Kind::Model => "`model check`",
        }
    }

    fn default_out(self) -> &'static str {
        match self {
            Kind::SqlMutants => mutants_sql_merge::DEFAULT_OUT,
            Kind::Schedules => schedules_merge::DEFAULT_OUT,
            Kind::Audit => audit_merge::DEFAULT_OUT,
            Kind::Model => "reports/model-merged",
        }
    }

    /// The kind of `dir`, or why it has none.
    pub fn of(dir: &Path) -> Result<Kind, String> {
        Kind::ALL.into_iter().find(|k| dir.join(k.mark()).is_file()).ok_or_else(|| {
            let marks: Vec<&str> = Kind::ALL.iter().map(|k| k.mark()).collect();
            format!("{} holds none of {}: not a sharded run's folder", dir.display(), marks.join(", "))
        })
    }
}

/// The one kind of every folder in `dirs`, or why they are not one run's shards.
pub fn kind_of(dirs: &[PathBuf]) -> Result<Kind, String> {
    let kinds: Vec<Kind> = dirs.iter().map(|d| Kind::of(d)).collect::<Result<_, _>>()?;
    let first = kinds[0];
    match dirs.iter().zip(&kinds).find(|(_, k)| **k != first) {
        Some((d, k)) => Err(format!(
            "{} is a {} run's folder and {} a {} run's: merge the shards of one run",
            dirs[0].display(),
            first.what(),
            d.display(),
            k.what()
        )),
        None => Ok(first),
    }
}

pub fn run(a: Args) -> u8 {
    let kind = match kind_of(&a.dirs) {
        Ok(k) => k,
        Err(msg) => return crate::fail::usage(msg),
    };
    if a.strict && kind != Kind::Audit {
        return crate::fail::usage(format!("--strict is for audit folders; these are {}'s", kind.what()));
    }
    let out = a.out.unwrap_or_else(|| PathBuf::from(kind.default_out()));
    let (dirs, print) = (&a.dirs, a.output.print());
    match kind {
        Kind::SqlMutants => mutants_sql_merge::run(dirs, &out, print),
        Kind::Schedules => schedules_merge::run(dirs, &out, print),
        Kind::Audit => audit_merge::run(dirs, &out, print, a.strict),
        Kind::Model => model_merge::run_dirs(dirs, &out, a.output.json, a.output.quiet),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder named `name` under this process's own temporary folder, holding `mark`.
    fn folder(name: &str, mark: Option<&str>) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fenceproof-merge-{}", std::process::id())).join(name);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create");
        if let Some(m) = mark {
            std::fs::write(d.join(m), "{}").expect("write");
        }
        d
    }

    #[test]
    fn each_folder_is_known_by_the_file_its_run_leaves() {
        for (mark, kind) in [
            ("mutants-sql.json", Kind::SqlMutants),
            ("schedules.json", Kind::Schedules),
            ("audit-shard.json", Kind::Audit),
            ("model-check.json", Kind::Model),
        ] {
            let (a, b) = (folder(&format!("{mark}-a"), Some(mark)), folder(&format!("{mark}-b"), Some(mark)));
            assert_eq!(kind_of(&[a, b]), Ok(kind), "{mark}");
        }
    }

    #[test]
    fn folders_of_two_kinds_or_of_none_are_refused() {
        let s = folder("two-s", Some("schedules.json"));
        let m = folder("two-m", Some("model-check.json"));
        let mixed = kind_of(&[s, m]).unwrap_err();
        assert!(mixed.contains("`schedules run`") && mixed.contains("`model check`"), "{mixed}");
        let unknown = kind_of(&[folder("none", None)]).unwrap_err();
        assert!(unknown.contains("holds none of"), "{unknown}");
    }
}
