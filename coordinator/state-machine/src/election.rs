//! Leader elections: one leader per name, candidates in strict arrival (log) order, the
//! leadership fenced by a token and mirrored into the key space as `$election/{name}`.
//!
//! An election is a lock whose holder has a value. `election.campaign` queues the sender's
//! lease as a candidate (or makes it the leader at once, answered with the grant's token);
//! `election.proclaim` changes the leader's value; `election.resign` steps down, and the head
//! candidate leads in the same entry (its queued campaign is answered then, as a lock's
//! waiter is). The leader's lease ending (revoke, expiry, `admin.revoke`, account removal)
//! does the same. Proclaim and resign name the leadership by its token and are refused
//! `not_holder` unless that token leads now and the sender is the agent whose lease leads:
//! a deposed leader's late proclaim or resign (etcd's "Proclaim after a lost leadership
//! succeeds" and "Resign with a stale session") cannot change anything, by construction.
//!
//! The mirror: `$election/{name}` (a reserved key, read-only to clients) holds the leader's
//! value. A new leader's key is created anew at the revision equal to its token (its
//! `create_revision` is the token), a proclaim puts it at a fresh revision (same
//! `create_revision`, a new `mod_revision`), and it is deleted at a fresh revision when the
//! leader goes; a handover deletes the old key, then creates the new leader's, at two
//! revisions of the same entry. Every revision comes from the token counter
//! (`Core::next_token`), so the key's revisions and the tokens are one increasing space, and a
//! `watch.poll` on `$election/` sees every leadership change with the watch's guarantees.
//! The key is bound to no lease (its lease is the service's business, and a leader's lease id
//! stays private as in `inspect`), and the key space's capacity bounds do not apply to it: a
//! leadership change is never refused for a full key space; elections are bounded by
//! `resources_max` and their values by `value_bytes_max` at admission.
//!
//! Invariants (checked by [`Resource::check_invariants`] and
//! [`StateMachine::check_election_invariants`]):
//! 1. After every entry an election in the map has a leader; one whose leader went with no
//!    candidate left is forgotten. (A leaderless election exists only inside an apply, between
//!    the leader's end and the handover.)
//! 2. The leader's lease never also waits among the candidates.
//! 3. The candidates are a FIFO queue (`fifo.rs`, its invariants 1 to 4), and
//!    `candidate_values` holds exactly one value per candidate, by its lease.
//! 4. `$election/{name}` exists exactly for the elections in the map, holds the leader's value,
//!    is bound to no lease, and its `create_revision` is the leader's token; no other key
//!    starts with `$election/`.
//! 5. Mirror changes are written to the key space in the entry that makes them, in the order
//!    of their revisions: none is pending after an entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use hivekeeper_protocol::kv::{ELECTION_KEY_PREFIX, election_key};
use hivekeeper_protocol::{ErrorCode, HolderInfo, KvPutDone, LeaderInfo, Op, ResourceKind};
use serde::{Deserialize, Serialize};

use crate::fifo::Queue;
use crate::grant::{Acquire, Core, Hold, Occupancy, Waiter};
use crate::kv::KvError;
use crate::resource::{Listed, Resource, list_by_name};
use crate::{
    Ctx, Decision, InvariantViolation, LeaseId, Limits, NameMap, Reply, ResourceKey, StateMachine,
    Text, snapshot,
};

/// One election in use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Election {
    /// The leader's hold (its token is the leadership's); `None` only transiently inside an
    /// apply.
    pub leader: Option<Hold>,
    /// The leader's value, what `$election/{name}` holds.
    pub value: String,
    /// Candidates, head first.
    pub candidates: Queue,
    /// Each candidate's value, by its lease (a lease waits once in a queue: `fifo.rs`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub candidate_values: BTreeMap<LeaseId, String>,
}

/// A change of a mirror key made by a leadership change, at its revision, until the machine
/// writes it to the key space ([`StateMachine::write_election_mirror`]).
#[derive(Debug, Clone, PartialEq)]
enum MirrorChange {
    /// Put the leader's value (created anew when the key is absent).
    Put {
        /// The election's name.
        name: Text,
        /// The leader's value.
        value: String,
        /// The put's revision: the new leader's token, or a proclaim's own.
        revision: u64,
    },
    /// Delete the key: nobody leads, or a new leader is about to.
    Delete {
        /// The election's name.
        name: Text,
        /// The delete's revision, before the next leader's token.
        revision: u64,
    },
}

/// Every election in use, and the mirror changes of the current entry. Serialized as the map
/// of elections alone, in name order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Elections {
    /// Elections with a leader, by name.
    #[serde(serialize_with = "snapshot::sorted")]
    by_name: NameMap<Election>,
    /// Mirror changes made by the current entry and not yet written (invariant 5: empty
    /// between entries, so never in a snapshot).
    #[serde(skip)]
    mirror: Vec<MirrorChange>,
}

impl Elections {
    /// Whether no election is in use: the machine's snapshot then leaves elections out, and
    /// keeps data format 1's bytes.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// `name`'s key and its leader's lease, when the leadership of `token` is `agent`'s: what
    /// proclaim and resign need, else their refusal.
    fn led_by(&self, agent: &str, name: &str, token: u64) -> Result<(Text, LeaseId), Reply> {
        let leader = self
            .by_name
            .get_key_value(name)
            .and_then(|(name, election)| Some((name, election.leader.as_ref()?)));
        match leader {
            Some((name, hold)) if hold.token == token && &*hold.agent == agent => {
                Ok((name.clone(), hold.lease))
            }
            _ => Err(Reply::refused(
                ErrorCode::NotHolder,
                format!("token {token} does not lead election {name:?} for agent {agent}"),
            )),
        }
    }
}

impl StateMachine {
    /// An election write (`election.campaign`, `election.proclaim`, `election.resign`),
    /// handed to its handler; every leadership change is in the key space when it returns.
    pub(crate) fn election_apply(
        &mut self,
        ctx: &mut Ctx,
        agent: &Text,
        id: &str,
        op: Op,
    ) -> Decision {
        let decision = match op {
            Op::ElectionCampaign {
                name,
                lease,
                value,
                wait_ms,
            } => self.campaign(ctx, Acquire::new(agent, id, &lease, wait_ms), name, value),
            Op::ElectionProclaim { name, token, value } => {
                self.proclaim(ctx, agent, &name, token, value)
            }
            Op::ElectionResign { name, token } => self.resign(ctx, agent, &name, token),
            other => Err(Reply::refused(
                ErrorCode::BadRequest,
                format!("{} is not an election write", other.name()),
            )),
        };
        self.write_election_mirror();
        decision
    }

    /// `election.campaign`: leads at once when nobody leads, queues behind the leader, or is
    /// refused (`Err`, nothing changed). Leading already answers the leadership's token; a
    /// lease that waits already takes its wait over, as a second `lock.acquire` does.
    fn campaign(
        &mut self,
        ctx: &mut Ctx,
        acquire: Acquire<'_>,
        name: String,
        value: String,
    ) -> Decision {
        self.check_election_value("election.campaign", &value)?;
        let claim = self.core.claim(&acquire)?;
        let (agent, lease) = (claim.agent, claim.lease);
        let Some(election) = self.elections.by_name.get_mut(name.as_str()) else {
            self.core.holds_quota(agent, &self.limits)?;
            self.resources_full()?;
            let name: Text = Arc::from(name);
            let key = ResourceKey::new(ResourceKind::Election, &name);
            let hold = self.core.grant_now(ctx, &key, lease, agent, 1);
            let token = hold.token;
            let election = Election {
                leader: Some(hold),
                value: value.clone(),
                candidates: Queue::default(),
                candidate_values: BTreeMap::new(),
            };
            self.elections.by_name.insert(name.clone(), election);
            self.elections.mirror.push(MirrorChange::Put {
                name,
                value,
                revision: token,
            });
            return Ok(Reply::Granted { token });
        };
        let key = ResourceKey::new(ResourceKind::Election, &Arc::from(name.as_str()));
        let leader = election
            .leader
            .as_ref()
            .expect("invariant 1: an election in use has a leader");
        if leader.lease == lease {
            if election.value != value {
                let message = format!(
                    "lease {lease} already leads election {name:?} with another value: \
                     election.proclaim changes it"
                );
                return Err(Reply::refused(ErrorCode::BadRequest, message));
            }
            return Ok(Reply::Granted {
                token: leader.token,
            });
        }
        let waits_with = election.candidate_values.get(&lease);
        if waits_with.is_some_and(|waiting| *waiting != value) {
            return Err(self.core.already_waiting(lease, &key, "another value"));
        }
        let held = || format!("election {name:?} has a leader");
        let candidates = &mut election.candidates;
        let queued = self
            .core
            .wait_behind(ctx, &key, &claim, candidates, &held, &self.limits)?;
        // The candidate's value (the same one when it took its wait over).
        election.candidate_values.insert(lease, value);
        Ok(queued)
    }

    /// `election.proclaim`: the leader's new value, put to its key at a fresh revision (the
    /// answer's).
    fn proclaim(
        &mut self,
        ctx: &mut Ctx,
        agent: &str,
        name: &str,
        token: u64,
        value: String,
    ) -> Decision {
        self.check_election_value("election.proclaim", &value)?;
        let (name, _) = self.elections.led_by(agent, name, token)?;
        let revision = self.core.next_token(ctx.index);
        let election = self
            .elections
            .by_name
            .get_mut(&name)
            .expect("led_by found it");
        election.value = value.clone();
        self.elections.mirror.push(MirrorChange::Put {
            name,
            value,
            revision,
        });
        Ok(Reply::KvPut(KvPutDone {
            revision,
            prev_kv: None,
        }))
    }

    /// `election.resign`: the leadership ends and the head candidate leads, in this entry.
    fn resign(&mut self, ctx: &mut Ctx, agent: &str, name: &str, token: u64) -> Decision {
        let (name, lease) = self.elections.led_by(agent, name, token)?;
        let (elections, core, limits) = self.resource_mut(ResourceKind::Election);
        let released = elections.release(ctx, core, &name, lease, limits);
        debug_assert!(released, "led_by found the leadership");
        Ok(Reply::Done)
    }

    /// `election.leader`: who leads `name`, with its value and token.
    pub(crate) fn election_leader(&self, name: &str) -> Reply {
        let leader = self.elections.by_name.get(name).and_then(|election| {
            let hold = election.leader.as_ref()?;
            Some(LeaderInfo {
                agent: hold.agent.to_string(),
                value: election.value.clone(),
                token: hold.token,
            })
        });
        Reply::Leader { leader }
    }

    /// A value is bounded as a key's value is: at most the key space's `value_bytes_max`.
    fn check_election_value(&self, op: &str, value: &str) -> Result<(), Reply> {
        let max = self.kv.limits().value_bytes_max;
        if value.len() <= max as usize {
            return Ok(());
        }
        let refusal = KvError::ValueLength {
            len: value.len(),
            max,
        };
        Err(Reply::refused(
            ErrorCode::BadRequest,
            format!("{op}: {refusal}"),
        ))
    }

    /// Writes the leadership changes of this entry to `$election/` keys, in revision order
    /// (invariant 5). Called wherever a leadership may change: the election ops and
    /// [`StateMachine::settle`].
    pub(crate) fn write_election_mirror(&mut self) {
        for change in std::mem::take(&mut self.elections.mirror) {
            let (revision, key, value) = match change {
                MirrorChange::Put {
                    name,
                    value,
                    revision,
                } => (revision, election_key(&name), Some(value)),
                MirrorChange::Delete { name, revision } => (revision, election_key(&name), None),
            };
            self.kv
                .mirror(revision, &key, value)
                .expect("a mirror revision is a fresh token, past the key space's revision");
        }
    }

    /// Invariant 4 against the key space, and invariant 5.
    pub(crate) fn check_election_invariants(&self) -> Result<(), InvariantViolation> {
        if !self.elections.mirror.is_empty() {
            return Err(violation!(
                "election invariant 5: mirror changes left after the entry"
            ));
        }
        for (name, election) in &self.elections.by_name {
            let key = election_key(name);
            let Some(kv) = self.kv.get(&key) else {
                return Err(violation!("election invariant 4: {key:?} is missing"));
            };
            let token = election.leader.as_ref().map(|hold| hold.token);
            if kv.value != election.value || Some(kv.create_revision) != token || kv.lease.is_some()
            {
                return Err(violation!(
                    "election invariant 4: {key:?} is {kv:?}, the leader's token is {token:?}"
                ));
            }
        }
        let mirrored = self.kv.keys_with_prefix(ELECTION_KEY_PREFIX).count();
        if mirrored != self.elections.by_name.len() {
            return Err(violation!(
                "election invariant 4: {mirrored} keys under {ELECTION_KEY_PREFIX:?} for {} \
                 elections",
                self.elections.by_name.len()
            ));
        }
        Ok(())
    }
}

impl Election {
    /// The candidates as `inspect` shows them, each with its value.
    fn candidate_infos(&self) -> Vec<hivekeeper_protocol::WaiterInfo> {
        let values = self
            .candidates
            .iter()
            .map(|waiter| self.candidate_values.get(&waiter.lease).cloned());
        let infos = self.candidates.infos(false).into_iter().zip(values);
        infos
            .map(|(info, value)| hivekeeper_protocol::WaiterInfo { value, ..info })
            .collect()
    }
}

impl Resource for Elections {
    fn held_tokens(&self, name: &str) -> Vec<u64> {
        let leader = self
            .by_name
            .get(name)
            .and_then(|election| election.leader.as_ref());
        leader.map(|hold| vec![hold.token]).unwrap_or_default()
    }

    fn inspect(&self, name: &str) -> Reply {
        let election = self.by_name.get(name);
        let leader = election.and_then(|election| {
            let hold = election.leader.as_ref()?;
            Some(HolderInfo {
                value: Some(election.value.clone()),
                ..hold.info(None)
            })
        });
        Reply::Inspect {
            limit: None,
            holders: leader.into_iter().collect(),
            waiters: election.map(Election::candidate_infos).unwrap_or_default(),
            count: None,
            leaving: None,
        }
    }

    fn held_key(&self, name: &str) -> Option<ResourceKey> {
        let (name, _) = self.by_name.get_key_value(name)?;
        Some(ResourceKey::new(ResourceKind::Election, name))
    }

    /// Leaves the election leaderless until [`Resource::settle`].
    fn take_hold(&mut self, name: &str, lease: LeaseId) -> Option<Hold> {
        let election = self.by_name.get_mut(name)?;
        if election.leader.as_ref()?.lease != lease {
            return None;
        }
        election.leader.take()
    }

    fn take_waiter(&mut self, name: &str, agent: &str, request_id: &str) -> Option<Waiter> {
        let election = self.by_name.get_mut(name)?;
        let waiter = election.candidates.take(agent, request_id)?;
        election.candidate_values.remove(&waiter.lease);
        Some(waiter)
    }

    /// Each leaderless election: its key is deleted at a fresh revision, then the head
    /// candidate leads (its key created at its token), or the election is forgotten when
    /// nobody campaigns.
    fn settle(&mut self, ctx: &mut Ctx, core: &mut Core, keys: &[ResourceKey], _: &Limits) {
        for key in keys {
            let Some(election) = self.by_name.get_mut(&key.name) else {
                continue;
            };
            if election.leader.is_some() {
                continue;
            }
            self.mirror.push(MirrorChange::Delete {
                name: key.name.clone(),
                revision: core.next_token(ctx.index),
            });
            let Some(head) = election.candidates.pop_front() else {
                self.by_name.remove(&key.name);
                continue;
            };
            let value = election
                .candidate_values
                .remove(&head.lease)
                .expect("invariant 3: every candidate has a value");
            let hold = core.grant_waiter(ctx, key, head);
            self.mirror.push(MirrorChange::Put {
                name: key.name.clone(),
                value: value.clone(),
                revision: hold.token,
            });
            election.value = value;
            election.leader = Some(hold);
        }
    }

    fn in_use(&self) -> usize {
        self.by_name.len()
    }

    fn list<'a>(&'a self, keep: &dyn Fn(&str) -> bool) -> Vec<Listed<'a>> {
        list_by_name(&self.by_name, keep, |election| {
            let leaders = usize::from(election.leader.is_some());
            (leaders, election.candidates.len())
        })
    }

    fn check_invariants(&self, occupancy: &mut Occupancy) -> Result<(), InvariantViolation> {
        for (name, election) in &self.by_name {
            let key = ResourceKey::new(ResourceKind::Election, name);
            let Some(leader) = &election.leader else {
                return Err(violation!(
                    "election {name:?} has no leader after the entry"
                ));
            };
            occupancy.hold(&key, leader);
            election.candidates.check(&key)?;
            if election.candidates.has_lease(leader.lease) {
                return Err(violation!(
                    "election {name:?}: the leader's lease also campaigns"
                ));
            }
            let leases: Vec<LeaseId> = election.candidates.iter().map(|w| w.lease).collect();
            if !leases
                .iter()
                .all(|lease| election.candidate_values.contains_key(lease))
                || election.candidate_values.len() != leases.len()
            {
                return Err(violation!(
                    "election {name:?}: the candidates' values are not one per candidate"
                ));
            }
            for waiter in election.candidates.iter() {
                occupancy.wait(&key, waiter);
            }
        }
        Ok(())
    }
}
