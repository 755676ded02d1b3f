//! The privilege audit of a database (`fenceproof writers`, P-role; spec §12, §13): every way a
//! role can change the protocol's tables other than through the fenced path, read from the
//! catalogue (read-only: nothing is changed). Each finding names its rule:
//!
//! - `table-write-public`: PUBLIC may INSERT, UPDATE, DELETE or TRUNCATE a protocol table (or some
//!   of its columns), so every role may.
//! - `table-write-role`: a role other than the tables' owner and superusers may, by its own grant or
//!   through a role it belongs to (a role named as a direct-path writer may hold exactly the
//!   privileges of `harness/sql/direct_writer.sql`, nothing more).
//! - `definer-no-search-path`: a SECURITY DEFINER function (in the protocol's schema, or naming one
//!   of its tables) without `SET search_path`: it resolves names with its caller's path.
//! - `definer-temp-first`: one whose search_path does not end with `pg_temp`: the caller's temporary
//!   tables are searched first, so a `CREATE TEMP TABLE worker_leases` stands in for the real one.
//! - `definer-public-execute`: PUBLIC may EXECUTE such a function (a trigger function cannot be
//!   called, so it is left out; a SECURITY INVOKER function runs with the caller's own rights).
//! - `schema-create`: PUBLIC or a role other than the schema's owner may CREATE in the protocol's
//!   schema (objects a search_path then finds).
//! - `default-privileges`: `ALTER DEFAULT PRIVILEGES` will grant a write on tables, or EXECUTE on
//!   functions, made later in that schema (or in every schema).

use serde::Serialize;
use sqlx::PgPool;

use crate::db::writers::TABLES;
use crate::error::{HarnessError, Result};

pub const TABLE_WRITE_PUBLIC: &str = "table-write-public";
pub const TABLE_WRITE_ROLE: &str = "table-write-role";
pub const DEFINER_NO_SEARCH_PATH: &str = "definer-no-search-path";
pub const DEFINER_TEMP_FIRST: &str = "definer-temp-first";
pub const DEFINER_PUBLIC_EXECUTE: &str = "definer-public-execute";
pub const SCHEMA_CREATE: &str = "schema-create";
pub const DEFAULT_PRIVILEGES: &str = "default-privileges";

/// Every rule, in the order findings are listed.
pub const RULES: [&str; 7] = [
    TABLE_WRITE_PUBLIC,
    TABLE_WRITE_ROLE,
    DEFINER_NO_SEARCH_PATH,
    DEFINER_TEMP_FIRST,
    DEFINER_PUBLIC_EXECUTE,
    SCHEMA_CREATE,
    DEFAULT_PRIVILEGES,
];

/// The direct path's privileges (`harness/sql/direct_writer.sql`, docs/worker-protocol.md): what a
/// role named as a direct-path writer may hold, as (table, privilege, columns).
pub const DIRECT_PATH: &[(&str, &str, &[&str])] = &[
    ("agent_runs", "UPDATE", &["status", "revision", "checkpoint", "updated_at"]),
    ("worker_leases", "UPDATE", &["owner", "epoch", "expires_at", "updated_at"]),
    (
        "tool_operations",
        "INSERT",
        &[
            "operation_id",
            "run_id",
            "step_id",
            "effect_version",
            "tool_name",
            "request_digest",
            "request_body",
            "status",
        ],
    ),
    (
        "tool_operations",
        "UPDATE",
        &["status", "dispatch_owner", "dispatch_until", "remote_id", "result", "revision", "updated_at"],
    ),
];

/// One hole in the boundary: its rule, what it is about (a role, a function, a schema) and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    pub subject: String,
    pub detail: String,
}

impl Finding {
    /// `FINDING  rule  subject: detail`, the line `fenceproof writers` prints.
    pub fn line(&self) -> String {
        format!("FINDING  {:<22}  {}: {}", self.rule, self.subject, self.detail)
    }
}

/// What to audit: the protocol's schema (default: the session's current one) and the roles meant
/// to write on their own statements (the direct path), which may hold [`DIRECT_PATH`].
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub schema: Option<String>,
    pub direct_writers: Vec<String>,
}

/// The audit of one schema: every finding, in [`RULES`] order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Audit {
    pub schema: String,
    pub findings: Vec<Finding>,
}

/// Audit the database behind `pool` (read-only). The protocol's tables must be in the schema.
pub async fn audit(pool: &PgPool, scope: &Scope) -> Result<Audit> {
    let schema = protocol_schema(pool, scope.schema.as_deref()).await?;
    let mut findings = table_writes(pool, &schema, &scope.direct_writers).await?;
    findings.extend(definers(pool, &schema).await?);
    findings.extend(schema_create(pool, &schema).await?);
    findings.extend(default_privileges(pool, &schema).await?);
    findings.sort_by_key(|f| RULES.iter().position(|r| *r == f.rule));
    Ok(Audit { schema, findings })
}

/// The schema's name, once its four protocol tables are known to be there.
pub async fn protocol_schema(pool: &PgPool, schema: Option<&str>) -> Result<String> {
    let tables: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
    let (name, found): (Option<String>, i64) = sqlx::query_as(
        "SELECT coalesce($1, current_schema())::text,
                (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = coalesce($1, current_schema()) AND c.relname = ANY($2) AND c.relkind IN ('r', 'p'))",
    )
    .bind(schema)
    .bind(&tables)
    .fetch_one(pool)
    .await?;
    match name {
        Some(n) if found == TABLES.len() as i64 => Ok(n),
        _ => Err(HarnessError::Other(format!(
            "the protocol's tables ({}) are not all in schema {}",
            TABLES.join(", "),
            schema.unwrap_or("(the current one)")
        ))),
    }
}

/// One grantee's write privilege on one table, as the catalogue answers it.
#[derive(Debug, sqlx::FromRow)]
struct Write {
    grantee: String,
    is_public: bool,
    allowed: bool,
    login: bool,
    tbl: String,
    privilege: String,
    whole: bool,
    columns: Vec<String>,
    via: Vec<String>,
}

impl Write {
    /// `UPDATE agent_runs` or `UPDATE agent_runs(status, revision)`.
    fn shown(&self) -> String {
        if self.whole {
            format!("{} {}", self.privilege, self.tbl)
        } else {
            format!("{} {}({})", self.privilege, self.tbl, self.columns.join(", "))
        }
    }

    /// Held by PUBLIC at least as widely (then PUBLIC's finding says it for every role).
    fn covered_by(&self, public: &[Write]) -> bool {
        public.iter().any(|p| {
            p.tbl == self.tbl
                && p.privilege == self.privilege
                && (p.whole || (!self.whole && self.columns.iter().all(|c| p.columns.contains(c))))
        })
    }

    /// Within the direct path's privileges, for a role named as a direct-path writer.
    fn within_direct_path(&self) -> bool {
        self.allowed
            && !self.whole
            && DIRECT_PATH.iter().any(|(t, p, cols)| {
                *t == self.tbl && *p == self.privilege && self.columns.iter().all(|c| cols.contains(&c.as_str()))
            })
    }
}

const WRITES_SQL: &str = "
WITH t AS (
  SELECT c.oid, c.relname::text AS relname, c.relowner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind IN ('r', 'p')),
g AS (
  SELECT 0::oid AS oid, 'PUBLIC'::text AS rolname, true AS is_public, false AS allowed, false AS login
  UNION ALL
  SELECT r.oid, r.rolname::text, false,
         EXISTS (SELECT 1 FROM pg_roles a WHERE a.rolname = ANY($3) AND pg_has_role(r.oid, a.oid, 'USAGE')),
         r.rolcanlogin
    FROM pg_roles r WHERE NOT r.rolsuper AND r.rolname NOT LIKE 'pg\\_%'),
p(priv) AS (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE')),
w AS (
  SELECT g.oid AS goid, g.rolname AS grantee, g.is_public, g.allowed, g.login, t.oid AS toid, t.relname AS tbl, p.priv AS privilege,
         CASE WHEN g.is_public THEN has_table_privilege('public', t.oid, p.priv)
              ELSE has_table_privilege(g.oid, t.oid, p.priv) END AS whole,
         ARRAY(SELECT a.attname::text FROM pg_attribute a
                WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped AND p.priv IN ('INSERT', 'UPDATE')
                  AND CASE WHEN g.is_public THEN has_column_privilege('public', t.oid, a.attnum, p.priv)
                           ELSE has_column_privilege(g.oid, t.oid, a.attnum, p.priv) END
                ORDER BY a.attnum) AS columns
    FROM g CROSS JOIN t CROSS JOIN p
   WHERE g.is_public OR NOT pg_has_role(g.oid, t.relowner, 'USAGE'))
SELECT grantee, is_public, allowed, login, tbl, privilege, whole, columns,
       ARRAY(SELECT m.rolname::text FROM pg_roles m
              WHERE NOT is_public AND m.oid <> goid AND pg_has_role(goid, m.oid, 'USAGE')
                AND (has_table_privilege(m.oid, toid, privilege)
                     OR (privilege IN ('INSERT', 'UPDATE') AND has_any_column_privilege(m.oid, toid, privilege)))
              ORDER BY 1) AS via
  FROM w
 WHERE whole OR cardinality(columns) > 0
 ORDER BY is_public DESC, grantee, tbl, privilege";

/// `table-write-public` and `table-write-role`: one finding per grantee, with all it may write.
async fn table_writes(pool: &PgPool, schema: &str, direct_writers: &[String]) -> Result<Vec<Finding>> {
    let tables: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
    let rows: Vec<Write> =
        sqlx::query_as(WRITES_SQL).bind(schema).bind(&tables).bind(direct_writers).fetch_all(pool).await?;
    let (public, roles): (Vec<Write>, Vec<Write>) = rows.into_iter().partition(|w| w.is_public);
    let mut out = Vec::new();
    if !public.is_empty() {
        let what: Vec<String> = public.iter().map(Write::shown).collect();
        out.push(Finding {
            rule: TABLE_WRITE_PUBLIC,
            subject: "PUBLIC".into(),
            detail: format!("every role may {}; revoke it from PUBLIC (spec §12)", what.join(", ")),
        });
    }
    let kept: Vec<&Write> = roles.iter().filter(|w| !w.covered_by(&public) && !w.within_direct_path()).collect();
    let mut names: Vec<&str> = kept.iter().map(|w| w.grantee.as_str()).collect();
    names.dedup();
    for name in names {
        let mine: Vec<&&Write> = kept.iter().filter(|w| w.grantee == name).collect();
        let what: Vec<String> = mine.iter().map(|w| w.shown()).collect();
        let mut via: Vec<&str> = mine.iter().flat_map(|w| w.via.iter().map(String::as_str)).collect();
        via.sort_unstable();
        via.dedup();
        let through =
            if via.is_empty() { String::new() } else { format!(" (through membership of {})", via.join(", ")) };
        let beyond = if mine[0].allowed { ", beyond the direct path's privileges" } else { "" };
        out.push(Finding {
            rule: TABLE_WRITE_ROLE,
            subject: format!("role {name}{}", if mine[0].login { " (login)" } else { "" }),
            detail: format!(
                "may {}{through}{beyond}: a write around the fenced path; revoke it (spec §13)",
                what.join(", ")
            ),
        });
    }
    Ok(out)
}

/// The `search_path` a function's `proconfig` sets, if any (`search_path=a, b`).
pub fn search_path_of(proconfig: &[String]) -> Option<Vec<String>> {
    proconfig
        .iter()
        .find_map(|c| c.strip_prefix("search_path="))
        .map(|v| v.split(',').map(|s| s.trim().trim_matches('"').to_string()).filter(|s| !s.is_empty()).collect())
}

/// `definer-*`: the SECURITY DEFINER functions in the schema or naming one of its tables.
async fn definers(pool: &PgPool, schema: &str) -> Result<Vec<Finding>> {
    let names = format!("\\m({})\\M", TABLES.join("|"));
    let rows: Vec<(String, Vec<String>, bool, bool)> = sqlx::query_as(
        "SELECT format('%I.%I(%s)', n.nspname, p.proname, oidvectortypes(p.proargtypes)),
                coalesce(p.proconfig, '{}'),
                p.prorettype IN ('trigger'::regtype, 'event_trigger'::regtype),
                has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE p.prosecdef AND n.nspname NOT IN ('pg_catalog', 'information_schema')
            AND (n.nspname = $1 OR p.prosrc ~ $2)
          ORDER BY 1",
    )
    .bind(schema)
    .bind(&names)
    .fetch_all(pool)
    .await?;
    let mut out = Vec::new();
    for (function, config, trigger, public) in rows {
        match search_path_of(&config) {
            None => out.push(Finding {
                rule: DEFINER_NO_SEARCH_PATH,
                subject: format!("function {function}"),
                detail: "SECURITY DEFINER without SET search_path: it resolves names with its caller's path (add SET search_path = <schema>, pg_temp)".into(),
            }),
            Some(path) if path.last().map(String::as_str) != Some("pg_temp") => out.push(Finding {
                rule: DEFINER_TEMP_FIRST,
                subject: format!("function {function}"),
                detail: format!(
                    "SECURITY DEFINER with search_path {} does not end with pg_temp, so the caller's temporary tables are searched first (a TEMP TABLE worker_leases stands in for the real one)",
                    if path.is_empty() { "''".to_string() } else { path.join(", ") }
                ),
            }),
            Some(_) => {}
        }
        if public && !trigger {
            out.push(Finding {
                rule: DEFINER_PUBLIC_EXECUTE,
                subject: format!("function {function}"),
                detail: "PUBLIC may EXECUTE this SECURITY DEFINER function: every role gets its owner's rights (REVOKE EXECUTE ... FROM PUBLIC)".into(),
            });
        }
    }
    Ok(out)
}

/// `schema-create`: PUBLIC, or a role other than the owner and superusers, may CREATE in the schema.
async fn schema_create(pool: &PgPool, schema: &str) -> Result<Vec<Finding>> {
    let who: Vec<(String,)> = sqlx::query_as(
        "SELECT 'PUBLIC' FROM pg_namespace n WHERE n.nspname = $1 AND has_schema_privilege('public', n.oid, 'CREATE')
         UNION ALL
         SELECT r.rolname::text FROM pg_namespace n CROSS JOIN pg_roles r
          WHERE n.nspname = $1 AND NOT has_schema_privilege('public', n.oid, 'CREATE')
            AND NOT r.rolsuper AND r.rolname NOT LIKE 'pg\\_%' AND NOT pg_has_role(r.oid, n.nspowner, 'USAGE')
            AND has_schema_privilege(r.oid, n.oid, 'CREATE')",
    )
    .bind(schema)
    .fetch_all(pool)
    .await?;
    Ok(who
        .into_iter()
        .map(|(role,)| Finding {
            rule: SCHEMA_CREATE,
            subject: format!("schema {schema}"),
            detail: format!("{role} may CREATE in it: objects it makes are found by the protocol's search_path (REVOKE CREATE ON SCHEMA {schema} FROM {role})"),
        })
        .collect())
}

/// `default-privileges`: default ACLs (the schema's, or every schema's) that will grant a write on
/// tables, or EXECUTE on functions to a role (PUBLIC's EXECUTE is PostgreSQL's own default, reported
/// per function by `definer-public-execute`).
async fn default_privileges(pool: &PgPool, schema: &str) -> Result<Vec<Finding>> {
    let rows: Vec<(String, String, String, String, Vec<String>)> = sqlx::query_as(
        "SELECT pg_get_userbyid(d.defaclrole)::text, coalesce(n.nspname::text, ''),
                CASE d.defaclobjtype WHEN 'r' THEN 'tables' ELSE 'functions' END,
                CASE WHEN e.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(e.grantee)::text END,
                array_agg(e.privilege_type::text ORDER BY e.privilege_type)
           FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace
          CROSS JOIN LATERAL aclexplode(d.defaclacl) e
          WHERE (d.defaclnamespace = 0 OR n.nspname = $1) AND e.grantee <> d.defaclrole
            AND ((d.defaclobjtype = 'r' AND e.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE'))
              OR (d.defaclobjtype = 'f' AND e.privilege_type = 'EXECUTE' AND e.grantee <> 0))
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4",
    )
    .bind(schema)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(creator, nsp, kind, grantee, privs)| Finding {
            rule: DEFAULT_PRIVILEGES,
            subject: format!("role {creator}"),
            detail: format!(
                "{kind} it creates later in {} will grant {} to {grantee} (ALTER DEFAULT PRIVILEGES)",
                if nsp.is_empty() { "any schema".to_string() } else { format!("schema {nsp}") },
                privs.join(", ")
            ),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_path_is_read_from_proconfig() {
        let cfg = |s: &[&str]| s.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(search_path_of(&cfg(&["plan_cache_mode=force_generic_plan"])), None);
        assert_eq!(
            search_path_of(&cfg(&["search_path=\"$user\", public"])),
            Some(vec!["$user".to_string(), "public".to_string()])
        );
        assert_eq!(search_path_of(&cfg(&["search_path=public, pg_temp"])).unwrap().last().unwrap(), "pg_temp");
        assert_eq!(search_path_of(&cfg(&["search_path=\"\""])), Some(vec![]));
    }
}
