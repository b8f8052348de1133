//! Remembered outcomes: a retried request gets the first attempt's answer.
//!
//! An agent that lost a reply (a dropped connection, a failover) resends the same request id.
//! While the request waits in a queue the retry finds it through the pending-wait index
//! (`Core::waiting`) and gets `Queued` again, never a second slot; once it completed, the
//! retry finds its final reply here. Memory is bounded twice: per agent (the newest
//! `dedup_per_agent_max` outcomes) and in agents (`dedup_agents_max`, the least recently
//! active forgotten first).
//!
//! Invariants:
//! 1. After every apply, no agent remembers more than `dedup_per_agent_max` outcomes and no more
//!    than `dedup_agents_max` agents are remembered ([`Dedup::check_bounds`]).
//! 2. The recency index has exactly one entry per remembered agent, at its last-touched index.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::{Limits, Reply, Text};

/// The remembered outcomes of every agent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Dedup {
    /// Outcomes by agent.
    agents: BTreeMap<Text, Memo>,
    /// `(last touched index, agent)`, oldest first: who to forget when there are too many.
    /// Derived from `agents`, rebuilt after a restore.
    #[serde(skip)]
    recency: BTreeSet<(u64, Text)>,
    /// Agents recorded in the current entry, whose rings [`Dedup::enforce`] trims. Empty
    /// between entries.
    #[serde(skip)]
    touched: Vec<Text>,
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
    /// The remembered reply to `request_id` from `agent`.
    pub fn replay(&self, agent: &str, request_id: &str) -> Option<&Reply> {
        self.agents
            .get(agent)?
            .recent
            .iter()
            .rev()
            .find(|(id, _)| id == request_id)
            .map(|(_, reply)| reply)
    }

    /// Remembers the final reply to a request. Bounds are enforced at the end of the entry.
    pub fn record(&mut self, agent: &Text, request_id: String, reply: Reply, index: u64) {
        let memo = self.agents.entry(agent.clone()).or_default();
        if memo.touched_index != index {
            self.recency.remove(&(memo.touched_index, agent.clone()));
            memo.touched_index = index;
            self.recency.insert((index, agent.clone()));
        }
        memo.recent.push_back((request_id, reply));
        self.touched.push(agent.clone());
    }

    /// Trims the agents touched by this entry to their bound, then forgets the least recently
    /// active agents beyond the agent bound.
    pub fn enforce(&mut self, limits: &Limits) {
        let per_agent_max = limits.dedup_per_agent_max as usize;
        for agent in self.touched.drain(..) {
            if let Some(memo) = self.agents.get_mut(&agent) {
                while memo.recent.len() > per_agent_max {
                    memo.recent.pop_front();
                }
            }
        }
        while self.agents.len() > limits.dedup_agents_max as usize {
            let (_, agent) = self
                .recency
                .pop_first()
                .expect("the recency index has one entry per remembered agent");
            self.agents.remove(&agent);
        }
    }

    /// Marks every agent for trimming at the end of this entry (the bounds just changed).
    pub fn touch_all(&mut self) {
        self.touched.extend(self.agents.keys().cloned());
    }

    /// Rebuilds the recency index (after a restore).
    pub fn rebuild_index(&mut self) {
        self.recency = self
            .agents
            .iter()
            .map(|(agent, memo)| (memo.touched_index, agent.clone()))
            .collect();
        self.touched.clear();
    }

    /// Invariant 2.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.recency.len() != self.agents.len() {
            return Err(format!(
                "dedup remembers {} agents, its recency index has {}",
                self.agents.len(),
                self.recency.len()
            ));
        }
        for (agent, memo) in &self.agents {
            if !self.recency.contains(&(memo.touched_index, agent.clone())) {
                return Err(format!(
                    "dedup agent {agent} is missing from the recency index"
                ));
            }
        }
        Ok(())
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
