//! Accounts: who may connect, with what secret, and with which role (etcd's auth store is the
//! model: users and roles in the replicated state, so every member checks the same accounts).
//!
//! The machine stays pure: it never sees a secret. The node generates each secret and hashes
//! it at its edge (random salt, PHC string), and the log carries only the hash; the secret
//! reaches the operator in the answer and nowhere else. A member checks a CONNECT against its
//! own replica (`NodeHandle::authenticate`), so an account change takes effect on a member when
//! that member applies it.
//!
//! Removing an account revokes every lease of its agent in the same entry (holds released, waits
//! dropped, next waiters granted), and both a removal and a rotation emit
//! [`Event::AccountChanged`], on which the node closes the agent's connections.
//!
//! Invariants:
//! 1. Every account's name is a valid agent id.
//! 2. Every account's secret hash is a PHC string (`$<algorithm>$...`): never a secret.
//! 3. There are never more than [`ACCOUNTS_MAX`] accounts.
//! 4. Every account's key prefixes fit its role and their bounds
//!    (`hivekeeper_protocol::kv_access::check_prefixes`).

use crate::InvariantViolation;
use std::collections::BTreeMap;

use hivekeeper_protocol::{AccountInfo, ErrorCode, KvAccess, Role, kv_access, validate};
use serde::{Deserialize, Serialize};

use super::{Ctx, Decision, Event, LeaseEnd, Reply, StateMachine, Text};

/// Most accounts the state holds (invariant 3): ten times the 10,000 agents the service is
/// measured with, and about 20 MB of state at most (a hash is about 100 bytes).
pub const ACCOUNTS_MAX: usize = 100_000;

/// Most accounts in one `admin.agent.list` page: about 90 bytes each (a 64-byte agent id and a
/// role), so a page of accounts without key prefixes stays well inside the default 64 KiB
/// MQTT packet; accounts with many long prefixes need a larger packet to list 256 at a time.
pub const ACCOUNT_PAGE_MAX: usize = 256;

/// One account: an agent id's role and the hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// What the agent may do.
    pub role: Role,
    /// The secret's salted hash as a PHC string, made by the node (the machine never sees the
    /// secret).
    pub secret_hash: String,
    /// Key prefixes the agent may read under; empty: the role's default. Skipped when empty,
    /// so an account without prefixes keeps the shape it had before they existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_read: Vec<String>,
    /// Key prefixes the agent may write under; empty: the role's default. Skipped when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_write: Vec<String>,
}

impl Account {
    /// What the node checks a key op against (`hivekeeper_protocol::kv_access`).
    pub fn kv_access(&self) -> KvAccess {
        KvAccess {
            role: self.role,
            read: self.kv_read.clone(),
            write: self.kv_write.clone(),
        }
    }
}

/// What `admin.agent.add` stores besides the name and the secret's hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountGrant {
    /// The role.
    pub role: Role,
    /// Key prefixes it may read under (empty: the role's default).
    pub kv_read: Vec<String>,
    /// Key prefixes it may write under (empty: the role's default).
    pub kv_write: Vec<String>,
}

/// What happened to an account, in [`Event::AccountChanged`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountChange {
    /// Created.
    Added,
    /// Its secret was replaced: connections made with the old one are closed.
    Rotated,
    /// Deleted: its connections are closed and its leases were revoked in the same entry.
    Removed,
}

/// The accounts, by agent id, in name order (so pages and snapshots are in a stable order).
pub type Accounts = BTreeMap<Text, Account>;

impl StateMachine {
    /// The account of agent `name`, if it has one (for authentication at the node's edge).
    pub fn account(&self, name: &str) -> Option<&Account> {
        self.accounts.get(name)
    }

    /// Whether any account has `role` (the node creates the first `admin` when none does).
    pub fn has_role(&self, role: Role) -> bool {
        self.accounts.values().any(|account| account.role == role)
    }

    /// How many accounts exist.
    pub fn account_count(&self) -> usize {
        self.accounts.len()
    }

    /// `admin.agent.add`: creates the account; an existing one is refused (rotate it instead),
    /// so an add can never change a secret or role by mistake.
    pub(super) fn account_add(
        &mut self,
        ctx: &mut Ctx,
        name: &str,
        grant: AccountGrant,
        secret_hash: String,
    ) -> Decision {
        check_account_fields(name, &secret_hash)?;
        kv_access::check_prefixes(grant.role, &grant.kv_read, &grant.kv_write)
            .map_err(|reason| Reply::refused(ErrorCode::BadRequest, reason))?;
        if self.accounts.contains_key(name) {
            return Err(Reply::refused(
                ErrorCode::BadRequest,
                format!(
                    "admin.agent.add: agent {name:?} already has an account (admin.agent.rotate \
                     gives it a new secret)"
                ),
            ));
        }
        if self.accounts.len() >= ACCOUNTS_MAX {
            let message = format!("{ACCOUNTS_MAX} accounts exist, the limit");
            return Err(Reply::refused(ErrorCode::ResourceExhausted, message));
        }
        let account = Account {
            role: grant.role,
            secret_hash,
            kv_read: grant.kv_read,
            kv_write: grant.kv_write,
        };
        Ok(self.put_account(ctx, Text::from(name), account, AccountChange::Added))
    }

    /// `admin.agent.rotate`: replaces the secret's hash, keeps the role.
    pub(super) fn account_rotate(
        &mut self,
        ctx: &mut Ctx,
        name: &str,
        secret_hash: String,
    ) -> Decision {
        check_account_fields(name, &secret_hash)?;
        let Some((agent, account)) = self.accounts.get_key_value(name) else {
            return Err(no_account("admin.agent.rotate", name));
        };
        let account = Account {
            secret_hash,
            ..account.clone()
        };
        let agent = agent.clone();
        Ok(self.put_account(ctx, agent, account, AccountChange::Rotated))
    }

    /// Stores an added or rotated account, emits its change and answers it.
    fn put_account(
        &mut self,
        ctx: &mut Ctx,
        agent: Text,
        account: Account,
        change: AccountChange,
    ) -> Reply {
        let (role, secret_hash) = (account.role, account.secret_hash.clone());
        self.accounts.insert(agent.clone(), account);
        ctx.events.push(Event::AccountChanged {
            agent: agent.clone(),
            change,
        });
        Reply::Account {
            agent,
            role,
            secret_hash,
        }
    }

    /// `admin.agent.remove`: deletes the account and ends every lease of its agent, as
    /// `admin.revoke` would (the owner is told `lease.revoked` if it is still connected).
    pub(super) fn account_remove(&mut self, ctx: &mut Ctx, name: &str) -> Decision {
        let Some((agent, _)) = self.accounts.remove_entry(name) else {
            return Err(no_account("admin.agent.remove", name));
        };
        let mut leases: Vec<_> = self
            .core
            .leases
            .iter()
            .filter(|(_, lease)| lease.agent == agent)
            .map(|(id, _)| *id)
            .collect();
        leases.sort_unstable();
        self.end_leases(ctx, &leases, LeaseEnd::AdminRevoked);
        // After the lease ends, so the node queues the agent's `lease.revoked` notices before
        // it closes the agent's connection.
        ctx.events.push(Event::AccountChanged {
            agent,
            change: AccountChange::Removed,
        });
        Ok(Reply::Done)
    }

    /// One page of `admin.agent.list`: up to [`ACCOUNT_PAGE_MAX`] accounts after `after`, in
    /// name order, without their hashes.
    pub(super) fn account_page(&self, after: Option<&str>) -> Reply {
        let range = match after {
            Some(after) => self
                .accounts
                .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            None => self.accounts.range::<str, _>(..),
        };
        let mut accounts: Vec<AccountInfo> = range
            .take(ACCOUNT_PAGE_MAX + 1)
            .map(|(agent, account)| AccountInfo {
                agent: agent.to_string(),
                role: account.role,
                kv_read: account.kv_read.clone(),
                kv_write: account.kv_write.clone(),
            })
            .collect();
        let more = accounts.len() > ACCOUNT_PAGE_MAX;
        accounts.truncate(ACCOUNT_PAGE_MAX);
        let next_after = more
            .then(|| accounts.last().map(|info| info.agent.clone()))
            .flatten();
        Reply::Accounts {
            accounts,
            next_after,
        }
    }

    /// Invariants 1 to 4.
    pub(super) fn check_account_invariants(&self) -> Result<(), InvariantViolation> {
        if self.accounts.len() > ACCOUNTS_MAX {
            return Err(violation!(
                "account invariant 3: {} accounts, more than {ACCOUNTS_MAX}",
                self.accounts.len()
            ));
        }
        for (name, account) in &self.accounts {
            validate::agent_id(name)
                .map_err(|reason| format!("account invariant 1: {name:?}: {reason}"))?;
            kv_access::check_prefixes(account.role, &account.kv_read, &account.kv_write)
                .map_err(|reason| format!("account invariant 4: {name:?}: {reason}"))?;
            if !is_phc(&account.secret_hash) {
                return Err(violation!(
                    "account invariant 2: {name:?}'s secret hash is not a PHC string"
                ));
            }
        }
        Ok(())
    }
}

/// Whether `text` has a PHC string's shape, `$<algorithm>$...` (invariant 2): enough to tell a
/// hash from a secret written into the log by mistake.
fn is_phc(text: &str) -> bool {
    text.strip_prefix('$')
        .and_then(|rest| rest.split_once('$'))
        .is_some_and(|(algorithm, rest)| !algorithm.is_empty() && !rest.is_empty())
}

/// The checks of an add or rotate as applied: a valid name, and a hash rather than a secret.
fn check_account_fields(name: &str, secret_hash: &str) -> Result<(), Reply> {
    validate::account_name(name).map_err(|reason| Reply::refused(ErrorCode::BadRequest, reason))?;
    if !is_phc(secret_hash) {
        return Err(Reply::refused(
            ErrorCode::BadRequest,
            "`secret_hash` is not a PHC string",
        ));
    }
    Ok(())
}

/// The refusal for an op on an account that does not exist.
fn no_account(op: &str, name: &str) -> Reply {
    Reply::refused(
        ErrorCode::BadRequest,
        format!("{op}: agent {name:?} has no account"),
    )
}
