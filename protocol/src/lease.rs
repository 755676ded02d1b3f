//! The lease protocol (spec section 05): one row per run serializes ownership terms.
//!
//! All expiry decisions use the database clock (`clock_timestamp()`); the TTL travels as integer
//! milliseconds. Zero rows from acquire is not "task failed": it is missing, held or racing.

use sqlx::PgPool;
use uuid::Uuid;

use crate::error::ProtocolError;
use crate::ids::{Lease, LeaseTerms, Ttl};
use crate::mutant::{self, Mutant};
use crate::retry::classify_write_error;
use crate::sql;
use crate::write_path;

/// A lease row as read back from the primary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseRow {
    pub run_id: Uuid,
    pub owner: Option<String>,
    pub epoch: i64,
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// `expires_at > clock_timestamp()` at the moment of reading.
    pub live: bool,
}

/// The term a lease write asks the database for, in integer milliseconds.
fn term_ms(ttl: Ttl) -> i64 {
    // MUTANT ttl-whole-seconds: the TTL is passed as whole seconds (rounded up), as a worker that
    // hands the database `ttl.as_secs()` or a formatted duration would.
    if mutant::active(Mutant::TtlWholeSeconds) {
        return (ttl.millis() + 999) / 1000 * 1000;
    }
    ttl.millis()
}

/// Acquire a free lease or take over an expired one: epoch + 1, owner replaced.
pub async fn acquire(pool: &PgPool, run_id: Uuid, owner: &str, ttl: Ttl) -> Result<LeaseTerms, ProtocolError> {
    // The previous holder, for workflow_takeover_duration_seconds (informational only).
    let previous = inspect(pool, run_id).await.ok().flatten();
    let r = crate::notices::durable("acquire", run_id, async {
        // MUTANT takeover-without-expiry / trust-prefilter-lock: a held, live lease can be taken over
        // (for the latter, whoever passed the pre-filter takes the lease).
        let sql = if write_path::api() {
            "SELECT epoch, expires_at FROM fp_lease_acquire($1, $2, $3)".to_string()
        } else if mutant::active(Mutant::TakeoverWithoutExpiry) || mutant::active(Mutant::TrustPrefilterLock) {
            sql::LEASE_ACQUIRE.replace("(owner IS NULL OR expires_at <= clock_timestamp())", "true")
        } else {
            sql::stmt("lease_acquire", sql::LEASE_ACQUIRE).into_owned()
        };
        let row: Option<(i64, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(&sql)
            .bind(run_id)
            .bind(owner)
            .bind(term_ms(ttl))
            .fetch_optional(pool)
            .await
            .map_err(|e| classify_write_error(e, "acquire", run_id))?;

        match row {
            Some((epoch, expires_at)) => {
                Ok(LeaseTerms { lease: Lease { run_id, owner: owner.to_string(), epoch }, expires_at })
            }
            None => match inspect(pool, run_id).await? {
                None => Err(ProtocolError::RunNotFound(run_id)),
                // Free or expired, and still refused: fp_lease_acquire leases no final run.
                Some(row) if row.owner.is_none() || !row.live => final_run(pool, run_id, row).await,
                Some(row) => {
                    Err(ProtocolError::LeaseBusy { run_id, holder: row.owner.unwrap_or_default(), epoch: row.epoch })
                }
            },
        }
    })
    .await;
    crate::metrics::METRICS.acquired(&r);
    if let (Ok(terms), Some(prev)) = (&r, &previous) {
        if prev.owner.is_some() {
            let acquired_at = terms.expires_at - chrono::Duration::milliseconds(ttl.millis());
            let gap = (acquired_at - prev.expires_at).num_microseconds().unwrap_or(0) as f64 / 1e6;
            crate::metrics::METRICS.takeover_duration.observe(gap);
        }
    }
    r
}

/// Why an acquire of a free or expired lease took nothing: the run has ended (`invalid_state`), or
/// another process took the lease in between (`busy`).
async fn final_run(pool: &PgPool, run_id: Uuid, row: LeaseRow) -> Result<LeaseTerms, ProtocolError> {
    let run = crate::runs::read_run(pool, run_id).await?;
    if crate::ids::RunStatus::parse(&run.status).is_some_and(crate::ids::RunStatus::is_terminal) {
        return Err(ProtocolError::InvalidState { run_id, found: run.status, needed: "pending or running".into() });
    }
    Err(ProtocolError::LeaseBusy { run_id, holder: row.owner.unwrap_or_default(), epoch: row.epoch })
}

/// Extend the lease; only the current owner of the current epoch, and only before expiry.
/// Zero rows means the lease is lost and cannot be resurrected.
pub async fn renew(pool: &PgPool, lease: &Lease, ttl: Ttl) -> Result<LeaseTerms, ProtocolError> {
    let r = crate::notices::durable("renew", lease.run_id, async {
        // MUTANT renew-without-epoch: fenced by owner only.
        let sql = if write_path::api() {
            "SELECT expires_at FROM fp_lease_renew($1, $2, $3, $4)".to_string()
        } else if mutant::active(Mutant::RenewWithoutEpoch) {
            sql::LEASE_RENEW.replace("epoch = $3", "$3::bigint IS NOT NULL")
        } else {
            sql::stmt("lease_renew", sql::LEASE_RENEW).into_owned()
        };
        let row: Option<(chrono::DateTime<chrono::Utc>,)> = sqlx::query_as(&sql)
            .bind(lease.run_id)
            .bind(&lease.owner)
            .bind(lease.epoch)
            .bind(term_ms(ttl))
            .fetch_optional(pool)
            .await
            .map_err(|e| classify_write_error(e, "renew", lease.run_id))?;

        match row {
            Some((expires_at,)) => Ok(LeaseTerms { lease: lease.clone(), expires_at }),
            None => Err(lost(lease)),
        }
    })
    .await;
    crate::metrics::METRICS.renewed(&r);
    r
}

/// Renew many leases of one owner in one statement (a worker holding many runs): each lease is
/// still fenced by owner + its own epoch + not yet expired. Returns the leases renewed, with their
/// new expiry; a lease missing from the answer is lost.
pub async fn renew_many(
    pool: &PgPool,
    owner: &str,
    leases: &[(Uuid, i64)],
    ttl: Ttl,
) -> Result<Vec<(Uuid, chrono::DateTime<chrono::Utc>)>, ProtocolError> {
    let (runs, epochs): (Vec<Uuid>, Vec<i64>) = leases.iter().copied().unzip();
    let sql = if write_path::api() {
        std::borrow::Cow::Borrowed("SELECT run_id, expires_at FROM fp_lease_renew_many($1, $2, $3, $4)")
    } else {
        sql::stmt("lease_renew_many", sql::LEASE_RENEW_MANY)
    };
    let r = sqlx::query_as(&sql)
        .bind(owner)
        .bind(&runs)
        .bind(&epochs)
        .bind(term_ms(ttl))
        .fetch_all(pool)
        .await
        .map_err(|e| classify_write_error(e, "renew", Uuid::nil()));
    if let Ok(renewed) = &r {
        crate::metrics::METRICS.renewed_many(renewed.len(), leases.len().saturating_sub(renewed.len()));
    }
    r
}

/// Give the lease up. The epoch is kept: the next acquire continues from it.
pub async fn release(pool: &PgPool, lease: &Lease) -> Result<(), ProtocolError> {
    crate::notices::durable("release", lease.run_id, async {
        // MUTANT release-zeroes-epoch.
        let sql = if mutant::active(Mutant::ReleaseZeroesEpoch) {
            sql::LEASE_RELEASE.replace("updated_at = clock_timestamp()", "updated_at = clock_timestamp(), epoch = 0")
        } else {
            sql::stmt("lease_release", sql::LEASE_RELEASE).into_owned()
        };
        let released = if write_path::api() {
            sqlx::query_scalar::<_, i64>("SELECT fp_lease_release($1, $2, $3)")
                .bind(lease.run_id)
                .bind(&lease.owner)
                .bind(lease.epoch)
                .fetch_one(pool)
                .await
                .map(|n| n as u64)
        } else {
            sqlx::query(&sql)
                .bind(lease.run_id)
                .bind(&lease.owner)
                .bind(lease.epoch)
                .execute(pool)
                .await
                .map(|d| d.rows_affected())
        }
        .map_err(|e| classify_write_error(e, "release", lease.run_id))?;
        if released == 1 {
            Ok(())
        } else {
            Err(lost(lease))
        }
    })
    .await
}

/// Read the lease row of a run from the primary.
pub async fn inspect(pool: &PgPool, run_id: Uuid) -> Result<Option<LeaseRow>, ProtocolError> {
    let row: Option<(Option<String>, i64, chrono::DateTime<chrono::Utc>, bool)> = sqlx::query_as(
        "SELECT owner, epoch, expires_at, expires_at > clock_timestamp() FROM worker_leases WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(owner, epoch, expires_at, live)| LeaseRow { run_id, owner, epoch, expires_at, live }))
}

/// The lease row as the primary has it now, read back after an outcome was left unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseNow {
    pub owner: Option<String>,
    pub epoch: i64,
    /// Unexpired on the database clock.
    pub live: bool,
}

/// Read the lease row back (owner, epoch, whether it is live on the database clock).
pub async fn read_back(pool: &PgPool, run_id: Uuid) -> Result<LeaseNow, ProtocolError> {
    let row: Option<(Option<String>, i64, bool)> = sqlx::query_as(
        "SELECT owner, epoch, coalesce(expires_at > clock_timestamp(), false) FROM worker_leases WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_optional(pool)
    .await?;
    let (owner, epoch, live) = row.ok_or(ProtocolError::RunNotFound(run_id))?;
    Ok(LeaseNow { owner, epoch, live })
}

impl LeaseNow {
    /// Whether `lease` is still the live term.
    pub fn holds(&self, lease: &Lease) -> bool {
        self.live && self.epoch == lease.epoch && self.owner.as_deref() == Some(lease.owner.as_str())
    }
}

pub(crate) fn lost(lease: &Lease) -> ProtocolError {
    ProtocolError::LeaseLost { run_id: lease.run_id, owner: lease.owner.clone(), epoch: lease.epoch }
}
