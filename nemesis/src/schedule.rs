//! The fault schedule: every planned class in turn (quiet, inject, hold, undo), then the wait
//! for the cluster to recover, each fault recorded ([`FaultRecord`]) with what it hit and when;
//! the run turns each record into its availability window and, for the clock faults, a span the
//! hold-time check excuses.

use std::time::Duration;

use hivekeeper_checker::hold_time::ClockFault;
use hivekeeper_local_cluster::Cluster;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::faults::{self, FaultKind, Tools};
use crate::history::{History, Timeline};
use crate::run::Window;
use crate::{availability, client};

/// When faults are injected: which classes in turn, until when, and how long each part of a
/// cycle (quiet, then the fault held) lasts.
pub struct Schedule<'a> {
    /// The classes, cycled through in order.
    pub kinds: &'a [FaultKind],
    /// No fault starts whose cycle would end after this.
    pub until: Instant,
    /// Quiet time before each fault.
    pub quiet: Duration,
    /// How long each fault is held before it is undone.
    pub hold: Duration,
    /// The clock faults' jump, seconds.
    pub clock_jump_s: i64,
}

/// One fault as the schedule ran it: what it hit and when, µs into the run.
pub struct FaultRecord {
    /// The fault class.
    kind: FaultKind,
    /// What it hit.
    injected: faults::Injected,
    /// When it was injected.
    inject_us: u64,
    /// When it was undone.
    undo_us: u64,
    /// When the cluster had recovered (or gave up recovering).
    recovered_us: u64,
    /// Members that exited by themselves meanwhile.
    exited: Vec<String>,
}

impl FaultRecord {
    /// The span in which this fault may have moved the service's clock, if it is a clock
    /// fault: from its injection until a second after the cluster recovered from it (the
    /// clocks were put back at the undo; the first entry stamped after it comes within
    /// milliseconds, with the probes writing every 100 ms).
    pub fn clock_fault(&self) -> Option<ClockFault> {
        self.kind.needs_faketime().then_some(ClockFault {
            from_us: self.inject_us,
            to_us: self.recovered_us + 1_000_000,
        })
    }

    /// What the clients saw around this fault, from the run's history.
    pub fn window(
        self,
        history: &History,
        end_us: u64,
        members: usize,
        paused_lock: &str,
    ) -> Window {
        availability::window(
            history,
            availability::Span {
                fault: self.kind,
                target: self.injected.target,
                hit: self.injected.hit,
                inject_us: self.inject_us,
                undo_us: self.undo_us,
                recovered_us: self.recovered_us,
                end_us,
                exited: self.exited,
                members,
                paused_lock,
            },
        )
    }
}

/// Cycles through the fault classes until the schedule ends: quiet, inject, hold, undo, wait
/// for the cluster to recover. A fault that cannot be injected, undone or recovered from is
/// an error of the run, and the schedule goes on with the next.
pub async fn inject_on_schedule(
    schedule: &Schedule<'_>,
    cluster: &mut Cluster,
    rng: &mut fastrand::Rng,
    pause_client: &mpsc::Sender<client::PauseRequest>,
    timeline: Timeline,
    errors: &mut Vec<String>,
) -> Vec<FaultRecord> {
    let mut records = Vec::new();
    let fault_time = schedule.quiet + schedule.hold;
    let mut next = 0;
    while Instant::now() + fault_time < schedule.until && !schedule.kinds.is_empty() {
        let kind = schedule.kinds[next % schedule.kinds.len()];
        next += 1;
        tokio::time::sleep(schedule.quiet).await;
        let inject_us = timeline.now_us();
        let tools = Tools {
            rng: &mut *rng,
            pause_client,
            hold: schedule.hold,
            clock_jump_s: schedule.clock_jump_s,
        };
        let injected = match faults::inject(kind, cluster, tools).await {
            Ok(injected) => injected,
            Err(error) => {
                errors.push(format!("injecting {}: {error:#}", kind.name()));
                continue;
            }
        };
        // A pause-client counts its hold from the stop; the others from now.
        tokio::time::sleep(schedule.hold).await;
        let undo_us = timeline.now_us();
        if let Err(error) = faults::undo(&injected.undo, cluster) {
            errors.push(format!("undoing {}: {error:#}", kind.name()));
        }
        let mut exited = Vec::new();
        let recovered_us = match recover(cluster, kind, &mut exited, errors).await {
            Ok(()) => timeline.now_us(),
            Err(error) => {
                errors.push(format!("after {}: {error:#}", kind.name()));
                timeline.now_us()
            }
        };
        records.push(FaultRecord {
            kind,
            injected,
            inject_us,
            undo_us,
            recovered_us,
            exited,
        });
    }
    records
}

/// Waits until every member answers and one leads, at most 30 s. A member that exited by
/// itself is noted and started again (an error, but for `disk-full`, whose member stops at its
/// next write, which may come only after the disk was freed).
async fn recover(
    cluster: &mut Cluster,
    kind: FaultKind,
    exited: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for member in &mut cluster.members {
            if let Some(status) = member.exited() {
                exited.push(format!("{}: {status}", member.name));
                if kind != FaultKind::DiskFull {
                    errors.push(format!(
                        "member {} exited during {} ({status}); its log: {}",
                        member.name,
                        kind.name(),
                        member.log().display()
                    ));
                }
                member.spawn()?;
            }
        }
        let mut up = true;
        for member in &cluster.members {
            up &= hivekeeper_local_cluster::scrape(member.metrics)
                .await
                .is_some();
        }
        if up && cluster.leader_now().await.is_some() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the cluster had no leader with every member up within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
