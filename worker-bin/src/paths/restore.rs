//! A path's restore and the operator's recovery after it. The model's backup holds the run's rows
//! as the run was created; a restore returns the server to it while the world (the tools' side
//! effects, the processes' beliefs) stays as it was. The driver plays it on a second database of
//! the row's server standing for the restored one: at the path's start it keeps the run's rows as
//! created; at the restore they are written there by the restore's own session (the
//! environment's step, not a protocol one), and every process of the path turns to that database;
//! the recovery is the reference's own (`protocol::restore::recover_runs`, this run only), with
//! the remote history read from the fake tools' ledger.

use fenceproof_model::state::State;
use fenceproof_protocol::restore::{recover_runs, RemoteHistory, DEFAULT_EPOCH_MARGIN};
use fenceproof_protocol::ProtocolError;
use serde_json::Value;

use super::play::{Play, Slot};

/// The tables a run's creation writes, in the order a restore writes them back.
const TABLES: [&str; 3] = ["agent_tasks", "agent_runs", "worker_leases"];

impl Play<'_> {
    /// The session name of the restore and the recovery (the environment's, for trace validation).
    pub fn restorer(&self) -> String {
        format!("{}.restore", self.d.owner)
    }

    /// At the path's start: the run's rows as created, the backup its restore returns to.
    pub async fn take_backup(&mut self) -> Result<(), ProtocolError> {
        let (t, r, l): (Value, Value, Value) = sqlx::query_as(
            "SELECT row_to_json(t)::jsonb, row_to_json(r)::jsonb, row_to_json(l)::jsonb
               FROM agent_runs r JOIN agent_tasks t USING (task_id) JOIN worker_leases l USING (run_id)
              WHERE r.run_id = $1",
        )
        .bind(self.run_id)
        .fetch_one(self.d.observer())
        .await?;
        self.backup = Some([t, r, l]);
        Ok(())
    }

    /// The restore: the backup's rows on the restored database, in one transaction of the
    /// restore's session; every process of the path turns to that database. No transaction is
    /// open (the planner restores only between them).
    pub async fn restore(&mut self) -> Result<bool, ProtocolError> {
        let (Some(r), Some(rows)) = (self.d.restored.as_ref(), self.backup.clone()) else {
            return Err(ProtocolError::InvalidIntent("a restore without a restored database or a backup".into()));
        };
        let pool = self.d.pool_as(&r.control_base, &self.restorer()).await?;
        let mut tx = pool.begin().await?;
        for (table, row) in TABLES.iter().zip(rows) {
            sqlx::query(&format!("INSERT INTO {table} SELECT * FROM json_populate_record(NULL::{table}, $1::json)"))
                .bind(row)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        self.d.on_restored.store(true, std::sync::atomic::Ordering::SeqCst);
        self.control = self.d.pool_as(&r.control_base, &format!("control-plane-{}", self.d.owner)).await?;
        Ok(true)
    }

    /// The operator's recovery of this run on the restored database, from the tools' ledger; the
    /// processes the model's recovery stops (every one with a lease or a claim) forget theirs.
    pub async fn recover(&mut self, s: &State) -> Result<bool, ProtocolError> {
        let Some(r) = self.d.restored.as_ref() else {
            return Err(ProtocolError::InvalidIntent("a recovery without a restored database".into()));
        };
        let remote = remote_history(&r.ledger, &self.run_id.to_string())?;
        let pool = self.d.pool_as(&r.control_base, &self.restorer()).await?;
        recover_runs(&pool, Some(&[self.run_id]), &remote, DEFAULT_EPOCH_MARGIN).await?;
        for (i, p) in s.procs.iter().enumerate() {
            if p.lease.is_some() || p.claim.is_some() {
                self.slots[i] = Slot { session: self.slots[i].session, ..Slot::default() };
            }
        }
        Ok(true)
    }
}

/// What the tools' ledger at `ledger` shows created for operations of run `run`.
fn remote_history(ledger: &std::path::Path, run: &str) -> Result<RemoteHistory, ProtocolError> {
    let text = std::fs::read_to_string(ledger)
        .map_err(|e| ProtocolError::InvalidIntent(format!("the tools' ledger {}: {e}", ledger.display())))?;
    let entries: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    Ok(RemoteHistory::from_ledger(&entries, |op| op.contains(run)))
}
