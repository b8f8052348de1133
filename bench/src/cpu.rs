//! CPU per entry: what a committed log entry costs the members of the scenario's own cluster
//! (`uncontended --members N`, `contended --members N`), serving their agents included.
//!
//! ```text
//!  agents connected ─▶ CpuSample::take (each member's utime + stime, the leader's last log
//!  index, the bench's own CPU) ─▶ the measured phase ─▶ CpuSample::take ─▶ CpuFigures
//! ```
//!
//! Each member's CPU time is its whole process's, from `/proc/<pid>/stat`; the entries are
//! how far the leader's `hivekeeper_raft_last_log_index` moved over the phase (an entry may
//! carry many commands: the proposer batches them). The bench's own CPU is reported beside,
//! since it shares the machine's cores with the members.

use serde::Serialize;

use super::kv_cluster::KvCluster;

/// The unit of the times in `/proc/<pid>/stat`: the kernel's clock ticks per second
/// (`USER_HZ`, `sysconf(_SC_CLK_TCK)`).
fn ticks_per_s() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// Process `pid`'s CPU time so far (user + system), in ticks; `None` if it is gone.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    // Fields 3 on: utime and stime are the 14th and 15th of the whole line.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// One look at the cluster and the bench.
#[derive(Debug, Clone)]
pub struct CpuSample {
    /// Each member's CPU ticks, n1 first.
    members: Vec<Option<u64>>,
    /// The bench process's own.
    bench: Option<u64>,
    /// The leader's last log index.
    last_index: Option<u64>,
}

impl CpuSample {
    /// Reads every member's and the bench's CPU time and the leader's last log index.
    pub async fn take(cluster: &KvCluster) -> CpuSample {
        let members = (0..cluster.size())
            .map(|index| {
                let pid = cluster.pid(index)?;
                cpu_ticks(&pid.to_string())
            })
            .collect();
        CpuSample {
            members,
            bench: cpu_ticks("self"),
            last_index: cluster
                .gauge(cluster.leader(), "hivekeeper_raft_last_log_index")
                .await,
        }
    }
}

/// One member's share.
#[derive(Debug, Clone, Serialize)]
pub struct MemberCpu {
    /// `n1`, ...
    pub member: String,
    /// Its role when the cluster started: `leader` or `follower`.
    pub role: String,
    /// CPU time (user + system) over the phase, µs (`None`: its /proc entry could not be
    /// read).
    pub cpu_us: Option<u64>,
    /// `cpu_us` per entry.
    pub us_per_entry: Option<f64>,
}

/// CPU per entry over the measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct CpuFigures {
    /// Entries the leader's log grew by.
    pub entries: u64,
    /// Each member's CPU, n1 first.
    pub members: Vec<MemberCpu>,
    /// The members' CPU per entry, summed, µs: the figure the CPU target is set on.
    pub cluster_us_per_entry: Option<f64>,
    /// The bench process's own CPU time over the phase, µs.
    pub bench_cpu_us: Option<u64>,
    /// `bench_cpu_us` per entry (its agents, on the same cores).
    pub bench_us_per_entry: Option<f64>,
}

impl CpuFigures {
    /// The figures between two samples of `cluster`.
    pub fn between(cluster: &KvCluster, before: &CpuSample, after: &CpuSample) -> CpuFigures {
        let entries = after
            .last_index
            .zip(before.last_index)
            .map_or(0, |(after, before)| after.saturating_sub(before));
        let hz = ticks_per_s();
        let us = |before: Option<u64>, after: Option<u64>| {
            let ticks = after?.checked_sub(before?)?;
            Some(ticks * 1_000_000 / hz)
        };
        let per_entry = |cpu_us: Option<u64>| {
            cpu_us
                .filter(|_| entries > 0)
                .map(|us| us as f64 / entries as f64)
        };
        let members: Vec<MemberCpu> = cluster
            .member_roles()
            .into_iter()
            .enumerate()
            .map(|(index, (member, role))| {
                let cpu_us = us(before.members[index], after.members[index]);
                MemberCpu {
                    member,
                    role,
                    cpu_us,
                    us_per_entry: per_entry(cpu_us),
                }
            })
            .collect();
        let cluster_us_per_entry = members
            .iter()
            .map(|member| member.us_per_entry)
            .sum::<Option<f64>>();
        let bench_cpu_us = us(before.bench, after.bench);
        CpuFigures {
            entries,
            cluster_us_per_entry,
            bench_cpu_us,
            bench_us_per_entry: per_entry(bench_cpu_us),
            members,
        }
    }

    /// The rows of the table.
    pub fn rows(&self) -> Vec<(String, String)> {
        let us = |value: Option<f64>| value.map_or("?".into(), |us| format!("{us:.0} µs"));
        let each = self
            .members
            .iter()
            .map(|member| {
                let cpu_ms = member
                    .cpu_us
                    .map_or("?".into(), |us| format!("{} ms", us / 1_000));
                format!(
                    "{} ({}) {} ({cpu_ms})",
                    member.member,
                    member.role,
                    us(member.us_per_entry)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        vec![
            (
                "cpu per entry".into(),
                format!(
                    "{} summed over {} entries: {each}",
                    us(self.cluster_us_per_entry),
                    self.entries
                ),
            ),
            ("bench cpu per entry".into(), us(self.bench_us_per_entry)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::cpu_ticks;

    #[test]
    fn the_bench_reads_its_own_cpu_time() {
        let spin = std::time::Instant::now();
        let mut x = 0_u64;
        while spin.elapsed() < std::time::Duration::from_millis(30) {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        assert!(cpu_ticks("self").is_some_and(|ticks| ticks > 0));
        assert_eq!(cpu_ticks("0"), None, "no process 0 in /proc");
    }
}
