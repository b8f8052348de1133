//! The faults: what each one does to the cluster, and how it is undone.
//!
//! | fault | inject | undo |
//! |---|---|---|
//! | `kill-leader` | SIGKILL the leader | restart it on its data |
//! | `kill-random` | SIGKILL a random member | restart it |
//! | `kill-majority` | SIGKILL the leader and enough others to lose the majority | restart them |
//! | `pause-leader` | SIGSTOP the leader (its sockets stay open and silent) | SIGCONT |
//! | `pause-client` | SIGSTOP the pausable client right after a grant, before it writes | SIGCONT (by its driver) |
//! | `partition-minority` | cut a random member off from the others | heal |
//! | `partition-leader` | cut the leader off from the others | heal |
//! | `partition-bridge` | two sides that cannot see each other; one member sees both | heal |
//! | `clock-forward` | the leader's wall clock jumps ahead by `clock_jump_s` | back to real time (a backward jump) |
//! | `clock-backward` | the leader's wall clock jumps back by `clock_jump_s` | back to real time |
//! | `clock-skew` | every member's clock off by a different amount (−j, 0, +j, …) | back to real time |
//! | `disk-full` | fill a random follower's disk (it stops, naming the cause) | free it, restart |
//!
//! Clients keep reaching every member throughout: a partition cuts member-to-member links only.

use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum;
use serde::Serialize;
use tokio::sync::mpsc;

use super::client::PauseRequest;
use hivekeeper_local_cluster::Cluster;

/// The fault classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    KillLeader,
    KillRandom,
    KillMajority,
    PauseLeader,
    PauseClient,
    PartitionMinority,
    PartitionLeader,
    PartitionBridge,
    ClockForward,
    ClockBackward,
    ClockSkew,
    DiskFull,
}

impl FaultKind {
    /// Every class, in the order of a schedule.
    pub const ALL: [FaultKind; 12] = [
        FaultKind::KillLeader,
        FaultKind::PauseLeader,
        FaultKind::PauseClient,
        FaultKind::PartitionLeader,
        FaultKind::ClockForward,
        FaultKind::KillRandom,
        FaultKind::PartitionMinority,
        FaultKind::ClockBackward,
        FaultKind::DiskFull,
        FaultKind::PartitionBridge,
        FaultKind::ClockSkew,
        FaultKind::KillMajority,
    ];

    /// Its name on the command line and in the report.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map_or_else(String::new, |value| value.get_name().to_string())
    }

    /// Whether it needs the members in network namespaces or on a tmpfs (root).
    pub fn needs_root(self) -> bool {
        matches!(
            self,
            FaultKind::PartitionMinority
                | FaultKind::PartitionLeader
                | FaultKind::PartitionBridge
                | FaultKind::DiskFull
        )
    }

    /// Whether it needs libfaketime.
    pub fn needs_faketime(self) -> bool {
        matches!(
            self,
            FaultKind::ClockForward | FaultKind::ClockBackward | FaultKind::ClockSkew
        )
    }
}

/// How an injected fault is undone.
#[derive(Debug)]
pub enum Undo {
    /// Start these members again.
    Restart(Vec<usize>),
    /// SIGCONT this member.
    Continue(usize),
    /// Remove every cut.
    Heal,
    /// Put these members' clocks back to real time.
    ClockReset(Vec<usize>),
    /// Remove the filler, and restart the member if it stopped.
    FreeDisk(usize),
    /// The pausable client's driver continues it by itself.
    Nothing,
}

/// A fault in place.
#[derive(Debug)]
pub struct Injected {
    /// Which members it hit, by name, and how.
    pub target: String,
    /// The members whose clients are expected to suffer (killed, paused, cut off, full).
    pub hit: Vec<usize>,
    /// How to undo it.
    pub undo: Undo,
}

/// What injecting needs besides the cluster.
pub struct Tools<'a> {
    /// Random choices, seeded by `--seed`.
    pub rng: &'a mut fastrand::Rng,
    /// The pausable client's driver.
    pub pause_client: &'a mpsc::Sender<PauseRequest>,
    /// How long a fault lasts.
    pub hold: Duration,
    /// The clock faults' jump.
    pub clock_jump_s: i64,
}

/// Injects `kind`.
pub async fn inject(
    kind: FaultKind,
    cluster: &mut Cluster,
    tools: Tools<'_>,
) -> anyhow::Result<Injected> {
    let leader = cluster.leader(Duration::from_secs(30)).await?;
    Ok(match kind {
        FaultKind::KillLeader | FaultKind::KillRandom | FaultKind::KillMajority => {
            kill(kind, cluster, leader, tools.rng)
        }
        FaultKind::PauseLeader => {
            cluster.members[leader].signal("STOP")?;
            Injected {
                target: name(cluster, leader),
                hit: vec![leader],
                undo: Undo::Continue(leader),
            }
        }
        FaultKind::PauseClient => pause_client(tools.pause_client, tools.hold).await?,
        FaultKind::PartitionMinority | FaultKind::PartitionLeader | FaultKind::PartitionBridge => {
            partition(kind, cluster, leader, tools.rng)?
        }
        FaultKind::ClockForward | FaultKind::ClockBackward | FaultKind::ClockSkew => {
            shift_clocks(kind, cluster, leader, tools.clock_jump_s)?
        }
        FaultKind::DiskFull => {
            let victim = random_other(tools.rng, cluster.members.len(), leader);
            let bytes = cluster.fill_disk(victim)?;
            Injected {
                target: format!("{} ({} MiB filler)", name(cluster, victim), bytes >> 20),
                hit: vec![victim],
                undo: Undo::FreeDisk(victim),
            }
        }
    })
}

/// `kill-leader`, `kill-random`, `kill-majority`: SIGKILLs the victims; undone by restarting
/// them on their data.
fn kill(
    kind: FaultKind,
    cluster: &mut Cluster,
    leader: usize,
    rng: &mut fastrand::Rng,
) -> Injected {
    let size = cluster.members.len();
    let victims = match kind {
        FaultKind::KillLeader => vec![leader],
        FaultKind::KillRandom => vec![rng.usize(..size)],
        _ => {
            let mut victims = vec![leader];
            while victims.len() < size / 2 + 1 {
                let next = random_other(rng, size, leader);
                if !victims.contains(&next) {
                    victims.push(next);
                }
            }
            victims
        }
    };
    for &victim in &victims {
        cluster.members[victim].kill();
    }
    Injected {
        target: names(cluster, &victims),
        hit: victims.clone(),
        undo: Undo::Restart(victims),
    }
}

/// `pause-client`: asks the pausable client's driver to stop it at its next grant, before it
/// writes, for `hold`; the driver continues it by itself.
async fn pause_client(
    driver: &mpsc::Sender<PauseRequest>,
    hold: Duration,
) -> anyhow::Result<Injected> {
    let (paused, stopped) = tokio::sync::oneshot::channel();
    driver
        .send(PauseRequest {
            pause: hold,
            paused,
        })
        .await
        .context("the pausable client is gone")?;
    // Stopped at its next grant; the hold time counts from there.
    let at_us = tokio::time::timeout(Duration::from_secs(30), stopped)
        .await
        .context("the pausable client got no grant within 30 s")?
        .context("the pausable client is gone")?;
    Ok(Injected {
        target: format!("client (stopped at {} ms)", at_us / 1_000),
        hit: Vec::new(),
        undo: Undo::Nothing,
    })
}

/// `partition-minority`, `partition-leader`, `partition-bridge`: cuts member-to-member links;
/// undone by healing every cut.
fn partition(
    kind: FaultKind,
    cluster: &mut Cluster,
    leader: usize,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<Injected> {
    let size = cluster.members.len();
    if kind == FaultKind::PartitionBridge {
        // The bridge sees both sides; the sides are the others, split in two.
        let bridge = random_other(rng, size, leader);
        let others: Vec<usize> = (0..size).filter(|&i| i != bridge).collect();
        let (a, b) = others.split_at(others.len() / 2);
        cluster.cut(a, b)?;
        return Ok(Injected {
            target: format!(
                "{} | {} (bridge {})",
                names(cluster, a),
                names(cluster, b),
                name(cluster, bridge)
            ),
            // Either side may be the one without the leader.
            hit: others,
            undo: Undo::Heal,
        });
    }
    let isolated = if kind == FaultKind::PartitionLeader {
        leader
    } else {
        rng.usize(..size)
    };
    let rest: Vec<usize> = (0..size).filter(|&i| i != isolated).collect();
    cluster.cut(&[isolated], &rest)?;
    Ok(Injected {
        target: format!("{} | {}", name(cluster, isolated), names(cluster, &rest)),
        hit: vec![isolated],
        undo: Undo::Heal,
    })
}

/// `clock-forward`, `clock-backward` (the leader's clock), `clock-skew` (every member's, each
/// by a different multiple of the jump); undone by putting the clocks back to real time.
fn shift_clocks(
    kind: FaultKind,
    cluster: &mut Cluster,
    leader: usize,
    clock_jump_s: i64,
) -> anyhow::Result<Injected> {
    if kind == FaultKind::ClockSkew {
        let size = cluster.members.len();
        let mut described = Vec::new();
        for i in 0..size {
            let offset = (i as i64 - (size as i64 / 2)) * clock_jump_s;
            cluster.set_clock_offset(i, offset)?;
            described.push(format!("{} {offset:+} s", name(cluster, i)));
        }
        return Ok(Injected {
            target: described.join(", "),
            hit: Vec::new(),
            undo: Undo::ClockReset((0..size).collect()),
        });
    }
    let jump = if kind == FaultKind::ClockForward {
        clock_jump_s
    } else {
        -clock_jump_s
    };
    cluster.set_clock_offset(leader, jump)?;
    Ok(Injected {
        target: format!("{} {jump:+} s", name(cluster, leader)),
        hit: Vec::new(),
        undo: Undo::ClockReset(vec![leader]),
    })
}

/// A random member other than `not`, out of `size`.
fn random_other(rng: &mut fastrand::Rng, size: usize, not: usize) -> usize {
    (not + 1 + rng.usize(..size - 1)) % size
}

/// Member `i`'s name.
fn name(cluster: &Cluster, i: usize) -> String {
    cluster.members[i].name.clone()
}

/// Undoes a fault.
pub fn undo(undo: &Undo, cluster: &mut Cluster) -> anyhow::Result<()> {
    match undo {
        Undo::Restart(members) => {
            for &member in members {
                cluster.members[member].spawn()?;
            }
        }
        Undo::Continue(member) => cluster.members[*member].signal("CONT")?,
        Undo::Heal => cluster.heal()?,
        Undo::ClockReset(members) => {
            for &member in members {
                cluster.set_clock_offset(member, 0)?;
            }
        }
        Undo::FreeDisk(member) => {
            cluster.free_disk(*member)?;
            if cluster.members[*member].exited().is_some() {
                cluster.members[*member].spawn()?;
            }
        }
        Undo::Nothing => {}
    }
    Ok(())
}

fn names(cluster: &Cluster, members: &[usize]) -> String {
    members
        .iter()
        .map(|&i| cluster.members[i].name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}
