//! Remembered outcomes: a retried request gets the first attempt's answer.
//!
//! An agent that lost a reply (a dropped connection, a failover) resends the same request id.
//! While the request waits in a queue the retry finds it through the pending-wait index
//! (`Core::waiting`) and gets `Queued` again, never a second slot; once it completed, the
//! retry finds its final reply here. Memory is bounded twice: per agent (the newest
//! `dedup_per_agent_max` outcomes, so an agent's new ids push out only its own oldest ones) and
//! in agents (`dedup_agents_max`): when an entry leaves more agents than that, a tenth are
//! forgotten at once, whole agents, those with no live lease first (their retries can take
//! nothing: every acquire names a lease), then the least recently active. So a flood of
//! requests under fresh agent ids forgets the flood's own agents before any agent that holds
//! a lease, and never the newest outcomes of an agent it keeps. Eviction in batches
//! keeps the apply path free of a recency index (which cost a third of a lock apply): the sort
//! it needs runs once per tenth of the bound in new agents, and it orders by (last touched
//! index, agent name), a pure function of the state, so a restored replica forgets exactly the
//! agents a live one does.
//!
//! Agents with no live lease are also forgotten by time, so that a stream of short-lived agents
//! (a new id per process run, per test, per bench) does not keep memory for every id ever
//! seen until `dedup_agents_max` is reached. The time is the memory's own *idle clock*: it
//! moves with the machine's clock, but by at most [`IDLE_CLOCK_STEP_MS_MAX`] per entry. The
//! machine's clock may step far in one entry (up to `lease_ttl_ms_max`, `clock.rs`): a leader
//! whose wall clock jumped ahead, or a leader change to a member whose clock runs ahead, moves
//! it by the whole difference, and a few such steps within seconds would otherwise pass
//! `dedup_idle_ms` and forget an agent whose retry is still on its way (a put applied twice).
//! Capped, such a step costs the window at most one second, while under load (entries far
//! less than a second apart) the idle clock keeps the machine's pace; a quiet cluster's idle
//! clock runs slow, which only keeps agents longer. The sweep runs in the entry whose idle
//! clock crosses a multiple of `dedup_idle_ms` (a function of the log, so every replica sweeps
//! in the same entry), and forgets each agent without a live lease that recorded nothing
//! since the previous sweep's entry. An idle agent is so forgotten at the second sweep after
//! its last outcome, never sooner than `dedup_idle_ms` of idle clock after it: within twice
//! that while entries are applied at least once a second, later when the cluster is quiet
//! (no entry, no sweep; but then no new agent arrives to take memory either: the memory holds
//! at most the agents of two sweep periods). One pass over the memos per sweep, no per-entry
//! cost. What it narrows: a retry more than `dedup_idle_ms` after the first attempt, from an
//! agent that no longer has a live lease, is answered afresh (a `lease.revoke` retried then
//! gets `lease_not_found` rather than its first `ok`).
//!
//! Invariants:
//! 1. After every apply, no agent remembers more than `dedup_per_agent_max` outcomes and no more
//!    than `dedup_agents_max` agents are remembered ([`Dedup::check_bounds`]).
//! 2. An agent is remembered only with at least one outcome.
//! 3. `slots` maps exactly the remembered agents to their memo's place, and every outcome's
//!    fingerprint is its request id's ([`Dedup::check_invariants`]).
//! 4. Recording an outcome forgets only outcomes of the same agent; the agent bound forgets
//!    whole agents, every agent without a live lease before any agent with one
//!    ([`Dedup::enforce`]).
//! 5. A sweep forgets exactly the agents without a live lease whose last outcome is at or
//!    before the previous sweep's entry (`swept_index`), and records its own entry as the new
//!    `swept_index` ([`Dedup::forget_idle`]; the model test checks it against a naive model).
//! 6. The idle clock never goes backwards and moves by at most [`IDLE_CLOCK_STEP_MS_MAX`] per
//!    entry ([`Dedup::tick_idle_clock`]).

use crate::InvariantViolation;
use std::collections::{BTreeMap, VecDeque};
use std::hash::BuildHasher;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::grant::Core;
use crate::{Limits, NameMap, Reply, Text};

/// The most one entry moves the retry memory's idle clock: one second. Far above the time
/// between entries under any load, far below the `dedup_idle_ms` it measures (one minute by
/// default), so a jump of a leader's wall clock shortens that window by a second at most.
pub const IDLE_CLOCK_STEP_MS_MAX: u64 = 1_000;

/// The remembered outcomes of every agent.
///
/// The memos sit in a vector, found by name through `slots`, so that one request looks its
/// agent up once: [`Dedup::recall`] returns the agent's [`Slot`] and [`Dedup::record`] writes
/// through it. Serialized as before, a map from agent name to memo in name order, so the
/// snapshot bytes do not depend on the order agents arrived in.
#[derive(Debug, Clone, Default)]
pub struct Dedup {
    /// Where each remembered agent's memo is in `memos`. A hash map: every write request looks
    /// its agent up here.
    slots: NameMap<u32>,
    /// One memo per remembered agent, in no meaningful order (slots are reassigned when agents
    /// are forgotten, at the end of an entry).
    memos: Vec<Memo>,
    /// `Limits::dedup_per_agent_max`, cached so that recording trims at once (set by the state
    /// machine whenever the limits are set, and after a restore).
    per_agent_max: usize,
    /// The entry of the last sweep of idle agents ([`Dedup::forget_idle`]); `None` before the
    /// first. Replicated (in the snapshot once set), since it decides whom the next sweep
    /// forgets.
    swept_index: Option<u64>,
    /// The idle clock, ms: the sum of the machine clock's steps, each capped at
    /// [`IDLE_CLOCK_STEP_MS_MAX`] (module docs). Replicated (in the snapshot once it moved),
    /// since it decides when the sweeps run.
    idle_clock_ms: u64,
}

/// Where an agent's memo is. Valid until the end of the entry that returned it: agents are
/// forgotten (and slots reassigned) only by [`Dedup::enforce`], which runs between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(u32);

/// One agent's recent outcomes.
#[derive(Debug, Clone)]
struct Memo {
    /// The agent's name, shared with every hold, waiter and event of the agent.
    agent: Text,
    /// Index of the entry that last recorded an outcome for this agent.
    touched_index: u64,
    /// Outcomes, oldest first; never more than `per_agent_max`, so the ring never regrows.
    recent: VecDeque<Outcome>,
}

/// One remembered outcome.
#[derive(Debug, Clone)]
struct Outcome {
    /// [`fingerprint`] of `id`: a retry is matched on this first, so looking through an
    /// agent's outcomes compares integers, and the id strings only when they match.
    fingerprint: u64,
    /// The request id.
    id: String,
    /// The final reply to it.
    reply: Reply,
}

/// A fixed (unseeded) 64-bit hash of a request id. Derived state only: never serialized,
/// recomputed on restore, and equal fingerprints are always confirmed by comparing the ids.
fn fingerprint(request_id: &str) -> u64 {
    foldhash::fast::FixedState::default().hash_one(request_id)
}

/// What the dedup memory knows about one request.
pub struct Recall<'a> {
    /// The agent's memo, if the agent is remembered.
    pub slot: Option<Slot>,
    /// The agent's shared name, if remembered (saves an allocation per request).
    pub agent: Option<&'a Text>,
    /// The remembered reply to the request id.
    pub reply: Option<&'a Reply>,
}

impl Dedup {
    /// Looks the agent up once: its slot and shared name, and the remembered reply to
    /// `request_id`.
    pub fn recall(&self, agent: &str, request_id: &str) -> Recall<'_> {
        let Some(&slot) = self.slots.get(agent) else {
            return Recall {
                slot: None,
                agent: None,
                reply: None,
            };
        };
        let memo = &self.memos[slot as usize];
        let fingerprint = fingerprint(request_id);
        let reply = memo
            .recent
            .iter()
            .rev()
            .find(|outcome| outcome.fingerprint == fingerprint && outcome.id == request_id)
            .map(|outcome| &outcome.reply);
        Recall {
            slot: Some(Slot(slot)),
            agent: Some(&memo.agent),
            reply,
        }
    }

    /// How many agents are remembered.
    pub fn agent_count(&self) -> usize {
        self.memos.len()
    }

    /// Remembers the final reply to a request, forgetting the agent's oldest outcome beyond
    /// the per-agent bound. `slot` is the agent's slot from a [`Dedup::recall`] in this entry,
    /// if it had one. The agent bound is enforced at the end of the entry.
    pub fn record(
        &mut self,
        slot: Option<Slot>,
        agent: &Text,
        request_id: String,
        reply: Reply,
        index: u64,
    ) {
        let slot = match slot.or_else(|| self.slots.get(agent).copied().map(Slot)) {
            Some(Slot(slot)) => slot as usize,
            None => {
                let slot = self.memos.len();
                self.slots.insert(
                    agent.clone(),
                    u32::try_from(slot).expect("dedup_agents_max is a u32"),
                );
                self.memos.push(Memo {
                    agent: agent.clone(),
                    touched_index: index,
                    recent: VecDeque::new(),
                });
                slot
            }
        };
        let memo = &mut self.memos[slot];
        debug_assert!(
            Text::ptr_eq(&memo.agent, agent) || memo.agent == *agent,
            "the slot is the agent's"
        );
        memo.touched_index = index;
        // Make room first, so the ring's capacity never has to exceed the bound.
        while memo.recent.len() >= self.per_agent_max.max(1) {
            memo.recent.pop_front();
        }
        memo.recent.push_back(Outcome {
            fingerprint: fingerprint(&request_id),
            id: request_id,
            reply,
        });
    }

    /// Applies new limits: trims every agent to the per-agent bound. The agent bound is
    /// applied by the next [`Dedup::enforce`] (at the end of the entry, or by the restore).
    pub fn set_limits(&mut self, limits: &Limits) {
        self.per_agent_max = limits.dedup_per_agent_max as usize;
        for memo in &mut self.memos {
            while memo.recent.len() > self.per_agent_max {
                memo.recent.pop_front();
            }
        }
    }

    /// When more agents than the bound are remembered, forgets whole agents until nine tenths
    /// of the bound remain: agents that are not `active` (no live lease, so nothing held or
    /// waited for) first, the least recently active first (invariant 4).
    pub fn enforce(&mut self, limits: &Limits, active: impl Fn(&str) -> bool) {
        let agents_max = limits.dedup_agents_max as usize;
        if self.memos.len() <= agents_max {
            return;
        }
        let keep = agents_max - agents_max / 10;
        let rank = |memo: &Memo| (active(&memo.agent), memo.touched_index);
        let mut ranked: Vec<((bool, u64), &Text)> = self
            .memos
            .iter()
            .map(|memo| (rank(memo), &memo.agent))
            .collect();
        ranked.sort_unstable();
        let (cut_rank, cut_agent) = ranked[ranked.len() - keep];
        let cut_agent = cut_agent.clone();
        // Keeps exactly the `keep` highest by (active, touched index, name): names are unique,
        // so the order is total and the cut is the same on every replica.
        self.memos
            .retain(|memo| (rank(memo), &memo.agent) >= (cut_rank, &cut_agent));
        self.reindex();
    }

    /// Moves the idle clock by the machine clock's step of one entry, capped at
    /// [`IDLE_CLOCK_STEP_MS_MAX`] (invariant 6). Returns whether it crossed a multiple of
    /// `period_ms`: the entry sweeps.
    pub fn tick_idle_clock(&mut self, step_ms: u64, period_ms: u64) -> bool {
        let before_ms = self.idle_clock_ms;
        self.idle_clock_ms = before_ms.saturating_add(step_ms.min(IDLE_CLOCK_STEP_MS_MAX));
        let period_ms = period_ms.max(1);
        before_ms / period_ms < self.idle_clock_ms / period_ms
    }

    /// The idle clock, ms.
    #[cfg(test)]
    pub fn idle_clock_ms(&self) -> u64 {
        self.idle_clock_ms
    }

    /// The sweep of idle agents (invariant 5), run at the end of entry `index` when that
    /// entry's clock crossed a multiple of `dedup_idle_ms`: forgets every agent that is not
    /// `active` (no live lease) and has recorded nothing since the previous sweep's entry.
    pub fn forget_idle(&mut self, index: u64, active: impl Fn(&str) -> bool) {
        let swept_index = self.swept_index.replace(index).unwrap_or(0);
        let before = self.memos.len();
        self.memos
            .retain(|memo| memo.touched_index > swept_index || active(&memo.agent));
        if self.memos.len() != before {
            self.reindex();
        }
    }

    /// Rebuilds `slots` from `memos`.
    fn reindex(&mut self) {
        self.slots = self
            .memos
            .iter()
            .enumerate()
            .map(|(slot, memo)| {
                let slot = u32::try_from(slot).expect("dedup_agents_max is a u32");
                (memo.agent.clone(), slot)
            })
            .collect();
    }

    /// Invariants 2 and 3.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        if self.slots.len() != self.memos.len() {
            return Err(violation!(
                "dedup indexes {} agents but remembers {}",
                self.slots.len(),
                self.memos.len()
            ));
        }
        for (slot, memo) in self.memos.iter().enumerate() {
            if self.slots.get(&memo.agent).map(|&slot| slot as usize) != Some(slot) {
                return Err(violation!("dedup's index misplaces {}", memo.agent));
            }
            if memo.recent.is_empty() {
                return Err(violation!("dedup remembers {} with no outcome", memo.agent));
            }
            if let Some(outcome) = memo
                .recent
                .iter()
                .find(|outcome| outcome.fingerprint != fingerprint(&outcome.id))
            {
                return Err(violation!(
                    "dedup's fingerprint of {}/{} is stale",
                    memo.agent,
                    outcome.id
                ));
            }
        }
        Ok(())
    }

    /// Invariant 1.
    pub fn check_bounds(&self, limits: &Limits) -> Result<(), InvariantViolation> {
        if self.memos.len() > limits.dedup_agents_max as usize {
            return Err(violation!("dedup remembers {} agents", self.memos.len()));
        }
        if let Some(memo) = self
            .memos
            .iter()
            .find(|memo| memo.recent.len() > limits.dedup_per_agent_max as usize)
        {
            return Err(violation!(
                "dedup remembers {} outcomes of {}",
                memo.recent.len(),
                memo.agent
            ));
        }
        Ok(())
    }
}

/// The snapshot form, unchanged from when the memos were a map by name: `{"agents": {name:
/// {"touched_index": n, "recent": [[id, reply], ...]}}}`, names in order, plus
/// `"swept_index": n` once a sweep of idle agents ran and `"idle_clock_ms": n` once the idle
/// clock moved.
#[derive(Serialize)]
struct DedupRef<'a> {
    agents: BTreeMap<&'a Text, MemoRef<'a>>,
    /// Absent until the first sweep, so older snapshots' bytes are unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    swept_index: Option<u64>,
    /// Absent while zero, so a fresh machine's bytes are unchanged.
    #[serde(skip_serializing_if = "is_zero")]
    idle_clock_ms: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

#[derive(Serialize)]
struct MemoRef<'a> {
    touched_index: u64,
    recent: Vec<(&'a String, &'a Reply)>,
}

#[derive(Deserialize)]
struct DedupOwned {
    agents: BTreeMap<Text, MemoOwned>,
    #[serde(default)]
    swept_index: Option<u64>,
    #[serde(default)]
    idle_clock_ms: u64,
}

#[derive(Deserialize)]
struct MemoOwned {
    touched_index: u64,
    recent: VecDeque<(String, Reply)>,
}

impl Serialize for Dedup {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        DedupRef {
            agents: self
                .memos
                .iter()
                .map(|memo| {
                    let recent = memo.recent.iter().map(|o| (&o.id, &o.reply)).collect();
                    let touched_index = memo.touched_index;
                    (
                        &memo.agent,
                        MemoRef {
                            touched_index,
                            recent,
                        },
                    )
                })
                .collect(),
            swept_index: self.swept_index,
            idle_clock_ms: self.idle_clock_ms,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Dedup {
    /// Reads the snapshot form; the caller sets the limits (`set_limits`) afterwards.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let owned = DedupOwned::deserialize(deserializer)?;
        let mut dedup = Dedup {
            memos: owned
                .agents
                .into_iter()
                .map(|(agent, memo)| Memo {
                    agent,
                    touched_index: memo.touched_index,
                    recent: memo
                        .recent
                        .into_iter()
                        .map(|(id, reply)| Outcome {
                            fingerprint: fingerprint(&id),
                            id,
                            reply,
                        })
                        .collect(),
                })
                .collect(),
            swept_index: owned.swept_index,
            idle_clock_ms: owned.idle_clock_ms,
            ..Dedup::default()
        };
        dedup.reindex();
        Ok(dedup)
    }
}

/// What one lookup found out about a request and its agent.
pub struct Known {
    /// The outcome to replay for a retried request: `Queued` while it still waits, the
    /// remembered reply once it completed.
    pub replay: Option<Reply>,
    /// The agent's dedup slot, if it has remembered outcomes (for [`Dedup::record`] of this
    /// request).
    pub slot: Option<Slot>,
    /// The agent's shared name, if the machine knows the agent.
    pub name: Option<Text>,
}

impl Core {
    /// What is known of `agent`'s request `request_id` and of the agent, in one look-up.
    pub fn recall(&self, agent: &str, request_id: &str) -> Known {
        let recall = self.dedup.recall(agent, request_id);
        let mut known = Known {
            replay: recall.reply.cloned(),
            slot: recall.slot,
            name: recall.agent.cloned(),
        };
        if let Some((name, waits)) = self.waiting.get_key_value(agent)
            && waits.contains_key(request_id)
        {
            known.name = Some(name.clone());
            known.replay = Some(Reply::Queued);
        }
        known
    }

    /// Applies the dedup memory's agent bound: agents with a live lease are forgotten last.
    pub fn enforce_dedup(&mut self, limits: &Limits) {
        let Core { dedup, usage, .. } = self;
        dedup.enforce(limits, |agent| usage.has_lease(agent));
    }

    /// The sweep of idle agents from the dedup memory, at the end of entry `index`, when the
    /// entry's step of the machine clock (from `clock_before_ms` to `clock_after_ms`) moved the
    /// idle clock across a multiple of `dedup_idle_ms`. Agents with a live lease are never
    /// swept. The first entry of a machine (`clock_before_ms` is `None`) neither moves the idle
    /// clock nor sweeps: its clock jumps from 0 to the first stamp.
    pub fn sweep_idle_dedup(
        &mut self,
        limits: &Limits,
        index: u64,
        clock_before_ms: Option<u64>,
        clock_after_ms: u64,
    ) {
        let Some(before_ms) = clock_before_ms else {
            return;
        };
        let step_ms = clock_after_ms.saturating_sub(before_ms);
        let Core { dedup, usage, .. } = self;
        if dedup.tick_idle_clock(step_ms, limits.dedup_idle_ms) {
            dedup.forget_idle(index, |agent| usage.has_lease(agent));
        }
    }
}
