//! A Patroni cluster seen and driven only through its REST API: the harness's own (its nodes'
//! loopback ports) or a team's (the contract's `rest` addresses). What the switchover row needs:
//! the members (`/cluster`), the plan (which node it would demote, which it would promote), the
//! switchover itself (`POST /switchover` to the leader), and whether a node is a writable leader.
//! Nothing here starts, stops or signals a process: it works against a cluster on other machines.

use std::time::Duration;

use serde_json::Value;

use super::http;
pub use super::http::Response;
use crate::error::{HarnessError, Result};

/// Bound on `POST /switchover` (Patroni answers once the candidate is the leader, or it gave up).
pub const SWITCHOVER: Duration = Duration::from_secs(60);

/// One member as `/cluster` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member {
    pub name: String,
    pub role: String,
    pub state: String,
    /// Its PostgreSQL's address.
    pub host: String,
    pub port: u16,
    /// Its REST API's `host:port`.
    pub api: String,
}

/// What a switchover would do: demote `leader`, promote `candidate`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    pub scope: String,
    pub leader: Member,
    pub candidate: Member,
}

impl Plan {
    /// One line: which node is demoted and which promoted, with their addresses.
    pub fn describe(&self) -> String {
        let (l, c) = (&self.leader, &self.candidate);
        format!(
            "switch over Patroni cluster '{}': demote the leader {} (PostgreSQL {}:{}, REST {}) and promote {} ({} {}, PostgreSQL {}:{})",
            self.scope, l.name, l.host, l.port, l.api, c.name, c.role, c.state, c.host, c.port
        )
    }
}

/// The REST addresses (`host:port`) of a cluster's nodes.
#[derive(Debug, Clone)]
pub struct RestCluster {
    pub addrs: Vec<String>,
}

impl RestCluster {
    /// From `http://host:port` addresses (the contract's `rest`).
    pub fn from_urls(urls: &[String]) -> std::result::Result<RestCluster, String> {
        let addrs = urls.iter().map(|u| http::addr_of(u)).collect::<std::result::Result<Vec<_>, _>>()?;
        if addrs.is_empty() {
            return Err("no REST address given".into());
        }
        Ok(RestCluster { addrs })
    }

    /// The cluster's scope and members, from the first address whose `/cluster` answers.
    pub async fn members(&self) -> Result<(String, Vec<Member>)> {
        let mut why = Vec::new();
        for a in &self.addrs {
            match http::get_at(a, "/cluster").await {
                Ok(r) if r.status == 200 => return parse_cluster(&r.body).ok_or_else(|| bad(a, "no members")),
                Ok(r) => why.push(format!("{a}: HTTP {}", r.status)),
                Err(e) => why.push(e.to_string()),
            }
        }
        Err(HarnessError::Other(format!("no Patroni REST API answered /cluster ({})", why.join("; "))))
    }

    /// Which node a switchover would demote (the leader) and promote (a streaming replica, the
    /// synchronous standby first), or why there is none.
    pub async fn plan(&self) -> Result<Plan> {
        let (scope, members) = self.members().await?;
        let leader = members.iter().find(|m| m.role == "leader").cloned();
        let mut replicas: Vec<&Member> =
            members.iter().filter(|m| m.role != "leader" && m.state == "streaming").collect();
        replicas.sort_by_key(|m| m.role != "sync_standby");
        match (leader, replicas.first()) {
            (Some(leader), Some(c)) => Ok(Plan { scope, leader, candidate: (*c).clone() }),
            (None, _) => Err(HarnessError::Other(format!("Patroni cluster '{scope}' has no leader now"))),
            (Some(_), None) => {
                Err(HarnessError::Other(format!("Patroni cluster '{scope}' has no streaming replica to promote")))
            }
        }
    }
}

/// `POST /switchover` to the plan's leader; Patroni answers when it is done (bounded).
pub async fn switchover(plan: &Plan) -> Result<http::Response> {
    let body = serde_json::json!({"leader": plan.leader.name, "candidate": plan.candidate.name});
    http::post_at(&plan.leader.api, "/switchover", &body, SWITCHOVER).await
}

/// Whether `member`'s REST API says it is the writable leader (`/primary` answers 200).
pub async fn is_primary(member: &Member) -> bool {
    http::get_at(&member.api, "/primary").await.is_ok_and(|r| r.status == 200)
}

fn bad(addr: &str, what: &str) -> HarnessError {
    HarnessError::Other(format!("{addr}/cluster: {what}"))
}

/// `/cluster`'s body: its scope (when Patroni names it) and members.
fn parse_cluster(body: &str) -> Option<(String, Vec<Member>)> {
    let v: Value = serde_json::from_str(body).ok()?;
    let members: Vec<Member> = v["members"].as_array()?.iter().filter_map(member).collect();
    let scope = v["scope"].as_str().unwrap_or("?").to_string();
    (!members.is_empty()).then_some((scope, members))
}

fn member(m: &Value) -> Option<Member> {
    let api = http::addr_of(m["api_url"].as_str()?).ok()?;
    Some(Member {
        name: m["name"].as_str()?.to_string(),
        role: m["role"].as_str()?.to_string(),
        state: m["state"].as_str().unwrap_or("").to_string(),
        host: m["host"].as_str()?.to_string(),
        port: u16::try_from(m["port"].as_u64()?).ok()?,
        api,
    })
}

/// `url` (a `postgres://` URL) pointed at `host:port` instead, everything else kept (user, database,
/// options): the same database on another member.
pub fn url_on(url: &str, host: &str, port: u16) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let user = auth.rsplit_once('@').map(|(u, _)| format!("{u}@")).unwrap_or_default();
    format!("{scheme}://{user}{host}:{port}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = r#"{"members": [
        {"name": "node0", "role": "leader", "state": "running", "api_url": "http://127.0.0.1:8008/patroni", "host": "127.0.0.1", "port": 5432, "timeline": 1},
        {"name": "node1", "role": "replica", "state": "streaming", "api_url": "http://127.0.0.1:8009/patroni", "host": "127.0.0.1", "port": 5433, "timeline": 1, "lag": 0}
    ], "scope": "fp-abc"}"#;

    #[test]
    fn the_cluster_is_read_with_its_leader_and_replica() {
        let (scope, m) = parse_cluster(CLUSTER).unwrap();
        assert_eq!(scope, "fp-abc");
        assert_eq!((m[0].role.as_str(), m[0].api.as_str(), m[0].port), ("leader", "127.0.0.1:8008", 5432));
        assert_eq!((m[1].name.as_str(), m[1].state.as_str()), ("node1", "streaming"));
        assert!(parse_cluster(r#"{"members": []}"#).is_none());
        assert!(parse_cluster("not json").is_none());
    }

    #[test]
    fn a_url_moves_to_another_member_keeping_user_database_and_options() {
        let u = "postgres://team@db0:5432/teamdb?options=-csearch_path%3Dfp";
        assert_eq!(url_on(u, "db1", 5433), "postgres://team@db1:5433/teamdb?options=-csearch_path%3Dfp");
        assert_eq!(url_on("postgres://db0:5432/x", "db1", 6000), "postgres://db1:6000/x");
        assert_eq!(url_on("postgres://u@db0", "h", 1), "postgres://u@h:1");
    }
}
