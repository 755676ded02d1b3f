//! The command groups: `mutants named|sql` and `schedules run|against-mutants`, each an enum of
//! the commands it holds (their flags and work stay in their own files).

/// `mutants`: which experiments kill which broken variant.
#[derive(clap::Subcommand, Debug)]
pub enum Mutants {
    Named(crate::cmd::mutants::Args),
    Sql(crate::cmd::mutants_sql::Args),
}

/// `schedules`: randomized operation schedules.
#[derive(clap::Subcommand, Debug)]
pub enum Schedules {
    Run(crate::cmd::schedules::Args),
    AgainstMutants(crate::cmd::schedules_mutants::Args),
}

impl Mutants {
    pub async fn run(self) -> u8 {
        match self {
            Mutants::Named(a) => crate::cmd::mutants::run(a).await,
            Mutants::Sql(a) => crate::cmd::mutants_sql::run(a).await,
        }
    }
}

impl Schedules {
    pub async fn run(self) -> u8 {
        match self {
            Schedules::Run(a) => crate::cmd::schedules::run(a).await,
            Schedules::AgainstMutants(a) => crate::cmd::schedules_mutants::run(a).await,
        }
    }
}
