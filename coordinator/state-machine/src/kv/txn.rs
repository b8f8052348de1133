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
use serde::{Deserialize, Serialize};

use super::{
    Deleted, KeySelector, KeySpace, KvError, Put, PutResult, RangePage, TXN_COMPARES_MAX,
    TXN_OPS_MAX, Undo, Writer,
};
use crate::LeaseId;

/// A comparison operator, with its wire spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    /// Equal.
    #[serde(rename = "==")]
    Eq,
    /// Not equal.
    #[serde(rename = "!=")]
    Ne,
    /// The key's is less than the compare's.
    #[serde(rename = "<")]
    Lt,
    /// The key's is greater than the compare's.
    #[serde(rename = ">")]
    Gt,
}

impl CompareOp {
    /// Whether the key's field, ordered against the compare's value as `ordering`, passes.
    fn passes(self, ordering: Ordering) -> bool {
        match self {
            CompareOp::Eq => ordering == Ordering::Equal,
            CompareOp::Ne => ordering != Ordering::Equal,
            CompareOp::Lt => ordering == Ordering::Less,
            CompareOp::Gt => ordering == Ordering::Greater,
        }
    }
}

/// The field a key compare reads, with the value it is compared to (on the wire
/// `"target": "version", "value": 3`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "target", content = "value", rename_all = "snake_case")]
pub enum CompareTarget {
    /// The value, in byte order.
    Value(String),
    /// Puts since creation (0: missing).
    Version(u64),
    /// The creating revision (0: missing).
    CreateRevision(u64),
    /// The last put's revision (0: missing).
    ModRevision(u64),
    /// The key's lease (none: unbound or missing).
    Lease(Option<LeaseId>),
}

/// A resource a holder compare names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Its kind.
    pub kind: ResourceKind,
    /// Its name.
    pub name: String,
}

/// One condition of a txn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Compare {
    /// A field of a key against a value.
    Key {
        /// The key read (it may be reserved: reads are allowed).
        key: String,
        /// How the key's field must relate to the value.
        op: CompareOp,
        /// The field and the value.
        #[serde(flatten)]
        target: CompareTarget,
    },
    /// True while `token` holds the resource.
    Holder {
        /// The resource.
        holder: Holder,
        /// The fencing token that must hold it.
        token: u64,
    },
}

/// One op of a txn branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnOp {
    /// A put.
    Put(Put),
    /// A delete of a key or a prefix.
    Delete(KeySelector),
    /// A read of a key, or a page of a prefix (`limit` 0 is read as 1).
    Get {
        /// The key or prefix.
        selector: KeySelector,
        /// For a prefix: start after this key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        /// For a prefix: most keys in the page.
        limit: usize,
    },
}

/// A txn: compares, and the ops to run when all hold or when one does not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// Conditions, all of which must hold for `success` to run.
    #[serde(default)]
    pub compare: Vec<Compare>,
    /// Run when every compare holds.
    #[serde(default)]
    pub success: Vec<TxnOp>,
    /// Run otherwise.
    #[serde(default)]
    pub failure: Vec<TxnOp>,
}

/// What one op of the branch that ran answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnResult {
    /// A put's answer.
    Put(PutResult),
    /// A delete's answer.
    Delete(Deleted),
    /// A get's keys (none or one for a key).
    Get(RangePage),
}

/// What a txn answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
            if let Compare::Key { key, .. } = compare {
                self.check_key_length(key)?;
            }
        }
        for branch in [&txn.success, &txn.failure] {
            for op in branch {
                match op {
                    TxnOp::Put(put) => self.check_put(writer, put)?,
                    TxnOp::Delete(selector) => self.check_selector(writer, selector)?,
                    TxnOp::Get { selector, .. } => match selector {
                        KeySelector::Key(key) => self.check_key_length(key)?,
                        KeySelector::Prefix(prefix) => self.check_prefix_length(prefix)?,
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
            CompareTarget::Lease(lease) => entry.and_then(|e| e.lease).cmp(lease),
        };
        op.passes(ordering)
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
            TxnOp::Delete(selector) => {
                TxnResult::Delete(self.delete_in(revision, writer, &selector, undo))
            }
            TxnOp::Get {
                selector: KeySelector::Key(key),
                ..
            } => TxnResult::Get(RangePage {
                kvs: self.get(&key).into_iter().collect(),
                next_after: None,
            }),
            TxnOp::Get {
                selector: KeySelector::Prefix(prefix),
                after,
                limit,
            } => TxnResult::Get(self.range(&prefix, after.as_deref(), limit)),
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
        if let TxnOp::Delete(selector) = op
            && let Some(key) = puts.iter().find(|key| selector.matches(key))
        {
            return Err(KvError::TxnDuplicateKey {
                key: key.to_string(),
            });
        }
    }
    Ok(())
}
