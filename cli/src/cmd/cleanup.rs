//! `fenceproof cleanup --database-url URL`: remove the schemas and roles fenceproof runs left in
//! a database (a run killed with SIGKILL cannot drop its own).

use fenceproof_harness::db::external::{masked, ExternalDb};
use fenceproof_harness::report::exit;

/// Remove every schema and role that fenceproof runs (verify, bench) made in a database and left
/// behind: each is tagged with the harness process that made it. Those of a run still going on
/// this host are kept; run it when no fenceproof run uses the database from another host. Objects
/// fenceproof did not make are never touched.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database (postgres://user@host:port/db with the password in PGPASSWORD, or a libpq
    /// socket URL).
    #[arg(long)]
    database_url: String,
    #[command(flatten)]
    out: crate::cmd::output::Output,
}

pub async fn run(a: Args) -> u8 {
    if let Err(msg) = crate::cmd::input::check(None, Some(&a.database_url)) {
        return crate::fail::usage(msg);
    }
    let db = match ExternalDb::connect(&a.database_url).await {
        Ok(db) => db,
        Err(e) => return crate::fail::harness_failed(e),
    };
    match db.cleanup().await {
        Ok(c) if a.out.json => {
            let v = serde_json::json!({ "schemas": c.schemas, "roles": c.roles, "left": c.left });
            outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
            exit::OK
        }
        Ok(c) => {
            if !a.out.quiet {
                for l in &c.left {
                    outln!("left: {l}");
                }
            }
            outln!(
                "cleanup of {}: dropped {} schema(s) [{}] and {} role(s) [{}]",
                masked(&db.url),
                c.schemas.len(),
                c.schemas.join(", "),
                c.roles.len(),
                c.roles.join(", ")
            );
            exit::OK
        }
        Err(e) => crate::fail::harness_failed(e),
    }
}
