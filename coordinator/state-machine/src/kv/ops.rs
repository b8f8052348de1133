//! The `kv.*` ops on the machine: the key space ([`KeySpace`]) reached from the log and from
//! reads, with the machine's leases, holds and revision counter.
//!
//! Invariants (checked by [`StateMachine::check_kv_invariants`]):
//! 1. One revision space: a kv write's revision is the next fencing token
//!    ([`crate::grant::Core::next_token`]), so grants and key changes are strictly ordered
//!    together, across restarts and snapshots; the key space's revision is at most the last
//!    token issued.
//! 2. A key bound to a lease is bound to a live one: the put checks the lease is alive and the
//!    agent's, and the entry that ends a lease deletes its keys, at a fresh revision.
//! 3. A refused kv write changes nothing, the revision counter included.

use std::collections::BTreeSet;

use hivekeeper_protocol::kv::KV_PAGE_MAX;
use hivekeeper_protocol::{ErrorCode, KvDeleted, KvPage, KvPutDone, KvTxnDone, Op, ResourceKind};

use super::{
    Compacted, Compare, Cursor, KeySelector, KeySpace, KvError, Put, RangePage, Txn, TxnOp,
    WatchPage, Writer,
};
use crate::{Ctx, Decision, InvariantViolation, LeaseId, Reply, StateMachine, Text};

impl StateMachine {
    /// The last revision issued: the last fencing token or key change (0 before any). A read's
    /// answer carries it, and a watch from it misses nothing after the read.
    pub fn revision(&self) -> u64 {
        self.core.token_last
    }

    /// The key space, for reads and gauges.
    pub fn key_space(&self) -> &KeySpace {
        &self.kv
    }

    /// One page of a watch on this replica: the events after `after` that `selector` names
    /// ([`KeySpace::events_after`]). When none is left, `progress` and `next` are this
    /// replica's revision (or `after`, if the replica is behind it): nothing the selector names
    /// changed up to there, whatever else did, so an idle watcher's cursor moves with the
    /// service's revision. `Compacted` when events after `after` are no longer kept.
    pub fn watch<'a>(
        &self,
        cursor: impl Into<Cursor<'a>>,
        selector: &KeySelector,
        max_events: usize,
    ) -> Result<WatchPage, Compacted> {
        let cursor = cursor.into();
        let mut page = self.kv.events_after(cursor, selector, max_events)?;
        if page.progress.is_some() {
            let progress = self.revision().max(cursor.after);
            page.progress = Some(progress);
            page.next = progress;
        }
        Ok(page)
    }

    /// A kv write op (`kv.put`, `kv.delete`, `kv.txn`), handed to its handler.
    pub(crate) fn kv_apply(&mut self, ctx: &Ctx, agent: &Text, op: Op) -> Decision {
        match op {
            Op::KvPut {
                key,
                value,
                lease,
                prev_kv,
            } => self.kv_put(
                ctx,
                agent,
                Put {
                    key,
                    value,
                    lease,
                    prev_kv: prev_kv.unwrap_or(false),
                },
            ),
            Op::KvDelete { key, prefix } => self.kv_delete(ctx, key, prefix),
            Op::KvTxn {
                compare,
                success,
                failure,
            } => self.kv_txn(
                ctx,
                agent,
                Txn {
                    compare,
                    success,
                    failure,
                },
            ),
            other => Err(Reply::refused(
                ErrorCode::BadRequest,
                format!("{} is not a kv write", other.name()),
            )),
        }
    }

    /// `kv.put`: the lease, when named, must be alive and the agent's (`lease_not_found`,
    /// `forbidden`).
    fn kv_put(&mut self, ctx: &Ctx, agent: &Text, put: Put) -> Decision {
        if let Some(lease) = &put.lease {
            self.core.live_lease(agent, lease)?;
        }
        let (revision, done) = self.kv_write(ctx, "kv.put", |space, revision| {
            space.put(revision, Writer::Client, put)
        })?;
        Ok(Reply::KvPut(KvPutDone {
            revision,
            prev_kv: done.prev_kv,
        }))
    }

    /// `kv.delete` of one key or a prefix (the service's `$` keys are left alone).
    fn kv_delete(&mut self, ctx: &Ctx, key: Option<String>, prefix: Option<String>) -> Decision {
        let selector = selector("kv.delete", key.as_deref(), prefix.as_deref())?;
        let (revision, done) = self.kv_write(ctx, "kv.delete", |space, revision| {
            space.delete(revision, Writer::Client, &selector)
        })?;
        Ok(Reply::KvDeleted(KvDeleted {
            revision,
            deleted: done.deleted,
        }))
    }

    /// `kv.txn`: every lease a put of either branch names must be alive and the agent's; a
    /// holder compare holds while its token is among the resource's held tokens.
    fn kv_txn(&mut self, ctx: &Ctx, agent: &Text, txn: Txn) -> Decision {
        for op in txn.success.iter().chain(&txn.failure) {
            if let TxnOp::Put(Put {
                lease: Some(lease), ..
            }) = op
            {
                self.core.live_lease(agent, lease)?;
            }
        }
        let holding: BTreeSet<(ResourceKind, String, u64)> = txn
            .compare
            .iter()
            .filter_map(|compare| match compare {
                Compare::Holder { holder, token } => Some((holder, *token)),
                Compare::Key { .. } => None,
            })
            .filter(|(holder, token)| {
                self.resource(holder.kind)
                    .held_tokens(&holder.name)
                    .contains(token)
            })
            .map(|(holder, token)| (holder.kind, holder.name.clone(), token))
            .collect();
        let holds = |kind: ResourceKind, name: &str, token: u64| {
            holding.contains(&(kind, name.to_string(), token))
        };
        let (revision, outcome) = self.kv_write(ctx, "kv.txn", |space, revision| {
            space.txn(revision, Writer::Client, txn, &holds)
        })?;
        Ok(Reply::KvTxn(KvTxnDone {
            revision,
            succeeded: outcome.succeeded,
            results: outcome.results,
        }))
    }

    /// `kv.get`: one key, or a page of a prefix, with the machine's revision.
    pub(crate) fn kv_get(
        &self,
        key: Option<&str>,
        prefix: Option<&str>,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Decision {
        let page = match selector("kv.get", key, prefix)? {
            KeySelector::Key(key) => RangePage {
                kvs: self.kv.get(&key).into_iter().collect(),
                next_after: None,
            },
            KeySelector::Prefix(prefix) => {
                let limit = limit.unwrap_or(KV_PAGE_MAX).min(KV_PAGE_MAX) as usize;
                self.kv.range(&prefix, after, limit)
            }
        };
        Ok(Reply::KvPage(KvPage {
            revision: self.revision(),
            kvs: page.kvs,
            next_after: page.next_after,
        }))
    }

    /// Deletes the keys of leases ending in this entry, at a fresh revision; takes none when
    /// they have no keys, so an entry without keys numbers its tokens as before.
    pub(crate) fn kv_end_leases(&mut self, ctx: &Ctx, leases: &[LeaseId]) {
        if leases
            .iter()
            .all(|lease| self.kv.lease_keys(*lease).next().is_none())
        {
            return;
        }
        let revision = self.core.next_token(ctx.index);
        self.kv
            .end_leases(revision, leases)
            .expect("the token counter is past the key space's revision (kv invariant 1)");
    }

    /// Runs one kv write at the next revision; a refusal gives the revision back.
    fn kv_write<T>(
        &mut self,
        ctx: &Ctx,
        op: &str,
        write: impl FnOnce(&mut KeySpace, u64) -> Result<T, KvError>,
    ) -> Result<(u64, T), Reply> {
        let token_last = self.core.token_last;
        let revision = self.core.next_token(ctx.index);
        match write(&mut self.kv, revision) {
            Ok(done) => Ok((revision, done)),
            Err(refusal) => {
                self.core.token_last = token_last;
                Err(refused(op, &refusal))
            }
        }
    }

    /// The invariants in the module doc, then the key space's own.
    pub(crate) fn check_kv_invariants(&self) -> Result<(), InvariantViolation> {
        if self.kv.revision() > self.core.token_last {
            return Err(violation!(
                "kv ops invariant 1: key space at revision {} past the last token {}",
                self.kv.revision(),
                self.core.token_last
            ));
        }
        for lease in self.kv.leases() {
            if !self.core.leases.contains_key(&lease) {
                return Err(violation!(
                    "kv ops invariant 2: keys bound to lease {lease}, which is not alive"
                ));
            }
        }
        self.kv.check_invariants()
    }
}

/// The selector of an op's `key` and `prefix`, or `bad_request`.
fn selector(op: &str, key: Option<&str>, prefix: Option<&str>) -> Result<KeySelector, Reply> {
    KeySelector::from_fields(key, prefix)
        .map_err(|invalid| Reply::refused(ErrorCode::BadRequest, format!("{op}: {invalid}")))
}

/// A key space refusal as the wire's: full key space, bytes or lease keys are
/// `resource_exhausted`; everything else (sizes, reserved keys, txn shape) is `bad_request`.
fn refused(op: &str, refusal: &KvError) -> Reply {
    let code = match refusal {
        KvError::KeysFull { .. } | KvError::BytesFull { .. } | KvError::LeaseKeysFull { .. } => {
            ErrorCode::ResourceExhausted
        }
        _ => ErrorCode::BadRequest,
    };
    Reply::refused(code, format!("{op}: {refusal}"))
}
