//! The barrier workload: groups of agents pass a double barrier again and again, enter then
//! leave, each membership bound to the agent's session lease (which ends under faults), and
//! every request is recorded with its send and answer times and the start of its attempt.
//! The history is checked by `hivekeeper-checker`'s barrier rules ([`check`]).
//!
//! ```text
//!  member j of barrier b (agents > count, so rounds mix members; homed on member j mod N):
//!    barrier.enter {count, lease, wait_ms} ─▶ generation g      (one attempt: no answer ─▶
//!        the same request again, under a new id; the service takes the wait over)
//!    ├ refused (timeout: out of the round; lease_not_found) ─▶ enter again
//!    └ passed ─▶ 0-100 ms ─▶ barrier.leave {lease, wait_ms} ─▶ g   (no answer ─▶ again;
//!        timeout ─▶ a new attempt: still in the round)
//!        └ not_holder ─▶ lease.keepalive (the proof it lived) ─▶ a new session
//!    a membership it cannot be sure it left ends with its session (revoked), so an agent
//!    never enters again while still in a passed round
//!                                                     records: BarrierOp, LeaseAlive
//!  check: barrier::check (nobody early, at most count, rounds in order, nobody dropped)
//! ```

use std::time::Duration;

use hivekeeper_agent::Agent;
use hivekeeper_checker::barrier::{self, BarrierOp, Phase};
use hivekeeper_checker::recipe::{Answer, NOT_HOLDER};
use hivekeeper_protocol::{BarrierPassed, ErrorCode, Op};

use crate::check::{Tally, Verdict};
use crate::elections::outcome;
use crate::history::History;
use crate::workload::{Context, ask, prove_alive};

/// The barrier member `index` of barrier `name` (rounds of `count`).
pub struct Member {
    /// Its place among every barrier's members (its home and seed).
    pub index: usize,
    /// The barrier.
    pub name: String,
    /// The members of one round.
    pub count: u32,
}

/// Sends `barrier.enter` or `barrier.leave` until a definite answer (or the run's end),
/// every request of the attempt recorded.
async fn attempt(
    ctx: &Context,
    agent: &Agent,
    id: &str,
    member: &Member,
    lease: &str,
    phase: Phase,
) -> Answer<u64> {
    let since_us = ctx.timeline.now_us();
    loop {
        let op = match phase {
            Phase::Enter { count } => Op::BarrierEnter {
                name: member.name.clone(),
                count,
                lease: lease.to_string(),
                wait_ms: Some(ctx.wait_ms),
            },
            Phase::Leave => Op::BarrierLeave {
                name: member.name.clone(),
                lease: lease.to_string(),
                wait_ms: Some(ctx.wait_ms),
            },
        };
        let (invoke_us, answered) = ask::<BarrierPassed>(ctx, agent, id, op).await;
        let answered = answered.map(|passed| passed.generation);
        let op = BarrierOp {
            name: member.name.clone(),
            agent: id.to_string(),
            lease: lease.to_string(),
            phase,
            since_us,
            invoke_us,
            complete_us: ctx.timeline.now_us(),
            answer: answered.clone(),
        };
        ctx.recorder.with(|history| history.barrier_ops.push(op));
        if answered != Answer::Unknown || ctx.stopped() {
            return answered;
        }
    }
}

/// One member until the run ends.
pub async fn member(ctx: Context, member: Member, seed: u64) {
    let id = format!("{}-barrier{}", ctx.run, member.index);
    let Some(agent) = ctx.connect(&id, member.index % ctx.brokers.len()).await else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(seed ^ member.index as u64);
    let lease_gone = ErrorCode::LeaseNotFound.to_string();
    let mut session = None;
    while !ctx.stopped() {
        tokio::time::sleep(Duration::from_millis(rng.u64(10..50))).await;
        let Some(live) = ctx.live_session(&agent, &mut session).await else {
            continue;
        };
        let lease = live.lease().to_string();
        let enter = Phase::Enter {
            count: member.count,
        };
        match attempt(&ctx, &agent, &id, &member, &lease, enter).await {
            Answer::Ok(_) => {}
            Answer::Refused(code) if code != lease_gone => continue,
            _ => {
                session = None;
                continue;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(..100))).await;
        let left = loop {
            match attempt(&ctx, &agent, &id, &member, &lease, Phase::Leave).await {
                // Not left: still in the round, so leave again (unless the run is over).
                Answer::Refused(code) if code == ErrorCode::Timeout.to_string() => {
                    if ctx.stopped() {
                        break false;
                    }
                }
                Answer::Refused(code) if code == NOT_HOLDER => {
                    // Out of its round: only by its lease's end, unless the service is wrong.
                    prove_alive(&ctx, &agent, &lease).await;
                    break false;
                }
                answered => break matches!(answered, Answer::Ok(_)),
            }
        };
        if !left {
            session = None;
        }
    }
}

/// Checks the barrier history: every broken rule is an anomaly; the notes count the
/// requests by outcome and the rounds seen.
pub fn check(history: &History) -> Verdict {
    let ops = &history.barrier_ops;
    let mut verdict = Verdict::of(ops.len(), barrier::check(ops, &history.leases_alive));
    let mut counts = Tally::default();
    let mut rounds = std::collections::BTreeSet::new();
    for op in ops {
        let phase = match op.phase {
            Phase::Enter { .. } => "enter",
            Phase::Leave => "leave",
        };
        counts.count(phase, &outcome(&op.answer));
        if let Answer::Ok(generation) = op.answer {
            rounds.insert((op.name.as_str(), generation));
        }
    }
    verdict
        .notes
        .push(format!("{} rounds passed; {}", rounds.len(), counts.line()));
    verdict
}
