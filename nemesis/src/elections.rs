//! The election workload: a few agents campaign on a few names, each leadership bound to the
//! agent's session lease (which ends under faults), leaders proclaim new values and resign
//! (or end their lease) after a while, and every request is recorded with its send and answer
//! times. An observer reads every election's leader, by `election.leader` and by the mirror
//! key `$election/{name}`, all along. The history is checked by `hivekeeper-checker`'s
//! election rules ([`check`]).
//!
//! ```text
//!  candidate i (homed on member i mod N), a random name of {run}-elect0..E-1:
//!    election.campaign {lease, value "{agent}-{n}", wait_ms} ─▶ token
//!    ├ leads: 1-3 × (50-300 ms, proclaim "{agent}-{n}", fence.check {kind: election},
//!    │        election.leader, kv.get $election/{name})
//!    │   ├ a refusal (not_holder: the lease ended) ─▶ lease.keepalive (the proof it lived)
//!    │   └ resign (or, one time in five, lease.revoke: a lease-end handover)
//!    │       then with the old token: proclaim and fence.check (both must be refused)
//!    ├ refused (timeout, lease_not_found) ─▶ again
//!    └ no answer ─▶ the session is dropped (revoked): a grant nobody awaits ends with it
//!  observer: election.leader / kv.get $election/{name} of every name, every 100 ms
//!                                                           records: ElectionOp, LeaseAlive
//!  check: election::check (one leader per name in real time, fencing, the mirror)
//! ```

use std::time::Duration;

use hivekeeper_agent::protocol::kv::election_key;
use hivekeeper_agent::{Agent, Session};
use hivekeeper_checker::election::{self, ElectionKind, ElectionOp, ReadVia, Seen};
use hivekeeper_checker::recipe::Answer;
use hivekeeper_checker::recipe::NOT_HOLDER;
use hivekeeper_protocol::{
    Done, ErrorCode, FenceStatus, Granted, KvPutDone, LeaderReport, Op, ResourceKind, Success,
    UnexpectedReply,
};

use crate::check::{Tally, Verdict};
use crate::history::History;
use crate::workload::{Context, ask, prove_alive};

/// The names of run `run`'s elections, `count` of them.
pub fn names(run: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{run}-elect{i}")).collect()
}

/// One candidate's agent, its requests recorded.
struct Candidate<'a> {
    ctx: &'a Context,
    agent: Agent,
    id: String,
    /// Values sent so far: each value `{id}-{n}` is unique.
    sent: u64,
}

impl Candidate<'_> {
    fn value(&mut self) -> String {
        self.sent += 1;
        format!("{}-{}", self.id, self.sent)
    }

    /// Sends `op` and records it as `kind` made of its answer.
    async fn send<T, F>(&self, name: &str, op: Op, kind: F) -> Answer<T>
    where
        T: TryFrom<Success, Error = UnexpectedReply> + Clone,
        F: FnOnce(Answer<T>) -> ElectionKind,
    {
        let (invoke_us, answered) = ask(self.ctx, &self.agent, &self.id, op).await;
        record(self.ctx, name, &self.id, invoke_us, kind(answered.clone()));
        answered
    }

    async fn proclaim(&mut self, name: &str, token: u64) -> Answer<u64> {
        let value = self.value();
        let op = Op::ElectionProclaim {
            name: name.to_string(),
            token,
            value: value.clone(),
        };
        let answered = self
            .send::<KvPutDone, _>(name, op, |answer| ElectionKind::Proclaim {
                token,
                value,
                answer: answer.map(|done| done.revision),
            })
            .await;
        answered.map(|done| done.revision)
    }

    async fn fence_check(&self, name: &str, token: u64) -> Answer<bool> {
        let op = Op::FenceCheck {
            name: name.to_string(),
            kind: ResourceKind::Election,
            token,
        };
        let to_valid = |answer: Answer<FenceStatus>| answer.map(|status| status.valid);
        let answered = self
            .send::<FenceStatus, _>(name, op, |answer| ElectionKind::FenceCheck {
                token,
                answer: to_valid(answer),
            })
            .await;
        to_valid(answered)
    }

    /// Leads `name` under `token` for a while, then resigns or ends its lease; `false` when
    /// the session must be replaced (its lease ended, or was ended on purpose).
    async fn lead(
        &mut self,
        session: &Session,
        name: &str,
        token: u64,
        rng: &mut fastrand::Rng,
    ) -> bool {
        for _ in 0..rng.u32(1..4) {
            tokio::time::sleep(Duration::from_millis(rng.u64(50..300))).await;
            let proclaimed = self.proclaim(name, token).await;
            let fenced = self.fence_check(name, token).await;
            read_leader(self.ctx, &self.agent, &self.id, name).await;
            read_mirror(self.ctx, &self.agent, &self.id, name).await;
            if proclaimed.refused(NOT_HOLDER) || fenced == Answer::Ok(false) {
                // Deposed: only by its lease's end, unless the service is wrong.
                prove_alive(self.ctx, &self.agent, session.lease()).await;
                return false;
            }
            if self.ctx.stopped() {
                break;
            }
        }
        let keep = if rng.u8(..5) == 0 {
            let _ = session.revoke().await;
            false
        } else {
            let op = Op::ElectionResign {
                name: name.to_string(),
                token,
            };
            let answered = self
                .send::<Done, _>(name, op, |answer| ElectionKind::Resign {
                    token,
                    answer: answer.map(|_| ()),
                })
                .await;
            matches!(answered, Answer::Ok(_))
        };
        // A deposed leader's token fences it out.
        self.proclaim(name, token).await;
        self.fence_check(name, token).await;
        keep
    }
}

fn record(ctx: &Context, name: &str, agent: &str, invoke_us: u64, kind: ElectionKind) {
    let op = ElectionOp {
        name: name.to_string(),
        agent: agent.to_string(),
        invoke_us,
        complete_us: ctx.timeline.now_us(),
        kind,
    };
    ctx.recorder.with(|history| history.election_ops.push(op));
}

/// `election.leader` of `name`, recorded when answered.
async fn read_leader(ctx: &Context, agent: &Agent, id: &str, name: &str) {
    let invoke_us = ctx.timeline.now_us();
    let op = Op::ElectionLeader {
        name: name.to_string(),
    };
    if let Ok(report) = agent.request_as::<LeaderReport>(op).await {
        let leader = report.leader.map(|leader| Seen {
            agent: Some(leader.agent),
            token: leader.token,
            value: leader.value,
        });
        let via = ReadVia::Leader;
        record(ctx, name, id, invoke_us, ElectionKind::Read { via, leader });
    }
}

/// A linearizable read of `$election/{name}`, recorded when answered: its `create_revision`
/// is the leader's token.
async fn read_mirror(ctx: &Context, agent: &Agent, id: &str, name: &str) {
    let invoke_us = ctx.timeline.now_us();
    if let Ok(read) = agent.kv().get(election_key(name)).await {
        let leader = read.kv.map(|kv| Seen {
            agent: None,
            token: kv.create_revision,
            value: kv.value,
        });
        let via = ReadVia::Mirror;
        record(ctx, name, id, invoke_us, ElectionKind::Read { via, leader });
    }
}

/// One candidate until the run ends.
pub async fn candidate(ctx: Context, index: usize, names: Vec<String>, seed: u64) {
    let id = format!("{}-elect{index}", ctx.run);
    let home = index % ctx.brokers.len();
    let Some(agent) = ctx.connect(&id, home).await else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(seed ^ index as u64);
    let mut candidate = Candidate {
        ctx: &ctx,
        agent: agent.clone(),
        id,
        sent: 0,
    };
    let mut session = None;
    while !ctx.stopped() {
        let Some(live) = ctx.live_session(&agent, &mut session).await else {
            continue;
        };
        let name = names[rng.usize(..names.len())].clone();
        let value = candidate.value();
        let op = Op::ElectionCampaign {
            name: name.clone(),
            lease: live.lease().to_string(),
            value: value.clone(),
            wait_ms: Some(ctx.wait_ms),
        };
        let lease = live.lease().to_string();
        let granted = candidate
            .send::<Granted, _>(&name, op, |answer| ElectionKind::Campaign {
                lease,
                value,
                answer: answer.map(|granted| granted.token),
            })
            .await;
        let keep = match granted {
            Answer::Ok(Granted { token }) => candidate.lead(&live, &name, token, &mut rng).await,
            Answer::Refused(code) => code != ErrorCode::LeaseNotFound.to_string(),
            // Perhaps queued still: a grant nobody awaits ends with the session.
            Answer::Unknown => false,
        };
        if !keep {
            session = None;
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(10..50))).await;
    }
}

/// The observer: every election's leader, read both ways, every 100 ms.
pub async fn observer(ctx: Context, names: Vec<String>) {
    let id = format!("{}-electobs", ctx.run);
    let Some(agent) = ctx.connect(&id, 2 % ctx.brokers.len()).await else {
        return;
    };
    let mut mirror = false;
    while !ctx.stopped() {
        for name in &names {
            if mirror {
                read_mirror(&ctx, &agent, &id, name).await;
            } else {
                read_leader(&ctx, &agent, &id, name).await;
            }
        }
        mirror = !mirror;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the election history: every broken rule is an anomaly; the notes count the
/// requests by outcome.
pub fn check(history: &History) -> Verdict {
    let ops = &history.election_ops;
    let mut verdict = Verdict::of(ops.len(), election::check(ops, &history.leases_alive));
    let mut counts = Tally::default();
    for op in ops {
        let (what, outcome) = match &op.kind {
            ElectionKind::Campaign { answer, .. } => ("campaign", outcome(answer)),
            ElectionKind::Proclaim { answer, .. } => ("proclaim", outcome(answer)),
            ElectionKind::Resign { answer, .. } => ("resign", outcome(answer)),
            ElectionKind::FenceCheck { answer, .. } => (
                "fence.check",
                match answer {
                    Answer::Ok(valid) => format!("valid={valid}"),
                    other => outcome(other),
                },
            ),
            ElectionKind::Read { via, leader } => (
                if *via == ReadVia::Leader {
                    "election.leader"
                } else {
                    "mirror read"
                },
                if leader.is_some() {
                    "a leader".into()
                } else {
                    "none".into()
                },
            ),
        };
        counts.count(what, &outcome);
    }
    verdict.notes.push(counts.line());
    verdict
}

/// How an answer reads in the counts.
pub fn outcome<T>(answer: &Answer<T>) -> String {
    match answer {
        Answer::Ok(_) => "ok".into(),
        Answer::Refused(code) => code.clone(),
        Answer::Unknown => "no answer".into(),
    }
}
