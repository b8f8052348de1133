//! [`KvAccess`]: which keys an account may read and write, and the check of a key op against it.
//!
//! An account may carry key-prefix permissions (`kv_read`, `kv_write`, set by
//! `admin.agent.add`). Each list on its own: an empty list means the role's default for that
//! permission, a non-empty one limits it to the keys that start with one of its prefixes.
//!
//! | role | reads (no `kv_read`) | writes (no `kv_write`) | prefixes allowed |
//! |---|---|---|---|
//! | `agent` | every key | every key | `kv_read`, `kv_write` |
//! | `observer` | every key | no key | `kv_read` only |
//! | `admin` | every key | every key | none |
//!
//! A key is within a list when it starts with one of its prefixes; a prefix (of a `kv.get`,
//! `kv.delete`, `watch.poll` or a txn's op) is within it when it starts with one of them, so a
//! prefix read or delete never reaches a key outside the list. The node runs
//! [`KvAccess::check`] before the log, with authentication on only.

use std::fmt;

use crate::kv::{self, Compare, TxnOp};
use crate::request::Op;
use crate::role::Role;
use crate::validate::InvalidField;

/// Most prefixes in one of an account's `kv_read` or `kv_write` lists.
pub const KV_PREFIXES_MAX: usize = 32;

/// Most bytes in one prefix: a key's maximum.
pub const KV_PREFIX_BYTES_MAX: usize = kv::KEY_BYTES_MAX;

/// Reading or writing, what a refusal names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvAccessKind {
    /// `kv.get`, `watch.poll`, a txn's compare or get.
    Read,
    /// `kv.put`, `kv.delete`, a txn's put or delete.
    Write,
}

impl fmt::Display for KvAccessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvAccessKind::Read => "read",
            KvAccessKind::Write => "write",
        })
    }
}

/// An account's key permissions, as the node checks a request against them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvAccess {
    /// The account's role: its default when a list is empty.
    pub role: Role,
    /// Prefixes the account may read under; empty: the role's default (every key).
    pub read: Vec<String>,
    /// Prefixes the account may write under; empty: the role's default (every key, or none
    /// for an observer).
    pub write: Vec<String>,
}

/// Why a key op was refused: what it touched and what the account may touch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{op} may not {access} {what} {target:?}: {}",
    allowed(self.role, *access, prefixes)
)]
pub struct KvDenied {
    /// The op's wire name.
    pub op: &'static str,
    /// Reading or writing.
    pub access: KvAccessKind,
    /// `key` or `prefix`.
    pub what: &'static str,
    /// The key or prefix refused.
    pub target: String,
    /// The account's role.
    pub role: Role,
    /// The prefixes it may use for `access` (empty: none, for an observer's writes).
    pub prefixes: Vec<String>,
}

/// What the account may do, for a refusal's message.
fn allowed(role: Role, access: KvAccessKind, prefixes: &[String]) -> String {
    if prefixes.is_empty() {
        format!("the {role} role may {access} no key")
    } else {
        format!("its {access} prefixes are {prefixes:?}")
    }
}

impl KvAccess {
    /// The access of an account with no prefixes: its role's defaults.
    pub fn of_role(role: Role) -> Self {
        KvAccess {
            role,
            read: Vec::new(),
            write: Vec::new(),
        }
    }

    /// Checks a key op (`kv.*`, `watch.poll`); every other op passes.
    pub fn check(&self, op: &Op) -> Result<(), KvDenied> {
        let name = op.name();
        match op {
            Op::KvPut { key, .. } => self.allow(name, KvAccessKind::Write, "key", key),
            Op::KvDelete { key, prefix } => self.selector(name, KvAccessKind::Write, key, prefix),
            Op::KvGet { key, prefix, .. } | Op::WatchPoll { key, prefix, .. } => {
                self.selector(name, KvAccessKind::Read, key, prefix)
            }
            Op::KvTxn {
                compare,
                success,
                failure,
            } => {
                for compare in compare {
                    if let Compare::Key { key, .. } = compare {
                        self.allow(name, KvAccessKind::Read, "key", key)?;
                    }
                }
                for txn_op in success.iter().chain(failure) {
                    match txn_op {
                        TxnOp::Put(put) => {
                            self.allow(name, KvAccessKind::Write, "key", &put.key)?
                        }
                        TxnOp::Delete(delete) => {
                            self.selector(name, KvAccessKind::Write, &delete.key, &delete.prefix)?
                        }
                        TxnOp::Get(get) => {
                            self.selector(name, KvAccessKind::Read, &get.key, &get.prefix)?
                        }
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A key or a prefix, whichever the op gives (the decoder has checked it gives one).
    fn selector(
        &self,
        op: &'static str,
        access: KvAccessKind,
        key: &Option<String>,
        prefix: &Option<String>,
    ) -> Result<(), KvDenied> {
        match (key, prefix) {
            (Some(key), _) => self.allow(op, access, "key", key),
            (None, Some(prefix)) => self.allow(op, access, "prefix", prefix),
            (None, None) => Ok(()),
        }
    }

    /// Whether `target` (a key, or a prefix: every key it names) starts with one of the
    /// prefixes of `access`, or the role allows every key.
    fn allow(
        &self,
        op: &'static str,
        access: KvAccessKind,
        what: &'static str,
        target: &str,
    ) -> Result<(), KvDenied> {
        let prefixes = match access {
            KvAccessKind::Read => &self.read,
            KvAccessKind::Write => &self.write,
        };
        let every_key = match access {
            _ if self.role == Role::Admin => true,
            KvAccessKind::Write if self.role == Role::Observer => false,
            _ => prefixes.is_empty(),
        };
        if every_key
            || prefixes
                .iter()
                .any(|prefix| target.starts_with(prefix.as_str()))
        {
            return Ok(());
        }
        Err(KvDenied {
            op,
            access,
            what,
            target: target.to_string(),
            role: self.role,
            prefixes: if self.role == Role::Observer && access == KvAccessKind::Write {
                Vec::new()
            } else {
                prefixes.clone()
            },
        })
    }
}

/// The checks of `admin.agent.add`'s `kv_read` and `kv_write` for an account of `role`: at
/// most [`KV_PREFIXES_MAX`] prefixes of at most [`KV_PREFIX_BYTES_MAX`] bytes each, none for
/// an admin (it may do everything), and no `kv_write` for an observer (it writes no key).
pub fn check_prefixes(
    role: Role,
    kv_read: &[String],
    kv_write: &[String],
) -> Result<(), InvalidField> {
    for (field, prefixes) in [("kv_read", kv_read), ("kv_write", kv_write)] {
        if prefixes.len() > KV_PREFIXES_MAX {
            return Err(InvalidField(format!(
                "`{field}` has {} prefixes, at most {KV_PREFIXES_MAX} are allowed",
                prefixes.len()
            )));
        }
        if let Some(long) = prefixes.iter().find(|p| p.len() > KV_PREFIX_BYTES_MAX) {
            return Err(InvalidField(format!(
                "a `{field}` prefix is {} bytes, at most {KV_PREFIX_BYTES_MAX} are allowed",
                long.len()
            )));
        }
    }
    match role {
        Role::Admin if !kv_read.is_empty() || !kv_write.is_empty() => Err(InvalidField(
            "an admin reads and writes every key: `kv_read` and `kv_write` are for the agent and \
             observer roles"
                .into(),
        )),
        Role::Observer if !kv_write.is_empty() => Err(InvalidField(
            "an observer writes no key: `kv_write` is for the agent role".into(),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Delete, Get, Put};

    fn put(key: &str) -> Op {
        Op::KvPut {
            key: key.into(),
            value: "v".into(),
            lease: None,
            prev_kv: None,
        }
    }

    fn watch(prefix: &str) -> Op {
        Op::WatchPoll {
            key: None,
            prefix: Some(prefix.into()),
            after: 0,
            after_key: None,
            max_events: None,
            wait_ms: None,
        }
    }

    fn limited() -> KvAccess {
        KvAccess {
            role: Role::Agent,
            read: vec!["presence/".into()],
            write: vec!["presence/".into()],
        }
    }

    #[test]
    fn an_agent_without_prefixes_reads_and_writes_every_key() {
        let access = KvAccess::of_role(Role::Agent);
        assert_eq!(access.check(&put("cfg/x")), Ok(()));
        assert_eq!(access.check(&watch("")), Ok(()));
    }

    #[test]
    fn an_agent_with_prefixes_touches_only_keys_under_them() {
        let access = limited();
        assert_eq!(access.check(&put("presence/x")), Ok(()));
        let denied = access
            .check(&put("cfg/x"))
            .expect_err("outside its prefixes");
        assert_eq!(denied.access, KvAccessKind::Write);
        assert_eq!(
            denied.to_string(),
            "kv.put may not write key \"cfg/x\": its write prefixes are [\"presence/\"]"
        );
        assert_eq!(access.check(&watch("presence/")), Ok(()));
        assert_eq!(access.check(&watch("presence/drone")), Ok(()));
        // The empty prefix names every key, most of them outside `presence/`.
        assert!(access.check(&watch("")).is_err());
        assert!(access.check(&watch("cfg/")).is_err());
        let delete_all = Op::KvDelete {
            key: None,
            prefix: Some("pres".into()),
        };
        assert!(access.check(&delete_all).is_err());
    }

    #[test]
    fn a_txn_needs_write_for_its_puts_and_deletes_and_read_for_its_compares_and_gets() {
        let access = KvAccess {
            role: Role::Agent,
            read: vec!["a/".into(), "b/".into()],
            write: vec!["a/".into()],
        };
        let txn = |success: Vec<TxnOp>| Op::KvTxn {
            compare: vec![Compare::Key {
                key: "b/1".into(),
                op: kv::CompareOp::Eq,
                target: kv::CompareTarget::Version(0),
            }],
            success,
            failure: Vec::new(),
        };
        let put = |key: &str| {
            TxnOp::Put(Put {
                key: key.into(),
                value: "v".into(),
                lease: None,
                prev_kv: false,
            })
        };
        let get = TxnOp::Get(Get::new(kv::KeySelector::Prefix("b/".into()), None, None));
        assert_eq!(access.check(&txn(vec![put("a/1"), get])), Ok(()));
        assert!(access.check(&txn(vec![put("b/1")])).is_err());
        let delete = TxnOp::Delete(Delete {
            key: None,
            prefix: Some("c/".into()),
        });
        assert!(access.check(&txn(vec![delete])).is_err());
    }

    #[test]
    fn an_observer_reads_and_never_writes() {
        let access = KvAccess::of_role(Role::Observer);
        assert_eq!(access.check(&watch("")), Ok(()));
        let denied = access
            .check(&put("x"))
            .expect_err("an observer writes nothing");
        assert_eq!(
            denied.to_string(),
            "kv.put may not write key \"x\": the observer role may write no key"
        );
    }

    #[test]
    fn prefixes_are_bounded_and_fit_the_role() {
        let many = vec!["p".to_string(); KV_PREFIXES_MAX + 1];
        assert!(check_prefixes(Role::Agent, &many, &[]).is_err());
        let long = vec!["p".repeat(KV_PREFIX_BYTES_MAX + 1)];
        assert!(check_prefixes(Role::Agent, &[], &long).is_err());
        let one = vec!["p/".to_string()];
        assert_eq!(check_prefixes(Role::Agent, &one, &one), Ok(()));
        assert_eq!(check_prefixes(Role::Observer, &one, &[]), Ok(()));
        assert!(check_prefixes(Role::Observer, &[], &one).is_err());
        assert!(check_prefixes(Role::Admin, &one, &[]).is_err());
    }
}
