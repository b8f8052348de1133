//! Leases: grant, keepalive check, revoke and expiry.
//!
//! A lease is the liveness of one agent: everything the agent holds or waits for is bound to
//! one. Keepalives are not log entries: the leader keeps each lease's deadline in memory (as
//! etcd's lessor does) and, when one passes, proposes `ExpireLeases`; this file decides what the
//! expiry does. A lease's end — revoke or expiry — releases every hold, drops every wait and
//! grants the next waiters, all in the same entry, except for the locks a lease with a
//! lock-delay held when it ends by expiry or by an operator: those are held back until the
//! delay has passed (`lock_delay.rs`).
//!
//! Invariants:
//! 1. A lease id is the log position of the command that granted it, so ids are unique and
//!    never reused, also across snapshots.
//! 2. Every live lease's TTL was within the limits when it was granted.
//! 3. There are never more than `leases_max` live leases after an entry that granted one.
//! 4. A lease never expires before its TTL has run since it was granted, on the machine's clock;
//!    an `ExpireLeases` naming a younger lease leaves it alone (the leader's deadlines are at
//!    least that long, so this only guards against a confused leader).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use hivekeeper_protocol::{ErrorCode, LeaseInfo};
use serde::{Deserialize, Serialize};

use crate::grant::Core;
use crate::{
    Ctx, Decision, Event, LeaseEnd, ReleaseReason, Reply, ResourceKey, StateMachine, Text,
};

/// Most leases in one `admin.leases` page: about 140 bytes each at most (a 64-byte agent id),
/// so a page stays well inside the default 64 KiB MQTT packet.
pub const LEASE_PAGE_MAX: usize = 256;

/// A lease's identity: the log position of the command that granted it. On the wire it is an
/// opaque string of 16 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseId(pub u64);

impl LeaseId {
    /// Parses the wire form; `None` for anything that is not 16 hex digits.
    pub fn parse(text: &str) -> Option<LeaseId> {
        // Every write request names a lease, so this is a hand-rolled fixed-width parse rather
        // than `from_str_radix` (which also accepts a sign and any width): one table look-up
        // per digit and no branch per byte; a non-digit sets the high bit of `bad`.
        if text.len() != 16 {
            return None;
        }
        let (id, bad) = text.bytes().fold((0u64, 0u8), |(id, bad), byte| {
            let digit = HEX_DIGIT[usize::from(byte)];
            (id << 4 | u64::from(digit & 0x0f), bad | digit)
        });
        (bad & NOT_HEX == 0).then_some(LeaseId(id))
    }
}

/// Marks a byte that is not a hex digit in [`HEX_DIGIT`].
const NOT_HEX: u8 = 0x80;

/// The value of each hex digit (either case), [`NOT_HEX`] for every other byte.
const HEX_DIGIT: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut digit = 0u8;
    while digit < 16 {
        let lower = if digit < 10 {
            b'0' + digit
        } else {
            b'a' + digit - 10
        };
        table[lower as usize] = digit;
        table[lower.to_ascii_uppercase() as usize] = digit;
        digit += 1;
    }
    table
};

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// One live lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// The agent it belongs to; any other agent naming it is refused (`forbidden`).
    pub agent: Text,
    /// Time to live past the last keepalive.
    pub ttl_ms: u64,
    /// When it was granted (machine clock): the earliest it can expire is this plus the TTL.
    pub granted_ms: u64,
    /// How long its locks are held back when it ends by expiry or by an operator
    /// (`lock_delay.rs`); 0 for none, and then absent from the snapshot.
    #[serde(default, skip_serializing_if = "crate::lock_delay::no_lock_delay")]
    pub lock_delay_ms: u64,
    /// Resources it holds.
    pub holds: BTreeSet<ResourceKey>,
    /// Resources it waits for, with the waiting request's id.
    pub waits: BTreeMap<ResourceKey, String>,
}

impl StateMachine {
    /// `lease.grant`: a lease of `ttl_ms` for `agent`, its locks held back for
    /// `lock_delay_ms` when it ends by expiry or by an operator, its id the entry's index.
    pub(crate) fn lease_grant(
        &mut self,
        ctx: &mut Ctx,
        agent: &Text,
        ttl_ms: u64,
        lock_delay_ms: u64,
    ) -> Decision {
        let limits = &self.limits;
        if !(limits.lease_ttl_ms_min..=limits.lease_ttl_ms_max).contains(&ttl_ms) {
            return Err(Reply::refused(
                ErrorCode::BadRequest,
                format!(
                    "lease.grant: `ttl_ms` is {ttl_ms}, it must be in [{}, {}]",
                    limits.lease_ttl_ms_min, limits.lease_ttl_ms_max
                ),
            ));
        }
        self.core.lease_quota(agent, limits)?;
        if self.core.leases.len() >= limits.leases_max as usize {
            let message = format!("{} leases are alive, the limit", limits.leases_max);
            return Err(Reply::refused(ErrorCode::ResourceExhausted, message));
        }
        let lease = LeaseId(ctx.index);
        self.core.leases.insert(
            lease,
            Lease {
                agent: agent.clone(),
                ttl_ms,
                granted_ms: ctx.now_ms,
                lock_delay_ms,
                holds: BTreeSet::new(),
                waits: BTreeMap::new(),
            },
        );
        self.core.usage.lease_granted(agent);
        ctx.events.push(Event::LeaseGranted {
            agent: agent.clone(),
            lease,
            ttl_ms,
        });
        Ok(Reply::Lease { lease, ttl_ms })
    }

    /// `lease.revoke`: ends the agent's own lease (`end_leases`).
    pub(crate) fn lease_revoke(&mut self, ctx: &mut Ctx, agent: &str, lease: &str) -> Decision {
        let id = self.core.live_lease(agent, lease)?;
        self.end_leases(ctx, &[id], LeaseEnd::Revoked);
        Ok(Reply::Done)
    }

    /// `admin.revoke`: ends any agent's lease exactly as its own `lease.revoke` would (every
    /// hold released, every wait dropped, next waiters granted in this entry), without the
    /// owner check. The event's reason tells the node to notify the owner.
    pub(crate) fn admin_revoke(&mut self, ctx: &mut Ctx, lease: &str) -> Decision {
        let Some(id) = LeaseId::parse(lease).filter(|id| self.core.leases.contains_key(id)) else {
            let message =
                format!("lease {lease:?} does not exist (never granted, revoked or expired)");
            return Err(Reply::refused(ErrorCode::LeaseNotFound, message));
        };
        self.end_leases(ctx, &[id], LeaseEnd::AdminRevoked);
        Ok(Reply::Done)
    }

    /// One page of `admin.leases`: up to [`LEASE_PAGE_MAX`] live leases after `after`, in id
    /// order. Paged because a reply must fit one MQTT packet (64 KiB by default) and there
    /// may be 100,000 leases. An `after` that is not a lease id is `bad_request` (starting
    /// over from the first page would make a confused client page forever).
    pub(crate) fn lease_page(&self, after: Option<&str>) -> Decision {
        let after = match after.map(|text| (text, LeaseId::parse(text))) {
            None => None,
            Some((_, Some(id))) => Some(id),
            Some((text, None)) => {
                let message = format!("admin.leases: `after` is {text:?}, not a lease id");
                return Err(Reply::refused(ErrorCode::BadRequest, message));
            }
        };
        let mut ids: Vec<LeaseId> = self
            .core
            .leases
            .keys()
            .copied()
            .filter(|id| after.is_none_or(|after| *id > after))
            .collect();
        ids.sort_unstable();
        let more = ids.len() > LEASE_PAGE_MAX;
        ids.truncate(LEASE_PAGE_MAX);
        let leases: Vec<LeaseInfo> = ids
            .iter()
            .map(|id| {
                let lease = &self.core.leases[id];
                LeaseInfo {
                    lease: id.to_string(),
                    agent: lease.agent.to_string(),
                    ttl_ms: lease.ttl_ms,
                    remaining_ms: None,
                }
            })
            .collect();
        let next_after = more.then(|| leases.last().map(|info| info.lease.clone()));
        Ok(Reply::Leases {
            leases,
            next_after: next_after.flatten(),
        })
    }

    pub(super) fn expire_leases(&mut self, ctx: &mut Ctx, leases: &[LeaseId]) -> Reply {
        let due: BTreeSet<LeaseId> = leases
            .iter()
            .copied()
            .filter(|id| {
                self.core.leases.get(id).is_some_and(|lease| {
                    ctx.now_ms >= lease.granted_ms.saturating_add(lease.ttl_ms)
                })
            })
            .collect();
        let due: Vec<LeaseId> = due.into_iter().collect();
        self.end_leases(ctx, &due, LeaseEnd::Expired);
        Reply::Expired { leases: due }
    }

    /// Ends leases in two phases, so that no grant goes to a lease ending in the same entry:
    /// first every lease is removed with its holds, waits and keys (deleted at one revision),
    /// then every touched resource grants what became grantable, but for the locks held back
    /// by a lock-delay (`lock_delay.rs`).
    pub(super) fn end_leases(&mut self, ctx: &mut Ctx, ids: &[LeaseId], reason: LeaseEnd) {
        let ended: Vec<(LeaseId, Lease)> = ids
            .iter()
            .filter_map(|id| self.core.leases.remove(id).map(|lease| (*id, lease)))
            .collect();
        let ended_ids: Vec<LeaseId> = ended.iter().map(|(id, _)| *id).collect();
        self.kv_end_leases(ctx, &ended_ids);
        let mut touched = BTreeSet::new();
        for (id, lease) in ended {
            ctx.events.push(Event::LeaseEnded {
                agent: lease.agent.clone(),
                lease: id,
                reason,
            });
            self.lock_delays
                .hold_back(ctx, &lease, reason, &mut self.locks);
            for key in lease.holds {
                let (resource, core, _) = self.resource_mut(key.kind);
                let hold = resource
                    .take_hold(&key.name, id)
                    .expect("a lease's holds list only resources it holds");
                core.release(ctx, &key, &hold, ReleaseReason::LeaseEnded);
                touched.insert(key);
            }
            for (key, request_id) in lease.waits {
                touched.extend(self.remove_waiter(
                    ctx,
                    &key,
                    &lease.agent,
                    &request_id,
                    ErrorCode::LeaseNotFound,
                    "the lease ended while the request waited",
                ));
            }
            self.core.usage.lease_ended(&lease.agent);
        }
        let touched: Vec<ResourceKey> = touched.into_iter().collect();
        self.settle(ctx, &touched);
    }

    /// How many leases are alive (cheap: for gauges, where `leases()` would sort them all).
    pub fn lease_count(&self) -> usize {
        self.core.leases.len()
    }

    /// How many agents the retry memory remembers (cheap: for the `hivekeeper_dedup_agents`
    /// gauge).
    pub fn dedup_agent_count(&self) -> usize {
        self.core.dedup.agent_count()
    }

    /// Live leases with their agent and TTL, in id order (for the leader's lease keeper, which
    /// gives each a fresh deadline when it takes office, and for inspection).
    pub fn leases(&self) -> impl Iterator<Item = (LeaseId, &str, u64)> + '_ {
        let mut leases: Vec<_> = self
            .core
            .leases
            .iter()
            .map(|(id, lease)| (*id, &*lease.agent, lease.ttl_ms))
            .collect();
        leases.sort_unstable_by_key(|(id, ..)| *id);
        leases.into_iter()
    }
}

impl Core {
    /// The lease named on the wire, if it is alive and belongs to `agent`.
    pub fn live_lease(&self, agent: &str, lease: &str) -> Result<LeaseId, Reply> {
        let not_found = || {
            Reply::refused(
                ErrorCode::LeaseNotFound,
                format!("lease {lease:?} does not exist (never granted, revoked or expired)"),
            )
        };
        let id = LeaseId::parse(lease).ok_or_else(not_found)?;
        let record = self.leases.get(&id).ok_or_else(not_found)?;
        // The request's agent is usually the very name the lease shares (both come from the
        // dedup memory), so the pointer comparison settles it without reading the bytes.
        if !std::ptr::eq(&*record.agent, agent) && &*record.agent != agent {
            return Err(Reply::refused(
                ErrorCode::Forbidden,
                format!("lease {lease} belongs to another agent"),
            ));
        }
        Ok(id)
    }
}
