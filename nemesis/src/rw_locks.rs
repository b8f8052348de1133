//! The read-write lock workload: shared and exclusive holds, multi-locks and downgrades
//! (PROTOCOL.md §8.4 to §8.5.3) under faults. A few agents contend for a few locks, each on a
//! lease of its own with a short TTL and no lock-delay, kept alive by hand (so the send time
//! of every acknowledged keepalive is known, [`crate::kept_lease`]); every request, every
//! lapse of a lease and every `lock.lost` event is recorded. The history is checked by
//! `hivekeeper-checker`'s read-write rules ([`check`]).
//!
//! ```text
//!  agent i (homed on member i mod N), on a lease {ttl_ms, no lock-delay} kept alive every
//!  TTL/3 by a task of its own, with its random generator seeded from the run's seed:
//!    shared or exclusive (1 in 2 each), on one random lock of {run}-rw0..L-1, or (1 in 4)
//!    lock.acquire_all of two of them
//!    lock.acquire / lock.acquire_all {wait_ms, mode} ─▶ token ─▶ 20-120 ms, then
//!    ├ (one exclusive lock, 1 in 3) lock.downgrade ─▶ 20-120 ms more, shared
//!    then:
//!    ├ release (7 in 10)   ─▶ lock.release / lock.release_all
//!    ├ lapse (2 in 10)     ─▶ its keepalives stop: the lease expires, its holds with it;
//!    │                        a new lease
//!    └ own revoke (1 in 10) ─▶ lease.revoke; a new lease
//!    refused timeout ─▶ again; any other refusal, or no answer (a grant may come unseen) ─▶
//!    lease.revoke, a new lease
//!  its events: every lock.lost                       records: RwOp, Lost
//!  check: rw_lock::check (no exclusive holder beside anyone, shared holders together, a
//!         downgraded hold shared from its downgrade, tokens in grant order; nothing measured
//!         on the service's clock, so nothing excused)
//! ```

use std::sync::Arc;
use std::time::Duration;

use hivekeeper_agent::Agent;
use hivekeeper_checker::hold_time::Lost;
use hivekeeper_checker::recipe::{Answer, NOT_HOLDER};
use hivekeeper_checker::rw_lock::{self, Mode, RwKind, RwOp};
use hivekeeper_protocol::{Done, ErrorCode, Granted, LockMode, Op, Success, UnexpectedReply};

use crate::check::{Tally, Verdict};
use crate::elections::outcome;
use crate::history::History;
use crate::kept_lease::{self, KeptLease, LeaseHolder, News};
use crate::workload::{Context, ask};

/// In every agent id of the workload (`{run}-rwlock{i}`): what marks its requests among those
/// answered in a way a well-formed request never should.
pub const AGENT_MARK: &str = "-rwlock";

/// What every agent of the workload shares.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The locks they contend for.
    pub locks: Vec<String>,
    /// Their leases' TTL.
    pub ttl_ms: u64,
}

impl Plan {
    /// The locks of run `run`, `count` of them.
    pub fn locks(run: &str, count: usize) -> Vec<String> {
        (0..count).map(|i| format!("{run}-rw{i}")).collect()
    }
}

/// How a hold is made to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Release,
    Lapse,
    OwnRevoke,
}

impl Ending {
    /// One at random: release 7 in 10, lapse 2 in 10, the agent's own revoke 1 in 10.
    fn draw(rng: &mut fastrand::Rng) -> Ending {
        match rng.u8(..10) {
            0..7 => Ending::Release,
            7..9 => Ending::Lapse,
            _ => Ending::OwnRevoke,
        }
    }
}

/// What one hold asks for: its locks (one, or two for a multi-lock) and its mode.
#[derive(Debug, Clone)]
struct Ask {
    names: Vec<String>,
    mode: Mode,
}

impl Ask {
    /// One at random from `locks`: a multi-lock of two 1 in 4 (given two locks), shared or
    /// exclusive 1 in 2.
    fn draw(rng: &mut fastrand::Rng, locks: &[String]) -> Ask {
        let first = rng.usize(..locks.len());
        let mut names = vec![locks[first].clone()];
        if locks.len() >= 2 && rng.u8(..4) == 0 {
            let second = (first + 1 + rng.usize(..locks.len() - 1)) % locks.len();
            names.push(locks[second].clone());
        }
        let mode = if rng.bool() {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        Ask { names, mode }
    }

    /// Its request under `lease`, waiting at most `wait_ms`.
    fn op(&self, lease: &str, wait_ms: u64) -> Op {
        let mode = match self.mode {
            Mode::Exclusive => LockMode::Exclusive,
            Mode::Shared => LockMode::Shared,
        };
        let (lease, wait_ms) = (lease.to_string(), Some(wait_ms));
        match self.names.as_slice() {
            [name] => Op::LockAcquire {
                name: name.clone(),
                lease,
                wait_ms,
                max_hold_ms: None,
                mode,
            },
            names => Op::LockAcquireAll {
                names: names.to_vec(),
                lease,
                wait_ms,
                max_hold_ms: None,
                mode,
            },
        }
    }

    /// Whether a downgrade applies: one lock, exclusive.
    fn downgradable(&self) -> bool {
        self.names.len() == 1 && self.mode == Mode::Exclusive
    }
}

/// One agent of the workload, its requests recorded.
struct RwAgent<'a> {
    ctx: &'a Context,
    plan: &'a Plan,
    agent: Agent,
    id: String,
}

impl RwAgent<'_> {
    /// Sends `op` naming `lease`; records it as `kind` made of its answer.
    async fn send<T, F>(&self, lease: &str, op: Op, kind: F) -> Answer<T>
    where
        T: TryFrom<Success, Error = UnexpectedReply> + Clone,
        F: FnOnce(Answer<T>) -> RwKind,
    {
        let (invoke_us, answered) = ask(self.ctx, &self.agent, &self.id, op).await;
        let complete_us = self.ctx.timeline.now_us();
        record(
            self.ctx,
            &self.id,
            lease,
            (invoke_us, complete_us),
            kind(answered.clone()),
        );
        answered
    }

    /// A new lease, recorded, and its keepalive task; `None` when the grant failed.
    async fn grant(&self) -> Option<KeptLease> {
        let op = Op::LeaseGrant {
            ttl_ms: self.plan.ttl_ms,
            lock_delay_ms: 0,
        };
        let (ctx, id) = (self.ctx.clone(), self.id.clone());
        let report = move |lease: &str, news, at_us| {
            let (kind, invoke_us) = match news {
                News::Granted => (RwKind::Grant, at_us),
                News::KeptAlive => (RwKind::Keepalive, at_us),
                News::Gone => (RwKind::Gone, at_us),
            };
            record(&ctx, &id, lease, (invoke_us, ctx.timeline.now_us()), kind);
        };
        let every = Duration::from_millis(self.plan.ttl_ms / 3);
        KeptLease::grant(self.ctx, &self.agent, &self.id, op, every, Arc::new(report)).await
    }

    /// Ends `lease` by its agent's `lease.revoke`, recorded.
    async fn revoke(&self, lease: KeptLease) {
        lease.stop_keepalives();
        let op = Op::LeaseRevoke {
            lease: lease.id.clone(),
        };
        self.send::<Done, _>(&lease.id, op, |answer| RwKind::Revoke {
            answer: answer.map(|_| ()),
        })
        .await;
    }

    /// Lets `lease` lapse: its keepalives stop, recorded.
    fn lapse(&self, lease: KeptLease) {
        lease.stop_keepalives();
        let now_us = self.ctx.timeline.now_us();
        record(
            self.ctx,
            &self.id,
            &lease.id,
            (now_us, now_us),
            RwKind::Lapse,
        );
    }

    /// `lock.downgrade` of `name` (token `token`), recorded.
    async fn downgrade(&self, lease: &KeptLease, name: &str, token: u64) -> Answer<u64> {
        let op = Op::LockDowngrade {
            name: name.to_string(),
            lease: lease.id.clone(),
        };
        let name = name.to_string();
        self.send::<Granted, _>(&lease.id, op, |answer| RwKind::Downgrade {
            name,
            token,
            answer: answer.map(|granted| granted.token),
        })
        .await
        .map(|granted| granted.token)
    }

    /// `lock.release` of one lock, or `lock.release_all` of several (token `token`), recorded.
    async fn release(&self, lease: &KeptLease, names: &[String], token: u64) -> Answer<()> {
        let lease_id = lease.id.clone();
        let op = match names {
            [name] => Op::LockRelease {
                name: name.clone(),
                lease: lease_id,
            },
            names => Op::LockReleaseAll {
                names: names.to_vec(),
                lease: lease_id,
            },
        };
        let names = names.to_vec();
        self.send::<Done, _>(&lease.id, op, |answer| RwKind::Release {
            names,
            token,
            answer: answer.map(|_| ()),
        })
        .await
        .map(|_| ())
    }

    /// Holds what `asked` got (token `token`) a while, downgrading it 1 in 3 when it can, then
    /// ends it as `ending` says; returns the lease when it goes on.
    async fn hold(
        &self,
        lease: KeptLease,
        asked: &Ask,
        token: u64,
        ending: Ending,
        rng: &mut fastrand::Rng,
    ) -> Option<KeptLease> {
        tokio::time::sleep(Duration::from_millis(rng.u64(20..120))).await;
        if asked.downgradable() && rng.u8(..3) == 0 {
            self.downgrade(&lease, &asked.names[0], token).await;
            tokio::time::sleep(Duration::from_millis(rng.u64(20..120))).await;
        }
        match ending {
            Ending::Release => {}
            Ending::Lapse => {
                self.lapse(lease);
                return None;
            }
            Ending::OwnRevoke => {
                self.revoke(lease).await;
                return None;
            }
        }
        match self.release(&lease, &asked.names, token).await {
            Answer::Ok(()) => Some(lease),
            Answer::Refused(code) if code == NOT_HOLDER => Some(lease),
            // Perhaps still held: the lease must end for the locks to be free again.
            _ => {
                self.revoke(lease).await;
                None
            }
        }
    }
}

/// Records one request of agent `agent` naming `lease`, sent and answered at `times`.
fn record(ctx: &Context, agent: &str, lease: &str, times: (u64, u64), kind: RwKind) {
    let (invoke_us, complete_us) = times;
    let op = RwOp {
        agent: agent.to_string(),
        lease: lease.to_string(),
        invoke_us,
        complete_us,
        kind,
    };
    ctx.recorder.with(|history| history.rw_lock_ops.push(op));
}

/// One agent until the run ends.
pub async fn agent(ctx: Context, plan: Plan, index: usize, seed: u64) {
    let id = format!("{}{AGENT_MARK}{index}", ctx.run);
    let home = index % ctx.brokers.len();
    let mut rng = fastrand::Rng::with_seed(seed ^ (0x7277 << 16) ^ index as u64);
    let into: fn(&mut History) -> &mut Vec<Lost> = |history| &mut history.rw_lock_lost;
    let holder = |agent, id| RwAgent {
        ctx: &ctx,
        plan: &plan,
        agent,
        id,
    };
    kept_lease::take_turns(&ctx, id, home, into, &mut rng, holder).await;
}

impl LeaseHolder for RwAgent<'_> {
    async fn new_lease(&self) -> Option<KeptLease> {
        self.grant().await
    }

    async fn turn(&self, lease: KeptLease, rng: &mut fastrand::Rng) -> Option<KeptLease> {
        let asked = Ask::draw(rng, &self.plan.locks);
        let ending = Ending::draw(rng);
        let op = asked.op(&lease.id, self.ctx.wait_ms);
        let acquired = self
            .send::<Granted, _>(&lease.id, op, |answer| RwKind::Acquire {
                names: asked.names.clone(),
                mode: asked.mode,
                answer: answer.map(|granted| granted.token),
            })
            .await;
        match acquired {
            Answer::Ok(Granted { token }) => self.hold(lease, &asked, token, ending, rng).await,
            Answer::Refused(code) if code == ErrorCode::Timeout.to_string() => Some(lease),
            // Gone, or perhaps granted unseen: a new lease.
            _ => {
                self.revoke(lease).await;
                None
            }
        }
    }

    async fn drop_lease(&self, lease: KeptLease) {
        self.revoke(lease).await;
    }
}

/// Checks the read-write history: every broken rule is an anomaly; the notes count the
/// requests by outcome and say how much the holds overlapped where the rules allow it.
pub fn check(history: &History) -> Verdict {
    let ops = &history.rw_lock_ops;
    let checked = rw_lock::check(ops);
    let mut verdict = Verdict::of(ops.len(), checked.violations);
    let mut counts = Tally::default();
    for op in ops {
        let (what, outcome) = match &op.kind {
            RwKind::Grant => ("lease.grant".into(), "ok".into()),
            RwKind::Keepalive => ("lease.keepalive".into(), "ok".into()),
            RwKind::Lapse => ("lapse".into(), "begun".into()),
            RwKind::Gone => ("lease.keepalive".into(), "lease_not_found".into()),
            RwKind::Acquire {
                names,
                mode,
                answer,
            } => {
                let what = if names.len() == 1 {
                    "lock.acquire"
                } else {
                    "lock.acquire_all"
                };
                (format!("{what} {}", mode.name()), outcome(answer))
            }
            RwKind::Downgrade { answer, .. } => ("lock.downgrade".into(), outcome(answer)),
            RwKind::Release { names, answer, .. } if names.len() == 1 => {
                ("lock.release".into(), outcome(answer))
            }
            RwKind::Release { answer, .. } => ("lock.release_all".into(), outcome(answer)),
            RwKind::Revoke { answer } => ("lease.revoke".into(), outcome(answer)),
        };
        counts.count(&what, &outcome);
    }
    verdict.notes.push(counts.line());
    verdict.notes.push(format!(
        "{} holds checked (a multi-lock once per lock), {} downgraded; {} shared grants while \
         an older shared hold surely lived, {} while a downgraded one did; {} lock.lost",
        checked.holds,
        checked.downgraded,
        checked.shared_beside_shared,
        checked.joined_downgraded,
        history.rw_lock_lost.len()
    ));
    verdict
}
