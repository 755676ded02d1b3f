//! The ledger's steps of a path: a process's claim, call, result write and giving up, and the
//! reconciler's unknown marking and convergence, each on the operation the model names.

use fenceproof_protocol::dispatch::{self, RemoteAnswer, ToolAdapter};
use fenceproof_protocol::ids::Ttl;
use fenceproof_protocol::outbox;
use fenceproof_protocol::ProtocolError;

use super::play::Play;

/// A refused ledger write is the database's answer; any other error is the driver's.
fn refused(r: Result<i64, ProtocolError>) -> Result<bool, ProtocolError> {
    match r {
        Ok(_) => Ok(true),
        Err(ProtocolError::LedgerWriteRejected { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

impl Play<'_> {
    fn reconciler(&self) -> String {
        format!("{}.reconciler", self.d.owner)
    }

    fn op_id(&self, n: u8) -> Result<String, ProtocolError> {
        self.ops.get(n as usize).map(|o| o.operation_id.clone()).ok_or_else(|| {
            ProtocolError::InvalidIntent(format!("the path names operation {n}, the run has {}", self.ops.len()))
        })
    }

    /// Process `i` claims one operation: committed when it is operation `n`.
    pub async fn claim(&mut self, i: u8, n: u8) -> Result<bool, ProtocolError> {
        let owner = self.owner(i);
        let pool = self.pool(&owner).await?;
        let ttl: Ttl = self.term()?;
        let mut claims = outbox::claim(&pool, &owner, ttl, 1).await?;
        let want = self.op_id(n)?;
        match claims.pop() {
            None => Ok(false),
            Some(c) if c.operation_id == want => {
                self.slots[i as usize].claim = Some(c);
                Ok(true)
            }
            Some(c) => Err(ProtocolError::InvalidIntent(format!("the claim took {}, not {want}", c.operation_id))),
        }
    }

    /// Process `i` calls the tool of its claim.
    pub async fn call(&mut self, i: u8) -> Result<bool, ProtocolError> {
        let Some(c) = self.slots[i as usize].claim.clone() else { return Ok(false) };
        let answer = self.d.tools.create(&c.tool_name, &c.operation_id, &c.request_body).await;
        if let RemoteAnswer::Unknown(why) = &answer {
            return Err(ProtocolError::InvalidIntent(format!("the tool {} gave no answer: {why}", c.tool_name)));
        }
        self.slots[i as usize].answer = Some(answer);
        Ok(true)
    }

    /// Process `i` writes its call's result under its claim.
    pub async fn write_result(&mut self, i: u8) -> Result<bool, ProtocolError> {
        let slot = &mut self.slots[i as usize];
        let (Some(c), Some(RemoteAnswer::Done(s))) = (slot.claim.take(), slot.answer.take()) else {
            return Err(ProtocolError::InvalidIntent("a result write without a claim and its answer".into()));
        };
        let pool = self.pool(&c.dispatch_owner).await?;
        refused(outbox::record_result(&pool, &c, &s).await)
    }

    /// Process `i` gives its own claim up as unknown.
    pub async fn give_up(&mut self, i: u8) -> Result<bool, ProtocolError> {
        let Some(c) = self.slots[i as usize].claim.take() else { return Ok(false) };
        self.slots[i as usize].answer = None;
        let pool = self.pool(&c.dispatch_owner).await?;
        refused(outbox::mark_unknown_own(&pool, &c, "model path: the call gave no answer").await)
    }

    /// The reconciler marks operation `n`'s expired claim unknown.
    pub async fn mark_unknown(&mut self, n: u8) -> Result<bool, ProtocolError> {
        let op = outbox::read_operation(self.d.observer(), &self.op_id(n)?).await?;
        let Some(owner) = op.dispatch_owner.filter(|_| op.status == "dispatching") else { return Ok(false) };
        let app = self.reconciler();
        let pool = self.pool(&app).await?;
        outbox::mark_expired_unknown(&pool, &op.operation_id, &owner, op.revision).await
    }

    /// The reconciler converges operation `n` by what its tool allows.
    pub async fn reconcile(&mut self, n: u8) -> Result<bool, ProtocolError> {
        let op = outbox::read_operation(self.d.observer(), &self.op_id(n)?).await?;
        if op.status != "unknown" {
            return Ok(false);
        }
        let app = self.reconciler();
        let pool = self.pool(&app).await?;
        Ok(dispatch::reconcile_one(&pool, &self.d.tools, &op).await?.is_ok())
    }
}
