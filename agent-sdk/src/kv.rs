//! [`Kv`]: keys through the service (`kv.put`, `kv.get`, `kv.delete`, `kv.txn`), each answer
//! typed and carrying the revision it happened at, and [`Txn`], a small builder for a txn's
//! compares and branches.
//!
//! A handle comes from [`Agent::kv`] or [`Session::kv`]. Both read and write the same keys;
//! the session's handle also knows the session's lease, so [`Kv::put_leased`] binds a key to
//! it: the service deletes the key in the same entry that ends the lease (expiry or revoke),
//! which is what presence keys need. A plain [`Agent::kv`] needs no lease at all, as a reader,
//! a config writer or the CLI.
//!
//! ```text
//!  kv.get(key) ─────────▶ kv.get {key}                      ─▶ KeyRead {revision, kv?}
//!  kv.get_prefix(p) ────▶ kv.get {prefix, after?} × pages   ─▶ KvPage {revision, kvs}
//!  kv.put(k, v) ────────▶ kv.put {key, value}               ─▶ KvPutDone {revision, prev_kv?}
//!  kv.put_leased(k, v) ─▶ kv.put {key, value, lease}   (the session's lease)
//!  kv.delete(k) ────────▶ kv.delete {key} | {prefix}        ─▶ KvDeleted {revision, deleted}
//!  kv.txn(txn) ─────────▶ kv.txn {compare, success, failure}─▶ KvTxnDone {revision, succeeded}
//! ```
//!
//! Every request goes through [`Agent::request`]: resends under the same id (the service
//! answers a retried write with its first outcome, so a put is never applied twice),
//! backoff and broker failover. What the service would refuse as `bad_request` (an empty key,
//! a `$` key, a txn of 65 ops) is refused here with the same code and message, unsent.

use hivekeeper_protocol::kv::{
    Compare, CompareOp, CompareTarget, Delete, Get, Holder, KeySelector, Put, TxnOp,
};
use hivekeeper_protocol::{
    ErrorCode, KeyValue, KvDeleted, KvPage, KvPutDone, KvTxnDone, Op, ResourceKind, Success,
    UnexpectedReply,
};
use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::error::AgentError;
use crate::session::Session;

/// Keys through one agent, and through its session's lease when taken from a [`Session`].
///
/// Cheap to clone: an [`Agent`] and, from [`Session::kv`], a [`Session`] (which keeps the
/// lease alive while the handle exists).
#[derive(Debug, Clone)]
pub struct Kv {
    /// The connection every request goes through.
    agent: Agent,
    /// The session whose lease [`Kv::put_leased`] binds keys to; `None` from [`Agent::kv`].
    session: Option<Session>,
}

/// One key read with [`Kv::get`], and the revision the read saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRead {
    /// The service's revision when it read: a watch from it misses no later change.
    pub revision: u64,
    /// The key, or `None` when it does not exist.
    pub kv: Option<KeyValue>,
}

impl Agent {
    /// Keys through this agent, without a lease: [`Kv::put_leased`] is refused with
    /// [`AgentError::NoSession`]. Use [`Session::kv`] for keys that must vanish with the agent.
    pub fn kv(&self) -> Kv {
        Kv {
            agent: self.clone(),
            session: None,
        }
    }
}

impl Session {
    /// Keys through this session's agent, with [`Kv::put_leased`] bound to this session's
    /// lease. The handle holds the session, so the lease is kept alive while it exists.
    pub fn kv(&self) -> Kv {
        Kv {
            agent: self.agent().clone(),
            session: Some(self.clone()),
        }
    }
}

impl Kv {
    /// The agent the requests go through.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The lease [`Kv::put_leased`] binds keys to, when the handle came from a session.
    pub fn lease(&self) -> Option<&str> {
        self.session.as_ref().map(Session::lease)
    }

    /// `kv.get {key}`: one key (linearizable), or `None` with the revision the read saw.
    pub async fn get(&self, key: impl Into<String>) -> Result<KeyRead, AgentError> {
        let get = Get::new(KeySelector::Key(key.into()), None, None);
        let KvPage { revision, kvs, .. } = self.get_with(get, false).await?;
        Ok(KeyRead {
            revision,
            kv: kvs.into_iter().next(),
        })
    }

    /// One page of the keys with `prefix` in byte order: those after `after` (the previous
    /// page's `next_after`), at most `limit` (absent: the service's maximum, 1,000).
    pub async fn get_page(
        &self,
        prefix: impl Into<String>,
        after: Option<String>,
        limit: Option<u32>,
    ) -> Result<KvPage, AgentError> {
        let get = Get::new(KeySelector::Prefix(prefix.into()), after, limit);
        self.get_with(get, false).await
    }

    /// Every key with `prefix` (the empty prefix: every key), page after page until the last.
    ///
    /// The answer's `revision` is the first page's: each page is linearizable on its own, but
    /// later pages may already show changes made after it. A watch from that revision replays
    /// those changes, so a reader that applies the watch's events (as [`crate::KvCache`]
    /// does, skipping a put older than the key it holds) ends exact.
    pub async fn get_prefix(&self, prefix: impl Into<String>) -> Result<KvPage, AgentError> {
        let prefix = prefix.into();
        let first = self.get_page(prefix.clone(), None, None).await?;
        let revision = first.revision;
        let mut kvs = first.kvs;
        let mut after = first.next_after;
        while let Some(next) = after.take() {
            let page = self.get_page(prefix.clone(), Some(next), None).await?;
            kvs.extend(page.kvs);
            after = page.next_after;
        }
        Ok(KvPage {
            revision,
            kvs,
            next_after: None,
        })
    }

    /// `kv.get` as given, `serializable` answering from the receiving member's replica (faster,
    /// possibly stale) rather than after a read-index round.
    pub async fn get_with(&self, get: Get, serializable: bool) -> Result<KvPage, AgentError> {
        let Get {
            key,
            prefix,
            after,
            limit,
        } = get;
        let op = Op::KvGet {
            key,
            prefix,
            after,
            limit,
            serializable: serializable.then_some(true),
        };
        self.send(op).await
    }

    /// `kv.put`: sets `key` to `value`, unbound from any lease (a put without a lease unbinds
    /// the key, as in etcd).
    pub async fn put(
        &self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<KvPutDone, AgentError> {
        self.put_with(put(key, value)).await
    }

    /// `kv.put` bound to the session's lease: the key is deleted (with a delete event) when
    /// the session's lease ends, by expiry or revoke. A presence key.
    ///
    /// Refused with [`AgentError::NoSession`] on a handle from [`Agent::kv`], and with
    /// [`AgentError::Lost`] once the session is lost (the key could not outlive it anyway).
    pub async fn put_leased(
        &self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<KvPutDone, AgentError> {
        let lease = self.live_lease()?;
        self.put_with(Put {
            lease: Some(lease),
            ..put(key, value)
        })
        .await
    }

    /// `kv.put` with every field: a lease of the caller's own, and `prev_kv` to get the key as
    /// it was before.
    pub async fn put_with(&self, put: Put) -> Result<KvPutDone, AgentError> {
        let Put {
            key,
            value,
            lease,
            prev_kv,
        } = put;
        let op = Op::KvPut {
            key,
            value,
            lease,
            prev_kv: prev_kv.then_some(true),
        };
        self.send(op).await
    }

    /// `kv.delete {key}`: `deleted` is 0 when it did not exist.
    pub async fn delete(&self, key: impl Into<String>) -> Result<KvDeleted, AgentError> {
        self.delete_selected(KeySelector::Key(key.into())).await
    }

    /// `kv.delete {prefix}`: every key with `prefix` (the service's `$` keys excepted), in one
    /// revision.
    pub async fn delete_prefix(&self, prefix: impl Into<String>) -> Result<KvDeleted, AgentError> {
        self.delete_selected(KeySelector::Prefix(prefix.into()))
            .await
    }

    async fn delete_selected(&self, selector: KeySelector) -> Result<KvDeleted, AgentError> {
        let Delete { key, prefix } = selector.into();
        self.send(Op::KvDelete { key, prefix }).await
    }

    /// `kv.txn`: the compares, then one branch, atomically in one revision.
    pub async fn txn(&self, txn: Txn) -> Result<KvTxnDone, AgentError> {
        let Txn {
            compare,
            success,
            failure,
        } = txn;
        self.send(Op::KvTxn {
            compare,
            success,
            failure,
        })
        .await
    }

    /// The session's lease, while the session is live.
    fn live_lease(&self) -> Result<String, AgentError> {
        let session = self.session.as_ref().ok_or(AgentError::NoSession)?;
        let state = session.state();
        if !state.is_live() {
            return Err(AgentError::Lost(state));
        }
        Ok(session.lease().to_string())
    }

    /// Checks `op` locally, sends it, reads its answer as `T`; a `lease_not_found` tells the
    /// session its lease is gone.
    async fn send<T>(&self, op: Op) -> Result<T, AgentError>
    where
        T: TryFrom<Success, Error = UnexpectedReply>,
    {
        AgentError::check_locally(&op)?;
        let answer = self.agent.request_as(op).await;
        if let (Err(e), Some(session)) = (&answer, &self.session)
            && e.code() == Some(ErrorCode::LeaseNotFound)
        {
            session.inner.lease_gone();
        }
        answer
    }
}

/// A put of `value` to `key` without lease or `prev_kv`, for [`Kv::put_with`] and
/// [`Txn::then`] with struct update syntax.
pub fn put(key: impl Into<String>, value: impl Into<String>) -> Put {
    Put {
        key: key.into(),
        value: value.into(),
        lease: None,
        prev_kv: false,
    }
}

/// A `kv.txn`: compares, and the ops run when all hold (`success`) or otherwise (`failure`).
/// Its JSON form is the op's (`{"compare": [...], "success": [...], "failure": [...]}`), so a
/// txn read from a file deserializes into it.
///
/// ```
/// use hivekeeper_agent::Txn;
/// use hivekeeper_agent::protocol::kv::CompareOp;
/// // A counter's increment from version 3: succeeds only if nobody wrote in between.
/// let txn = Txn::new()
///     .if_version("hive/visits", CompareOp::Eq, 3)
///     .then_put("hive/visits", "4")
///     .else_get("hive/visits");
/// assert_eq!(txn.compare.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Txn {
    /// Conditions, at most 64; all must hold for `success` to run (none: it runs).
    #[serde(default)]
    pub compare: Vec<Compare>,
    /// Ops run when every compare holds, at most 64.
    #[serde(default)]
    pub success: Vec<TxnOp>,
    /// Ops run otherwise, at most 64.
    #[serde(default)]
    pub failure: Vec<TxnOp>,
}

impl Txn {
    /// A txn with no compares and empty branches.
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Adds a compare.
    pub fn when(mut self, compare: Compare) -> Txn {
        self.compare.push(compare);
        self
    }

    /// Compares `key`'s field `target` with `op` (`target` holds the value compared to).
    pub fn if_key(self, key: impl Into<String>, op: CompareOp, target: CompareTarget) -> Txn {
        self.when(Compare::Key {
            key: key.into(),
            op,
            target,
        })
    }

    /// Compares `key`'s value (in byte order; a missing key has none, so only `!=` holds).
    pub fn if_value(self, key: impl Into<String>, op: CompareOp, value: impl Into<String>) -> Txn {
        self.if_key(key, op, CompareTarget::Value(value.into()))
    }

    /// Compares `key`'s version, its puts since creation: `== 0` means the key is missing.
    pub fn if_version(self, key: impl Into<String>, op: CompareOp, version: u64) -> Txn {
        self.if_key(key, op, CompareTarget::Version(version))
    }

    /// Compares `key`'s creating revision (0: missing).
    pub fn if_create_revision(self, key: impl Into<String>, op: CompareOp, revision: u64) -> Txn {
        self.if_key(key, op, CompareTarget::CreateRevision(revision))
    }

    /// Compares `key`'s last put's revision (0: missing).
    pub fn if_mod_revision(self, key: impl Into<String>, op: CompareOp, revision: u64) -> Txn {
        self.if_key(key, op, CompareTarget::ModRevision(revision))
    }

    /// Holds while fencing token `token` holds resource `name` of `kind`: a write fenced by a
    /// lock, checked inside the service.
    pub fn if_holder(self, kind: ResourceKind, name: impl Into<String>, token: u64) -> Txn {
        self.when(Compare::Holder {
            holder: Holder {
                kind,
                name: name.into(),
            },
            token,
        })
    }

    /// Adds `op` to the success branch.
    pub fn then(mut self, op: TxnOp) -> Txn {
        self.success.push(op);
        self
    }

    /// Adds `op` to the failure branch.
    pub fn otherwise(mut self, op: TxnOp) -> Txn {
        self.failure.push(op);
        self
    }

    /// On success, put `value` to `key` (without lease; see [`put`] for more).
    pub fn then_put(self, key: impl Into<String>, value: impl Into<String>) -> Txn {
        self.then(TxnOp::Put(put(key, value)))
    }

    /// On success, delete `key`.
    pub fn then_delete(self, key: impl Into<String>) -> Txn {
        self.then(TxnOp::Delete(KeySelector::Key(key.into()).into()))
    }

    /// On success, read `key`.
    pub fn then_get(self, key: impl Into<String>) -> Txn {
        self.then(TxnOp::Get(Get::new(
            KeySelector::Key(key.into()),
            None,
            None,
        )))
    }

    /// On failure, put `value` to `key`.
    pub fn else_put(self, key: impl Into<String>, value: impl Into<String>) -> Txn {
        self.otherwise(TxnOp::Put(put(key, value)))
    }

    /// On failure, delete `key`.
    pub fn else_delete(self, key: impl Into<String>) -> Txn {
        self.otherwise(TxnOp::Delete(KeySelector::Key(key.into()).into()))
    }

    /// On failure, read `key` (to learn why a compare failed, in the same revision).
    pub fn else_get(self, key: impl Into<String>) -> Txn {
        self.otherwise(TxnOp::Get(Get::new(
            KeySelector::Key(key.into()),
            None,
            None,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_txn_is_the_wire_json_of_kv_txn() {
        let txn = Txn::new()
            .if_version("n", CompareOp::Eq, 3)
            .if_holder(ResourceKind::Lock, "gw", 42)
            .then_put("n", "4")
            .then_delete("old")
            .else_get("n");
        let json = serde_json::to_value(&txn).expect("a txn serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "compare": [
                    {"key": "n", "op": "==", "target": "version", "value": 3},
                    {"holder": {"kind": "lock", "name": "gw"}, "token": 42},
                ],
                "success": [
                    {"put": {"key": "n", "value": "4"}},
                    {"delete": {"key": "old"}},
                ],
                "failure": [{"get": {"key": "n"}}],
            })
        );
        let back: Txn = serde_json::from_value(json).expect("and reads back");
        assert_eq!(back, txn);
    }

    #[test]
    fn a_txn_file_with_an_unknown_field_is_refused() {
        let refused = serde_json::from_str::<Txn>(r#"{"compare": [], "sucess": []}"#);
        assert!(refused.is_err(), "{refused:?}");
    }
}
