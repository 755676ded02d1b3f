//! `fenceproof cleanup --database-url`: remove what fenceproof runs left in a team's database
//! (runs killed with SIGKILL, or a role another run still needed when this one ended): every schema
//! and role tagged as made by the harness, except those of a harness process still alive on this
//! host. Untagged objects (the team's own, a `fenceproof_worker` role an administrator made) are
//! never touched.

use crate::db::external::{this_host, ExternalDb, OWNER_TAG_PREFIX};
use crate::error::Result;

/// What a cleanup removed, and what it left and why.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub schemas: Vec<String>,
    pub roles: Vec<String>,
    /// Objects left: of a live run on this host, or that could not be dropped (with the reason).
    pub left: Vec<String>,
}

/// Whether `tag` names a harness process that is still running on this host.
fn live_here(tag: &str) -> bool {
    let Some((pid, host)) = tag.strip_prefix(OWNER_TAG_PREFIX).and_then(|r| r.split_once(" host=")) else {
        return false;
    };
    let Ok(pid) = pid.parse::<i32>() else { return false };
    host == this_host()
        && !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH))
}

impl ExternalDb {
    /// Drop every tagged schema, then every tagged role, except those of live runs on this host.
    pub async fn cleanup(&self) -> Result<Cleaned> {
        let admin = self.pool_in("public", "fenceproof-harness", 1).await?;
        let like = format!("{OWNER_TAG_PREFIX}%");
        let schemas: Vec<(String, String)> = sqlx::query_as(
            "SELECT nspname::text, obj_description(oid, 'pg_namespace') FROM pg_namespace
              WHERE obj_description(oid, 'pg_namespace') LIKE $1 ORDER BY 1",
        )
        .bind(&like)
        .fetch_all(&admin)
        .await?;
        let roles: Vec<(String, String)> = sqlx::query_as(
            "SELECT rolname::text, shobj_description(oid, 'pg_authid') FROM pg_roles
              WHERE shobj_description(oid, 'pg_authid') LIKE $1 ORDER BY 1",
        )
        .bind(&like)
        .fetch_all(&admin)
        .await?;
        let mut c = Cleaned::default();
        for (kind, list) in [("SCHEMA", schemas), ("ROLE", roles)] {
            for (name, tag) in list {
                if live_here(&tag) {
                    c.left.push(format!("{name} (a run still going on this host)"));
                    continue;
                }
                let cascade = if kind == "SCHEMA" { " CASCADE" } else { "" };
                match sqlx::query(&format!("DROP {kind} IF EXISTS \"{name}\"{cascade}")).execute(&admin).await {
                    Ok(_) if kind == "SCHEMA" => c.schemas.push(name),
                    Ok(_) => c.roles.push(name),
                    Err(e) => c.left.push(format!("{name}: {e}")),
                }
            }
        }
        admin.close().await;
        Ok(c)
    }
}
