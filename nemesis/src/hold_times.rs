//! The hold-time workload: lock-delay and max-hold (PROTOCOL.md §6.1) under faults. A few
//! agents contend for a few locks, each on a lease of its own with a short TTL and a
//! lock-delay, kept alive by hand (so the send time of every acknowledged keepalive is known);
//! each hold ends one of five ways, drawn at random, and every request and every `lock.lost`
//! event is recorded. The history is checked by `hivekeeper-checker`'s hold-time rules
//! ([`check`]).
//!
//! ```text
//!  agent i (homed on member i mod N), on a lease {ttl_ms, lock_delay_ms} kept alive every
//!  TTL/3 by a task of its own, takes a random lock of {run}-hold0..L-1:
//!    lock.acquire {wait_ms, max_hold_ms for a max-hold end} ─▶ token ─▶ 20-150 ms, then:
//!    ├ release (2 in 5)     ─▶ lock.release: no delay for the next holder
//!    ├ max-hold (1 in 5)    ─▶ holds on past its max_hold_ms, then lock.release (not_holder)
//!    ├ lapse (1 in 5)       ─▶ its keepalives stop: the lease expires and its lock is held
//!    │                         back for the delay; a new lease
//!    ├ operator (1 in 10)   ─▶ admin.revoke of its lease: held back too; a new lease
//!    └ own revoke (1 in 10) ─▶ lease.revoke: no delay; a new lease
//!    refused timeout ─▶ again; any other refusal, or no answer (a grant may come unseen) ─▶
//!    lease.revoke, a new lease
//!  its events: every lock.lost (reason max_hold, or its lease's end)
//!                                                     records: LockOp, Lost
//!  check: hold_time::check (no grant while an older holder lives or inside its lock-delay
//!         window, no max-hold ended early, no hold taken from a live lease; the parts measured
//!         on the service's clock are excused across a clock fault)
//! ```

use std::sync::Arc;
use std::time::Duration;

use hivekeeper_agent::Agent;
use hivekeeper_checker::hold_time::{self, LockKind, LockOp, Lost};
use hivekeeper_checker::recipe::{Answer, NOT_HOLDER};
use hivekeeper_protocol::{Done, ErrorCode, Granted, LockMode, Op, Success, UnexpectedReply};

use crate::check::{Tally, Verdict};
use crate::elections::outcome;
use crate::history::History;
use crate::kept_lease::{self, KeptLease, LeaseHolder, News};
use crate::workload::{Context, ask};

/// In every agent id of the workload (`{run}-holdtime{i}`): what marks its requests among
/// those answered in a way a well-formed request never should be.
pub const AGENT_MARK: &str = "-holdtime";

/// What every agent of the workload shares.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The locks they contend for.
    pub locks: Vec<String>,
    /// Their leases' TTL.
    pub ttl_ms: u64,
    /// Their leases' lock-delay.
    pub lock_delay_ms: u64,
    /// The `max_hold_ms` of a hold meant to end by it.
    pub max_hold_ms: u64,
}

impl Plan {
    /// The locks of run `run`, `count` of them.
    pub fn locks(run: &str, count: usize) -> Vec<String> {
        (0..count).map(|i| format!("{run}-hold{i}")).collect()
    }
}

/// How a hold is made to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Release,
    MaxHold,
    Lapse,
    Operator,
    OwnRevoke,
}

impl Ending {
    /// One at random: release 2 in 5, max-hold and lapse 1 in 5 each, an operator's and an own
    /// revoke 1 in 10 each.
    fn draw(rng: &mut fastrand::Rng) -> Ending {
        match rng.u8(..10) {
            0..4 => Ending::Release,
            4..6 => Ending::MaxHold,
            6..8 => Ending::Lapse,
            8 => Ending::Operator,
            _ => Ending::OwnRevoke,
        }
    }
}

/// One agent of the workload, its requests recorded.
struct HoldAgent<'a> {
    ctx: &'a Context,
    plan: &'a Plan,
    agent: Agent,
    id: String,
}

impl HoldAgent<'_> {
    /// Sends `op` naming `lease`; records it as `kind` made of its answer.
    async fn send<T, F>(&self, lease: &str, op: Op, kind: F) -> Answer<T>
    where
        T: TryFrom<Success, Error = UnexpectedReply> + Clone,
        F: FnOnce(Answer<T>) -> LockKind,
    {
        let (invoke_us, answered) = ask(self.ctx, &self.agent, &self.id, op).await;
        record(self.ctx, &self.id, lease, invoke_us, kind(answered.clone()));
        answered
    }

    /// A new lease, recorded, and its keepalive task; `None` when the grant failed.
    async fn grant(&self) -> Option<KeptLease> {
        let (ttl_ms, lock_delay_ms) = (self.plan.ttl_ms, self.plan.lock_delay_ms);
        let op = Op::LeaseGrant {
            ttl_ms,
            lock_delay_ms,
        };
        let (ctx, id) = (self.ctx.clone(), self.id.clone());
        let report = move |lease: &str, news, invoke_us| {
            let kind = match news {
                News::Granted => LockKind::Grant {
                    ttl_ms,
                    lock_delay_ms,
                },
                News::KeptAlive => LockKind::Keepalive,
                News::Gone => return,
            };
            record(&ctx, &id, lease, invoke_us, kind);
        };
        let every = Duration::from_millis(ttl_ms / 3);
        KeptLease::grant(self.ctx, &self.agent, &self.id, op, every, Arc::new(report)).await
    }

    /// Ends `lease` by its agent's `lease.revoke` (operator: `admin.revoke`), recorded.
    async fn revoke(&self, lease: KeptLease, operator: bool) {
        lease.stop_keepalives();
        let op = if operator {
            Op::AdminRevoke {
                lease: lease.id.clone(),
            }
        } else {
            Op::LeaseRevoke {
                lease: lease.id.clone(),
            }
        };
        self.send::<Done, _>(&lease.id, op, |answer| LockKind::Revoke {
            operator,
            answer: answer.map(|_| ()),
        })
        .await;
    }

    /// `lock.release` of `lock` (token `token`), recorded.
    async fn release(&self, lease: &KeptLease, lock: &str, token: u64) -> Answer<()> {
        let op = Op::LockRelease {
            name: lock.to_string(),
            lease: lease.id.clone(),
        };
        let lock = lock.to_string();
        self.send::<Done, _>(&lease.id, op, |answer| LockKind::Release {
            lock,
            token,
            answer: answer.map(|_| ()),
        })
        .await
        .map(|_| ())
    }

    /// Ends the hold of `lock` (token `token`) as `ending` says; returns the lease when it
    /// goes on.
    async fn end(
        &self,
        lease: KeptLease,
        lock: &str,
        token: u64,
        ending: Ending,
    ) -> Option<KeptLease> {
        let released = match ending {
            Ending::Release => self.release(&lease, lock, token).await,
            Ending::MaxHold => {
                // Past its max-hold (the service ends it at the first check after): the
                // release finds it gone.
                let past = self.plan.max_hold_ms + 200;
                tokio::time::sleep(Duration::from_millis(past)).await;
                self.release(&lease, lock, token).await
            }
            Ending::Lapse => return None,
            Ending::Operator | Ending::OwnRevoke => {
                self.revoke(lease, ending == Ending::Operator).await;
                return None;
            }
        };
        match released {
            Answer::Ok(()) => Some(lease),
            Answer::Refused(code) if code == NOT_HOLDER => Some(lease),
            // Perhaps still held: the lease must end for the lock to be free again.
            _ => {
                self.revoke(lease, false).await;
                None
            }
        }
    }
}

fn record(ctx: &Context, agent: &str, lease: &str, invoke_us: u64, kind: LockKind) {
    let op = LockOp {
        agent: agent.to_string(),
        lease: lease.to_string(),
        invoke_us,
        complete_us: ctx.timeline.now_us(),
        kind,
    };
    ctx.recorder.with(|history| history.hold_time_ops.push(op));
}

/// One agent until the run ends.
pub async fn agent(ctx: Context, plan: Plan, index: usize, seed: u64) {
    let id = format!("{}{AGENT_MARK}{index}", ctx.run);
    let home = index % ctx.brokers.len();
    let mut rng = fastrand::Rng::with_seed(seed ^ (0x4f1d << 16) ^ index as u64);
    let into: fn(&mut History) -> &mut Vec<Lost> = |history| &mut history.lost_events;
    let holder = |agent, id| HoldAgent {
        ctx: &ctx,
        plan: &plan,
        agent,
        id,
    };
    kept_lease::take_turns(&ctx, id, home, into, &mut rng, holder).await;
}

impl LeaseHolder for HoldAgent<'_> {
    async fn new_lease(&self) -> Option<KeptLease> {
        self.grant().await
    }

    async fn turn(&self, lease: KeptLease, rng: &mut fastrand::Rng) -> Option<KeptLease> {
        let timeout = ErrorCode::Timeout.to_string();
        let lock = self.plan.locks[rng.usize(..self.plan.locks.len())].clone();
        let ending = Ending::draw(rng);
        let max_hold_ms = (ending == Ending::MaxHold).then_some(self.plan.max_hold_ms);
        let op = Op::LockAcquire {
            name: lock.clone(),
            lease: lease.id.clone(),
            wait_ms: Some(self.ctx.wait_ms),
            max_hold_ms,
            mode: LockMode::Exclusive,
        };
        let acquired = self
            .send::<Granted, _>(&lease.id, op, |answer| LockKind::Acquire {
                lock: lock.clone(),
                max_hold_ms,
                answer: answer.map(|granted| granted.token),
            })
            .await;
        match acquired {
            Answer::Ok(Granted { token }) => {
                tokio::time::sleep(Duration::from_millis(rng.u64(20..150))).await;
                self.end(lease, &lock, token, ending).await
            }
            Answer::Refused(code) if code == timeout => Some(lease),
            // Gone, or perhaps granted unseen: a new lease.
            _ => {
                self.revoke(lease, false).await;
                None
            }
        }
    }

    async fn drop_lease(&self, lease: KeptLease) {
        self.revoke(lease, false).await;
    }
}

/// Checks the hold-time history: every broken rule is an anomaly; the notes count the
/// requests by outcome and say how close the grants came to the lock-delay windows.
pub fn check(history: &History) -> Verdict {
    let ops = &history.hold_time_ops;
    let checked = hold_time::check(ops, &history.lost_events, &history.clock_faults);
    let mut verdict = Verdict::of(ops.len(), checked.violations);
    let mut counts = Tally::default();
    for op in ops {
        let (what, outcome) = match &op.kind {
            LockKind::Grant { .. } => ("lease.grant", "ok".into()),
            LockKind::Keepalive => ("lease.keepalive", "ok".into()),
            LockKind::Acquire {
                max_hold_ms: None,
                answer,
                ..
            } => ("lock.acquire", outcome(answer)),
            LockKind::Acquire { answer, .. } => ("lock.acquire with max_hold_ms", outcome(answer)),
            LockKind::Release { answer, .. } => ("lock.release", outcome(answer)),
            LockKind::Revoke {
                operator: true,
                answer,
            } => ("admin.revoke", outcome(answer)),
            LockKind::Revoke { answer, .. } => ("lease.revoke", outcome(answer)),
        };
        counts.count(what, &outcome);
    }
    let max_hold_lost = history
        .lost_events
        .iter()
        .filter(|lost| lost.max_hold)
        .count();
    let lost = history.lost_events.len();
    verdict.notes.push(counts.line());
    verdict.notes.push(format!(
        "{} grants checked against a lock-delay window (the closest {} after its end), {} \
         delays or max-holds excused by a clock fault, {} grants within the delay after a \
         release (none needed); lock.lost: {max_hold_lost} max_hold, {} lease ended",
        checked.delays_checked,
        checked
            .closest_delay_us
            .map_or(String::from("-"), |us| format!("{} ms", us / 1_000)),
        checked.excused,
        checked.undelayed_after_release,
        lost - max_hold_lost
    ));
    verdict
}
