//! Transactions: compares, then one branch of ops, all in one revision.
//!
//! A txn is checked whole before anything runs: at most [`TXN_COMPARES_MAX`] compares and
//! [`TXN_OPS_MAX`] ops per branch, every key and value of both branches within its bounds, no
//! client write of a reserved key, and no key written twice in one branch. Then every compare
//! is evaluated against the keys as they are, and the success branch runs when all hold (the
//! empty list holds), the failure branch otherwise. The ops run in order, each seeing the ones
//! before it (a get after a put reads the put), and their events share the txn's revision. A
//! capacity refusal part-way through undoes the branch: the txn is all or nothing.
//!
//! Compares on a missing key, decided once (as etcd for the numbers): its `version`,
//! `create_revision` and `mod_revision` are 0 and its `lease` is none, compared as usual; its
//! value is absent, which is `!=` every string and neither `==`, `<` nor `>` any. Values
//! compare in byte order, leases by id with none before every lease.
//!
//! A holder compare (`{holder: {kind, name}, token}`) is true while that token holds that
//! resource; the key space cannot see holds, so the caller evaluates it (the `holds` closure
//! of [`KeySpace::txn`]): a write fenced by a lock, inside the service.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use hivekeeper_protocol::ResourceKind;
use hivekeeper_protocol::kv::{ANSWER_BYTES_MAX, KV_PAGE_MAX, json_len};

use super::write::parse_lease;
use super::{
    Compare, CompareOp, CompareTarget, KeySelector, KeySpace, KvError, RangePage, TXN_COMPARES_MAX,
    TXN_OPS_MAX, TxnOp, TxnResult, Undo, Writer,
};

/// Whether the key's field, ordered against the compare's value as `ordering`, passes `op`.
fn passes(op: CompareOp, ordering: Ordering) -> bool {
    match op {
        CompareOp::Eq => ordering == Ordering::Equal,
        CompareOp::Ne => ordering != Ordering::Equal,
        CompareOp::Lt => ordering == Ordering::Less,
        CompareOp::Gt => ordering == Ordering::Greater,
    }
}

/// A txn: compares, and the ops to run when all hold or when one does not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// Conditions, all of which must hold for `success` to run.
    pub compare: Vec<Compare>,
    /// Run when every compare holds.
    pub success: Vec<TxnOp>,
    /// Run otherwise.
    pub failure: Vec<TxnOp>,
}

/// What a txn answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOutcome {
    /// Whether every compare held (the success branch ran).
    pub succeeded: bool,
    /// One result per op of the branch that ran, in order.
    pub results: Vec<TxnResult>,
}

impl KeySpace {
    /// Runs a txn at `revision` (module doc). `holds(kind, name, token)` answers the holder
    /// compares: whether `token` holds that resource now.
    pub fn txn(
        &mut self,
        revision: u64,
        writer: Writer,
        txn: Txn,
        holds: &dyn Fn(ResourceKind, &str, u64) -> bool,
    ) -> Result<TxnOutcome, KvError> {
        self.check_txn(writer, &txn)?;
        let succeeded = txn
            .compare
            .iter()
            .all(|compare| self.evaluate(compare, holds));
        let branch = if succeeded { txn.success } else { txn.failure };
        self.mutate(revision, |space, undo| {
            let results = branch
                .into_iter()
                .map(|op| space.run(revision, writer, op, undo))
                .collect::<Result<Vec<_>, _>>()?;
            let bytes: usize = results.iter().map(json_len).sum();
            if bytes > ANSWER_BYTES_MAX {
                return Err(KvError::TxnResultsTooLarge {
                    bytes,
                    max: ANSWER_BYTES_MAX,
                });
            }
            Ok(TxnOutcome { succeeded, results })
        })
    }

    /// The checks that need no state, on both branches.
    fn check_txn(&self, writer: Writer, txn: &Txn) -> Result<(), KvError> {
        if txn.compare.len() > TXN_COMPARES_MAX {
            return Err(KvError::TxnCompares {
                count: txn.compare.len(),
                max: TXN_COMPARES_MAX,
            });
        }
        let ops = txn.success.len().max(txn.failure.len());
        if ops > TXN_OPS_MAX {
            return Err(KvError::TxnOps {
                count: ops,
                max: TXN_OPS_MAX,
            });
        }
        for compare in &txn.compare {
            if let Compare::Key { key, target, .. } = compare {
                self.check_key_length(key)?;
                if let CompareTarget::Lease(lease) = target {
                    parse_lease(lease.as_deref())?;
                }
            }
        }
        for branch in [&txn.success, &txn.failure] {
            for op in branch {
                match op {
                    TxnOp::Put(put) => self.check_put(writer, put)?,
                    TxnOp::Delete(delete) => {
                        let selector = selector_of(delete.selector())?;
                        self.check_selector(writer, &selector)?
                    }
                    TxnOp::Get(get) => match selector_of(get.selector())? {
                        KeySelector::Key(key) => self.check_key_length(&key)?,
                        KeySelector::Prefix(prefix) => self.check_prefix_length(&prefix)?,
                    },
                }
            }
            check_distinct_writes(branch)?;
        }
        Ok(())
    }

    /// Whether one compare holds now.
    fn evaluate(&self, compare: &Compare, holds: &dyn Fn(ResourceKind, &str, u64) -> bool) -> bool {
        let (key, op, target) = match compare {
            Compare::Holder { holder, token } => return holds(holder.kind, &holder.name, *token),
            Compare::Key { key, op, target } => (key, *op, target),
        };
        let entry = self.keys.get(key.as_str());
        let ordering = match target {
            CompareTarget::Value(value) => match entry {
                Some(entry) => entry.value.as_str().cmp(value.as_str()),
                None => return op == CompareOp::Ne,
            },
            CompareTarget::Version(version) => entry.map_or(0, |e| e.version).cmp(version),
            CompareTarget::CreateRevision(revision) => {
                entry.map_or(0, |e| e.create_revision).cmp(revision)
            }
            CompareTarget::ModRevision(revision) => {
                entry.map_or(0, |e| e.mod_revision).cmp(revision)
            }
            CompareTarget::Lease(lease) => {
                let lease = parse_lease(lease.as_deref()).expect("checked by `check_txn`");
                entry.and_then(|e| e.lease).cmp(&lease)
            }
        };
        passes(op, ordering)
    }

    /// Runs one op of the chosen branch.
    fn run(
        &mut self,
        revision: u64,
        writer: Writer,
        op: TxnOp,
        undo: &mut Undo,
    ) -> Result<TxnResult, KvError> {
        Ok(match op {
            TxnOp::Put(put) => TxnResult::Put(self.put_in(revision, put, undo)?),
            TxnOp::Delete(delete) => {
                let selector = selector_of(delete.selector())?;
                TxnResult::Delete(self.delete_in(revision, writer, &selector, undo))
            }
            TxnOp::Get(get) => match selector_of(get.selector())? {
                KeySelector::Key(key) => TxnResult::Get(RangePage {
                    kvs: self.get(&key).into_iter().collect(),
                    next_after: None,
                }),
                KeySelector::Prefix(prefix) => {
                    let limit = get.limit.unwrap_or(KV_PAGE_MAX) as usize;
                    TxnResult::Get(self.range(&prefix, get.after.as_deref(), limit))
                }
            },
        })
    }
}

/// One revision has one event per key: no two puts of a key in a branch, and no put of a key
/// a delete of the branch covers (deletes may overlap each other: the second finds nothing).
fn check_distinct_writes(branch: &[TxnOp]) -> Result<(), KvError> {
    let mut puts = BTreeSet::new();
    for op in branch {
        if let TxnOp::Put(put) = op
            && !puts.insert(put.key.as_str())
        {
            return Err(KvError::TxnDuplicateKey {
                key: put.key.clone(),
            });
        }
    }
    for op in branch {
        if let TxnOp::Delete(delete) = op
            && let Ok(selector) = selector_of(delete.selector())
            && let Some(key) = puts.iter().find(|key| selector.matches(key))
        {
            return Err(KvError::TxnDuplicateKey {
                key: key.to_string(),
            });
        }
    }
    Ok(())
}

/// A txn op's selector, or the refusal when it names neither or both of `key` and `prefix`.
fn selector_of(
    selector: Result<KeySelector, hivekeeper_protocol::validate::InvalidField>,
) -> Result<KeySelector, KvError> {
    selector.map_err(|_| KvError::Selector)
}
