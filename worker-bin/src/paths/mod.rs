//! `play_paths`: the reference worker plays the model's paths (`model/paths.json`, the shortest
//! playable path to each transition of the coverage denominator) on its database with the
//! protocol's own statements, one run per path, one path after another (the claim takes the oldest
//! prepared operation of any run, so two paths at once would take each other's).
//!
//! Each model process is a session of its own (its `application_name` is its owner id, a new one
//! per acquire); the reconciler and the control plane (create, cancel) have theirs. A protected
//! commit the model holds open between its validation and its commit waits at a barrier inside
//! the database (an advisory lock this driver holds) while the other processes step. The model's
//! clock is kept by the grants' terms: a lease or claim granted before one of the path's clock
//! ticks gets a short term (`grant_ms`) and the tick waits on the database clock until every term
//! of the run has passed; any other grant outlives the path.
//!
//! After every step the driver compares what the database did with what the model does there.
//! A step the database committed that the model refuses is a finding (`refused_by_model`); a step
//! the database refused that the model takes ends the path there (`diverged`: a slow machine can
//! let a short term lapse early, and the database may refuse more than the model, as the spec
//! allows). Either way the history is the row's, and trace validation judges all of it.

mod held;
mod ledger;
mod play;
mod restore;

use std::time::Duration;

use fenceproof_model::action::Action;
use fenceproof_model::coverage::PATHS;
use fenceproof_protocol::error::ProtocolError;
use fenceproof_protocol::write_path::{self, WritePath};
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::adapter::FakeTools;

/// What one path did.
#[derive(Debug, Clone, Serialize)]
pub struct PathReport {
    pub transition: String,
    pub run_id: String,
    /// It holds a step only the spec's own statements take (played on the direct write path).
    pub spec_statements: bool,
    /// It restores its run's rows to the backup (and plays on the restored database after).
    pub restored: bool,
    pub steps: usize,
    /// Steps played before the path ended or diverged.
    pub played: usize,
    /// The first step the database refused and the model takes.
    pub diverged: Option<String>,
    /// A step the database committed and the model refuses (with its clock proven on time).
    pub refused_by_model: Option<String>,
    /// The run of the first play, when this is the path played again with longer terms.
    pub again_of: Option<String>,
}

/// The driver's connections and settings, shared by every path.
pub struct Driver {
    /// The worker's own connection settings (its login and write path); each process of a path
    /// connects with them under its own application_name.
    pub base: PgConnectOptions,
    /// The direct login's settings, for the paths with a step only the spec's own statements take
    /// when the worker writes through the fp_* functions (`None`: no such login; they are skipped).
    pub direct_base: Option<PgConnectOptions>,
    /// Whether the path being played writes with the spec's own statements as the direct login.
    pub on_direct: std::sync::atomic::AtomicBool,
    /// The database that stands for the restored server, for the paths with a restore (`None`:
    /// they are skipped).
    pub restored: Option<Restored>,
    /// Whether the path being played has been restored (its processes use [`Restored`]).
    pub on_restored: std::sync::atomic::AtomicBool,
    /// The control URL's settings: each path's control plane (create, cancel, which the worker
    /// login may not do) connects with them as `control-plane-…`.
    pub control_base: PgConnectOptions,
    /// An observer on the control URL (reads only: the clock, the terms, a barrier's waiters).
    pub control: PgPool,
    pub tools: FakeTools,
    pub owner: String,
    pub tenant: String,
    pub grant_ms: i64,
    /// How long one step may take before the driver gives up on it (a harness error).
    pub step_timeout: Duration,
    /// The sessions opened so far, by application_name: every path's process `i` in its `k`-th
    /// session is the same owner id (on another run), so the paths share them.
    pub pools: tokio::sync::Mutex<std::collections::HashMap<String, PgPool>>,
}

/// A database of the row's server standing for the restored one: a path's restore puts its run's
/// rows there as they were when the run was created (the backup), and the rest of the path plays
/// there, the operator's recovery first.
pub struct Restored {
    /// The worker's login on it.
    pub base: PgConnectOptions,
    /// Its owner's login (the restore, the recovery, the control plane).
    pub control_base: PgConnectOptions,
    /// An observer on it (reads only).
    pub observer: PgPool,
    /// The fake tools' ledger: the remote history the recovery reads.
    pub ledger: std::path::PathBuf,
}

impl Driver {
    fn restored_now(&self) -> Option<&Restored> {
        self.restored.as_ref().filter(|_| self.on_restored.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The worker's settings for the path being played: on the restored database once it was
    /// restored, as the direct login while it takes a step only the spec's statements take.
    pub fn base(&self) -> &PgConnectOptions {
        if let Some(r) = self.restored_now() {
            return &r.base;
        }
        match &self.direct_base {
            Some(direct) if self.on_direct.load(std::sync::atomic::Ordering::SeqCst) => direct,
            _ => &self.base,
        }
    }

    /// The observer of the database the path being played is on.
    pub fn observer(&self) -> &PgPool {
        self.restored_now().map_or(&self.control, |r| &r.observer)
    }

    /// The pool of the session named `app` on [`Driver::base`], opened on first use.
    pub async fn pool(&self, app: &str) -> Result<PgPool, ProtocolError> {
        self.pool_as(self.base(), app).await
    }

    /// The pool of the session named `app` on `opts`, opened on first use (one per login, database
    /// and name).
    pub async fn pool_as(&self, opts: &PgConnectOptions, app: &str) -> Result<PgPool, ProtocolError> {
        let mut pools = self.pools.lock().await;
        let key = format!("{app}@{}/{}", opts.get_username(), opts.get_database().unwrap_or_default());
        if let Some(p) = pools.get(&key) {
            return Ok(p.clone());
        }
        let p = self.pool_on(opts, app).await?;
        pools.insert(key, p.clone());
        Ok(p)
    }

    /// A session of the barrier's pool on [`Driver::base`]'s database (each holds one barrier's
    /// advisory lock, and goes back with none).
    pub async fn barrier(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, ProtocolError> {
        let opts = self.base();
        let key = format!("barrier@{}/{}", opts.get_username(), opts.get_database().unwrap_or_default());
        let pool = {
            let mut pools = self.pools.lock().await;
            match pools.get(&key) {
                Some(p) => p.clone(),
                None => {
                    let p = PgPoolOptions::new()
                        .max_connections(4)
                        .acquire_timeout(self.step_timeout)
                        .connect_with(opts.clone().application_name("fenceproof-paths-barrier"))
                        .await?;
                    pools.insert(key, p.clone());
                    p
                }
            }
        };
        Ok(pool.acquire().await?)
    }

    /// Close every session the paths opened.
    pub async fn close(&self) {
        for (_, p) in self.pools.lock().await.drain() {
            p.close().await;
        }
        self.control.close().await;
        if let Some(r) = &self.restored {
            r.observer.close().await;
        }
    }

    /// A pool on `opts`, named `app`.
    pub async fn pool_on(&self, opts: &PgConnectOptions, app: &str) -> Result<PgPool, ProtocolError> {
        Ok(PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(self.step_timeout)
            .connect_with(opts.clone().application_name(app))
            .await?)
    }
}

/// The database's answer to a step: what it committed, or its refusal. An error that is no answer
/// at all (the database had no connection to give: [`ProtocolError::out_of_connections`]) is the
/// driver's own error instead: a path never reads a missing connection as the database refusing a
/// step (a probe would pass, a path would end early), and the row is out of a resource.
pub fn answered<T>(r: Result<T, ProtocolError>) -> Result<Result<T, ProtocolError>, ProtocolError> {
    match r {
        Err(e) if e.out_of_connections() => Err(e),
        r => Ok(r),
    }
}

/// The URLs `play_paths` is given (secrets, never on a command line).
pub struct Urls {
    /// The owner's URL of the row's database.
    pub control: String,
    /// The direct login's (see [`Driver::direct_base`]).
    pub direct: Option<String>,
    /// The owner's URL of the database standing for the restored server, and the tools' ledger.
    pub restored: Option<(String, String)>,
}

/// A URL's connection settings.
pub fn options(url: &str) -> Result<PgConnectOptions, ProtocolError> {
    url.parse().map_err(|e| ProtocolError::InvalidIntent(format!("bad database URL: {e}")))
}

/// `url`'s settings and an observer's pool on it, named `app`.
pub async fn observer(url: &str, app: &str, timeout: Duration) -> Result<(PgConnectOptions, PgPool), ProtocolError> {
    let opts = options(url)?;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(timeout)
        .connect_with(opts.clone().application_name(app))
        .await?;
    Ok((opts, pool))
}

/// The paths to play: all of them, or those of the transitions named.
pub fn selected(only: Option<&[String]>) -> Result<Vec<(String, Vec<Action>)>, ProtocolError> {
    let all: std::collections::BTreeMap<String, Vec<Action>> = serde_json::from_str(PATHS)
        .map_err(|e| ProtocolError::InvalidIntent(format!("model/paths.json does not parse: {e}")))?;
    Ok(all.into_iter().filter(|(k, _)| only.is_none_or(|o| o.iter().any(|t| t == k))).collect())
}

/// How much longer the terms are when a path that stopped is played again.
const AGAIN_LONGER: i64 = 10;

/// Play every selected path in turn, then once more, with terms [`AGAIN_LONGER`] times as long,
/// each that stopped where the database refused a step the model takes (a short term may have
/// lapsed early on a slow machine); the command's answer.
pub async fn play_all(d: &Driver, paths: Vec<(String, Vec<Action>)>) -> Result<Value, ProtocolError> {
    let spec_only = |p: &[Action]| {
        fenceproof_model::coverage::replay(p)
            .is_some_and(|(_, states)| p.iter().zip(&states).any(|(a, s)| fenceproof_model::coverage::spec_only(s, a)))
    };
    // On the fp_* path, the paths only the spec's statements take need the direct login; a path
    // with a restore needs the database that stands for the restored server.
    let playable = |p: &[Action]| !(write_path::api() && d.direct_base.is_none() && spec_only(p));
    let (paths, skipped): (Vec<_>, Vec<_>) = paths.into_iter().partition(|(_, p)| playable(p));
    let restorable = |p: &[Action]| d.restored.is_some() || !p.contains(&Action::Restore);
    let (paths, skipped_restore): (Vec<_>, Vec<_>) = paths.into_iter().partition(|(_, p)| restorable(p));
    let mut reports = Vec::new();
    for (i, (transition, path)) in paths.iter().enumerate() {
        reports.push(play_one(d, i, transition, path, d.grant_ms, spec_only(path)).await?);
    }
    let again: Vec<usize> = (0..reports.len()).filter(|i| reports[*i].diverged.is_some()).collect();
    for (k, i) in again.iter().enumerate() {
        let (transition, path) = &paths[*i];
        let longer = d.grant_ms * AGAIN_LONGER;
        let mut r = play_one(d, reports.len() + k, transition, path, longer, spec_only(path)).await?;
        r.again_of = Some(reports[*i].run_id.clone());
        reports[*i] = r;
    }
    let diverged = reports.iter().filter(|r| r.diverged.is_some()).count();
    let played_again = again.len();
    let refused = reports.iter().filter(|r| r.refused_by_model.is_some()).count();
    Ok(json!({
        "paths": reports,
        "played": reports.len(),
        "played_again": played_again,
        "diverged": diverged,
        "refused_by_model": refused,
        "skipped_spec_statements": skipped.into_iter().map(|(t, _)| t).collect::<Vec<_>>(),
        "skipped_restore": skipped_restore.into_iter().map(|(t, _)| t).collect::<Vec<_>>(),
    }))
}

/// One path, played as the direct login with the spec's own statements when `spec` and the worker
/// writes through the fp_* functions.
async fn play_one(
    d: &Driver,
    idx: usize,
    transition: &str,
    path: &[Action],
    grant_ms: i64,
    spec: bool,
) -> Result<PathReport, ProtocolError> {
    let switch = spec && write_path::api();
    if switch {
        write_path::choose(WritePath::Direct);
        d.on_direct.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    let r = play::play(d, idx, transition.to_string(), path, grant_ms).await;
    if switch {
        d.on_direct.store(false, std::sync::atomic::Ordering::SeqCst);
        write_path::choose(WritePath::Api);
    }
    let mut r = r?;
    r.spec_statements = spec;
    Ok(r)
}
