//! Per-agent quotas: what one agent may take of the shared tables.
//!
//! The global bounds (`leases_max`, `resources_max`) keep the machine's memory bounded, but one
//! agent that floods `lease.grant` or acquires could fill them and leave nothing for the
//! others. These bounds are per agent (`leases_per_agent_max`, `holds_per_agent_max`) and per
//! lease (`waits_per_lease_max`); past one the answer is `resource_exhausted` with the bound's
//! name and value, and nothing changes. They are replicated limits like the others, so every
//! replica refuses the same request.
//!
//! The counts are kept in [`Usage`], an index by agent beside the leases: a check costs one
//! hash look-up, not a walk over the agent's leases. It is derived state: left out of the
//! snapshot and rebuilt from the leases on restore ([`Usage::rebuild`]).
//!
//! Invariants (checked by [`Usage::check`]):
//! 1. For every agent, `leases` is the number of its live leases and `holds` the number of
//!    holds over all of them; an agent with no live lease is not in the index.
//! 2. A request is refused, with nothing changed, when it would give its agent a lease more
//!    than `leases_per_agent_max`, a hold or wait more than `holds_per_agent_max` (holds plus
//!    waits, over all its leases), or its lease a wait more than `waits_per_lease_max`; a
//!    multi-lock counts each of its locks. Checked at admission: a `Configure` that lowers a
//!    bound takes nothing back.

use crate::InvariantViolation;
use std::collections::HashMap;

use hivekeeper_protocol::ErrorCode;

use super::grant::Core;
use super::lease::{Lease, LeaseId};
use super::{Limits, NameMap, Reply, Text};

/// What one agent has: live leases and the holds over all of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentUsage {
    /// Live leases of the agent.
    pub leases: u32,
    /// Resources the agent holds, over all its leases.
    pub holds: u32,
}

/// Per-agent counts, derived from the leases.
#[derive(Debug, Clone, Default)]
pub struct Usage(NameMap<AgentUsage>);

impl Usage {
    /// What `agent` has now (zeros for an agent with no lease).
    pub fn of(&self, agent: &str) -> AgentUsage {
        self.0.get(agent).copied().unwrap_or_default()
    }

    /// Whether `agent` has a live lease.
    pub fn has_lease(&self, agent: &str) -> bool {
        self.0.contains_key(agent)
    }

    /// A lease of `agent` was granted.
    pub fn lease_granted(&mut self, agent: &Text) {
        self.0.entry(agent.clone()).or_default().leases += 1;
    }

    /// A lease of `agent` ended, after its holds were released.
    pub fn lease_ended(&mut self, agent: &str) {
        self.decrement(agent, |usage| &mut usage.leases);
    }

    /// `agent` took a hold.
    pub fn held(&mut self, agent: &Text) {
        self.0.entry(agent.clone()).or_default().holds += 1;
    }

    /// A hold of `agent` ended.
    pub fn released(&mut self, agent: &str) {
        self.decrement(agent, |usage| &mut usage.holds);
    }

    /// Takes one from the count `field` picks, and forgets an agent left with nothing.
    fn decrement(&mut self, agent: &str, field: impl FnOnce(&mut AgentUsage) -> &mut u32) {
        let usage = self
            .0
            .get_mut(agent)
            .expect("invariant 1: an agent with a lease is indexed");
        let count = field(usage);
        *count = count
            .checked_sub(1)
            .expect("invariant 1: what ends was counted");
        if *usage == AgentUsage::default() {
            self.0.remove(agent);
        }
    }

    /// Counts everything again from the leases (after a restore).
    pub fn rebuild(leases: &HashMap<LeaseId, Lease, foldhash::fast::RandomState>) -> Usage {
        let mut usage = Usage::default();
        for lease in leases.values() {
            let entry = usage.0.entry(lease.agent.clone()).or_default();
            entry.leases += 1;
            entry.holds += u32::try_from(lease.holds.len()).expect("holds are bounded by u32");
        }
        usage
    }

    /// Invariant 1: the index equals a recount from the leases.
    pub fn check(
        &self,
        leases: &HashMap<LeaseId, Lease, foldhash::fast::RandomState>,
    ) -> Result<(), InvariantViolation> {
        let recount = Usage::rebuild(leases);
        if recount.0.len() != self.0.len() {
            return Err(violation!(
                "quota index has {} agents, the leases {}",
                self.0.len(),
                recount.0.len()
            ));
        }
        for (agent, counted) in &recount.0 {
            let indexed = self.of(agent);
            if indexed != *counted {
                return Err(violation!(
                    "quota index says agent {agent} has {indexed:?}, the leases {counted:?}"
                ));
            }
        }
        Ok(())
    }
}

impl Core {
    /// Refuses a `lease.grant` that would give `agent` more than
    /// `leases_per_agent_max` live leases (invariant 2).
    pub fn lease_quota(&self, agent: &str, limits: &Limits) -> Result<(), Reply> {
        let leases = self.usage.of(agent).leases;
        if leases < limits.leases_per_agent_max {
            return Ok(());
        }
        Err(Reply::refused(
            ErrorCode::ResourceExhausted,
            format!(
                "agent {agent} has {leases} leases alive: leases_per_agent_max is {}",
                limits.leases_per_agent_max
            ),
        ))
    }

    /// Refuses an acquire or reserve that would give `agent` more than
    /// `holds_per_agent_max` resources held or waited for (invariant 2). Waits count: a
    /// waiter becomes a hold without asking again.
    pub fn holds_quota(&self, agent: &str, limits: &Limits) -> Result<(), Reply> {
        self.holds_quota_for(agent, 1, limits)
    }

    /// [`Core::holds_quota`] of a request for `count` resources at once (a multi-lock's
    /// locks); a waiting multi-lock counts each lock it waits for.
    pub fn holds_quota_for(&self, agent: &str, count: usize, limits: &Limits) -> Result<(), Reply> {
        let holds = self.usage.of(agent).holds as usize;
        let waits: usize = self.waiting.get(agent).map_or(0, |waits| {
            waits
                .into_iter()
                .map(|(_, wait)| 1 + wait.others.len())
                .sum()
        });
        if holds + waits + count <= limits.holds_per_agent_max as usize {
            return Ok(());
        }
        Err(Reply::refused(
            ErrorCode::ResourceExhausted,
            format!(
                "agent {agent} holds {holds} resources and waits for {waits}: \
                 holds_per_agent_max is {}",
                limits.holds_per_agent_max
            ),
        ))
    }

    /// Refuses a wait that would give `lease` more than `waits_per_lease_max` waits
    /// (invariant 2).
    pub fn waits_quota(&self, lease: LeaseId, limits: &Limits) -> Result<(), Reply> {
        self.waits_quota_for(lease, 1, limits)
    }

    /// [`Core::waits_quota`] of a wait for `count` resources at once (a multi-lock's locks).
    pub fn waits_quota_for(
        &self,
        lease: LeaseId,
        count: usize,
        limits: &Limits,
    ) -> Result<(), Reply> {
        let waits = self
            .leases
            .get(&lease)
            .map_or(0, |record| record.waits.len());
        if waits + count <= limits.waits_per_lease_max as usize {
            return Ok(());
        }
        Err(Reply::refused(
            ErrorCode::ResourceExhausted,
            format!(
                "lease {lease} waits for {waits} resources: waits_per_lease_max is {}",
                limits.waits_per_lease_max
            ),
        ))
    }
}
