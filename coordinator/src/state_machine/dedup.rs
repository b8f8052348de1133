//! Remembered outcomes: a retried request gets the first attempt's answer.
//!
//! An agent that lost a reply (a dropped connection, a failover) resends the same request id.
//! While the request waits in a queue the retry finds it through the pending-wait index
//! (`Core::waiting`) and gets `Queued` again, never a second slot; once it completed, the
//! retry finds its final reply here. Memory is bounded twice: per agent (the newest
//! `dedup_per_agent_max` outcomes) and in agents (`dedup_agents_max`): when an entry leaves more
//! agents than that, the least recently active tenth are forgotten at once. Eviction in batches
//! keeps the apply path free of a recency index (which cost a third of a lock apply): the sort
//! it needs runs once per tenth of the bound in new agents, and it orders by (last touched
//! index, agent name), a pure function of the state, so a restored replica forgets exactly the
//! agents a live one does.
//!
//! Invariants:
//! 1. After every apply, no agent remembers more than `dedup_per_agent_max` outcomes and no more
//!    than `dedup_agents_max` agents are remembered ([`Dedup::check_bounds`]).
//! 2. An agent is remembered only with at least one outcome.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{Limits, NameMap, Reply, Text};

/// The remembered outcomes of every agent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Dedup {
    /// Outcomes by agent. A hash map: every write request looks its agent up here, and the
    /// snapshot writes it in key order.
    #[serde(serialize_with = "super::snapshot::sorted")]
    agents: NameMap<Memo>,
    /// `Limits::dedup_per_agent_max`, cached so that recording trims at once (set by the state
    /// machine whenever the limits are set, and after a restore).
    #[serde(skip)]
    per_agent_max: usize,
}

/// One agent's recent outcomes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Memo {
    /// Index of the entry that last recorded an outcome for this agent.
    touched_index: u64,
    /// `(request id, reply)`, oldest first.
    recent: VecDeque<(String, Reply)>,
}

impl Dedup {
    /// The agent's shared name, if remembered (saves an allocation per request), and the
    /// remembered reply to `request_id`.
    pub fn recall(&self, agent: &str, request_id: &str) -> (Option<Text>, Option<&Reply>) {
        let Some((name, memo)) = self.agents.get_key_value(agent) else {
            return (None, None);
        };
        let reply = memo
            .recent
            .iter()
            .rev()
            .find(|(id, _)| id == request_id)
            .map(|(_, reply)| reply);
        (Some(name.clone()), reply)
    }

    /// Remembers the final reply to a request, forgetting the agent's oldest outcome beyond
    /// the per-agent bound. The agent bound is enforced at the end of the entry.
    pub fn record(&mut self, agent: &Text, request_id: String, reply: Reply, index: u64) {
        let memo = match self.agents.get_mut(agent) {
            Some(memo) => memo,
            None => self.agents.entry(agent.clone()).or_default(),
        };
        memo.touched_index = index;
        memo.recent.push_back((request_id, reply));
        while memo.recent.len() > self.per_agent_max.max(1) {
            memo.recent.pop_front();
        }
    }

    /// Applies new limits: trims every agent to the per-agent bound, then the agent count.
    pub fn set_limits(&mut self, limits: &Limits) {
        self.per_agent_max = limits.dedup_per_agent_max as usize;
        for memo in self.agents.values_mut() {
            while memo.recent.len() > self.per_agent_max {
                memo.recent.pop_front();
            }
        }
        self.enforce(limits);
    }

    /// When more agents than the bound are remembered, forgets the least recently active until
    /// nine tenths of the bound remain.
    pub fn enforce(&mut self, limits: &Limits) {
        let agents_max = limits.dedup_agents_max as usize;
        if self.agents.len() <= agents_max {
            return;
        }
        let keep = agents_max - agents_max / 10;
        let mut by_age: Vec<(u64, Text)> = self
            .agents
            .iter()
            .map(|(agent, memo)| (memo.touched_index, agent.clone()))
            .collect();
        by_age.sort_unstable();
        for (_, agent) in &by_age[..by_age.len() - keep] {
            self.agents.remove(agent);
        }
    }

    /// Invariant 2.
    pub fn check_invariants(&self) -> Result<(), String> {
        match self.agents.iter().find(|(_, memo)| memo.recent.is_empty()) {
            Some((agent, _)) => Err(format!("dedup remembers {agent} with no outcome")),
            None => Ok(()),
        }
    }

    /// Invariant 1.
    pub fn check_bounds(&self, limits: &Limits) -> Result<(), String> {
        if self.agents.len() > limits.dedup_agents_max as usize {
            return Err(format!("dedup remembers {} agents", self.agents.len()));
        }
        if let Some((agent, memo)) = self
            .agents
            .iter()
            .find(|(_, memo)| memo.recent.len() > limits.dedup_per_agent_max as usize)
        {
            return Err(format!(
                "dedup remembers {} outcomes of {agent}",
                memo.recent.len()
            ));
        }
        Ok(())
    }
}
