//! What a scenario reports: one [`Report`], printed as a table or as JSON (`--json`).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::history::{Exclusion, Fairness};

/// Percentiles of one latency, in milliseconds, from an hdrhistogram of microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

impl Latency {
    /// Summarizes samples in microseconds. The histogram covers 1 µs to one hour at 3
    /// significant figures (0.1% resolution); a longer sample is recorded as one hour.
    pub fn from_micros(samples: &[u64]) -> Latency {
        let mut histogram =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
        for &sample in samples {
            histogram.saturating_record(sample.max(1));
        }
        if histogram.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| us as f64 / 1_000.0;
        Latency {
            count: histogram.len(),
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p90_ms: ms(histogram.value_at_quantile(0.90)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            max_ms: ms(histogram.max()),
        }
    }
}

/// Errors by kind (the SDK error's text up to its first colon), with a sample of each.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Errors {
    /// All errors.
    pub total: u64,
    /// Count per kind.
    pub by_kind: BTreeMap<String, u64>,
    /// The first message of each kind.
    pub samples: BTreeMap<String, String>,
}

impl Errors {
    /// Counts one error.
    pub fn add(&mut self, message: String) {
        let kind = message
            .split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        self.total += 1;
        *self.by_kind.entry(kind.clone()).or_default() += 1;
        self.samples.entry(kind).or_insert(message);
    }

    /// Adds another set of counts.
    pub fn merge(&mut self, other: Errors) {
        self.total += other.total;
        for (kind, count) in other.by_kind {
            *self.by_kind.entry(kind).or_default() += count;
        }
        for (kind, sample) in other.samples {
            self.samples.entry(kind).or_insert(sample);
        }
    }
}

/// Everything a scenario measured. Fields a scenario does not measure are `None` and left out
/// of the JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// `uncontended`, `contended`, ...
    pub scenario: String,
    /// The scenario's parameters, as given (agents, locks, limit, ttl_ms, ...).
    pub parameters: BTreeMap<String, serde_json::Value>,
    /// Length of the measured phase (after every agent connected), seconds.
    pub elapsed_s: f64,
    /// Completed cycles (acquire → release) in the measured phase.
    pub cycles: u64,
    /// Cycles per second.
    pub ops_per_s: f64,
    /// From sending an acquire to its grant.
    pub acquire: Latency,
    /// From a holder's release start to the grant of the agent that was waiting for it.
    pub handover: Latency,
    /// Grants per agent.
    pub fairness: Fairness,
    /// Failed requests.
    pub errors: Errors,
    /// The mutual-exclusion check over every grant.
    pub mutual_exclusion: Exclusion,
    /// `reclaim`: from the holder's last keepalive (its send time) to the waiter's grant, one
    /// entry per TTL.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reclaim: Vec<ReclaimFigures>,
    /// `scale`: the idle swarm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<ScaleFigures>,
    /// `failover`: the gaps after each leader kill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover: Option<super::failover::FailoverFigures>,
    /// `uncontended --flood`: what the flooding agent sent and was answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flood: Option<super::flood::FloodFigures>,
    /// `kv-put`, `watch`, `kv-fill`: the puts, their commit latency, the watch figures and the
    /// members' memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvFigures>,
    /// `election`: the candidates and handovers a second (the handover latency is `handover`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub election: Option<super::election::ElectionFigures>,
    /// `barrier`: each round's release and leave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier: Option<super::barrier::BarrierFigures>,
    /// `rwlock`: the exclusive baseline, the shared rate and its ratio to it, the writer's
    /// wait (the readers' figures are the report's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rwlock: Option<super::rwlock::RwLockFigures>,
    /// `uncontended`/`contended --members N`: what an entry cost the members' CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<super::cpu::CpuFigures>,
}

/// What the key scenarios (`kv-put`, `watch`, `kv-fill`) measured on their own cluster.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KvFigures {
    /// Members of the cluster the scenario started.
    pub members: usize,
    /// Keys written and committed: one per `kv.put`, and every put of a committed `kv.txn`
    /// (`kv-fill`).
    pub puts: u64,
    /// `puts` per second of the measured phase.
    pub puts_per_s: f64,
    /// From sending a write (a `kv.put`, or one `kv.txn` batch of `kv-fill`) to its answer:
    /// the commit latency, as a client sees it.
    pub commit: Latency,
    /// Writes the SDK sent again under the same id (after its 2 s request timeout or a lost
    /// link): a commit latency above that timeout includes one.
    pub resends: u64,
    /// `watch`: from sending a put (to the leader) to the watcher's receiving its event
    /// (through a follower).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<Latency>,
    /// `watch --watchers N`: N pending polls on one member and one put.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOutFigures>,
    /// Each member's resident memory at the end of the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub member_rss: Vec<MemberRss>,
}

/// `watch --watchers N`: many pending polls on one member, then one put.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FanOutFigures {
    /// The member the watchers are connected to (a follower).
    pub member: String,
    /// Watchers asked for: one pending poll each, `polls_per_agent` of them to an agent (one
    /// MQTT connection).
    pub watchers: u64,
    /// Watchers whose agent connected.
    pub connected: u64,
    /// The member's `hivekeeper_watch_polls_pending` when the put was sent. Above `connected`
    /// when some poll was sent again (a resend, a reconnect) while its first copy still waited.
    pub polls_pending: u64,
    /// Polls the watchers' SDKs sent again under the same id, from connecting to the end.
    pub watcher_resends: u64,
    /// Time to connect every watcher and see every poll pending, seconds.
    pub setup_s: f64,
    /// From sending the one put to each watcher's receiving its event.
    pub event: Latency,
    /// Watchers that got the event within the wait.
    pub received: u64,
    /// The member's resident memory before the watchers connected, MB.
    pub rss_mb_before: Option<f64>,
    /// The member's resident memory with every poll pending, MB.
    pub rss_mb_pending: Option<f64>,
}

/// One member's resident memory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemberRss {
    /// `n1`, `n2`, ...
    pub member: String,
    /// `leader` or `follower`, when the run measured it.
    pub role: String,
    /// VmRSS from /proc/<pid>/status, MB; `None` when it could not be read.
    pub rss_mb: Option<f64>,
}

/// Reclaim times at one TTL.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReclaimFigures {
    /// The holder's lease TTL.
    pub ttl_ms: u64,
    /// Each round's time from the send of the holder's last acknowledged keepalive to the
    /// waiter's grant, ms.
    pub reclaim_ms: Vec<f64>,
    /// The worst round minus the TTL: what the service added to the TTL, ms.
    pub over_ttl_ms_max: f64,
}

/// The idle swarm of `scale`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScaleFigures {
    /// Idle agents asked for.
    pub idle_agents: u64,
    /// Idle agents that connected and got a lease.
    pub idle_connected: u64,
    /// Time to connect them all, seconds.
    pub connect_s: f64,
    /// Idle sessions that stayed live through the measured phase (no keepalive missed its
    /// deadline).
    pub sessions_live: u64,
    /// Idle sessions that went into jeopardy or expired.
    pub sessions_lost: u64,
    /// The node's resident memory at the end, MB (from /proc/<pid>/status), if known; with
    /// several `--node-pid`, the largest.
    pub node_rss_mb: Option<f64>,
    /// The node's peak resident memory, MB; with several, the largest.
    pub node_rss_peak_mb: Option<f64>,
    /// Each node's memory, when several `--node-pid` were given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeMemory>,
    /// The bench's own peak resident memory, MB.
    pub bench_rss_peak_mb: Option<f64>,
    /// Processes holding the idle agents (`--processes`; 1: the bench itself).
    pub processes: u64,
    /// With `--processes` above 1: the largest peak resident memory of those processes, MB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_processes_rss_peak_mb: Option<f64>,
}

/// One node's memory at the end of `scale`, from /proc/<pid>/status.
#[derive(Debug, Clone, Serialize)]
pub struct NodeMemory {
    pub pid: u32,
    pub rss_mb: Option<f64>,
    pub rss_peak_mb: Option<f64>,
}

impl Report {
    /// The report of a key scenario: its figures, the puts as the report's operations, and
    /// the mutual-exclusion check over no grant (the scenario acquires nothing).
    pub fn of_kv(elapsed_s: f64, errors: Errors, kv: KvFigures) -> Report {
        Report {
            elapsed_s,
            cycles: kv.puts,
            ops_per_s: kv.puts_per_s,
            errors,
            mutual_exclusion: super::history::check_exclusion(&[], 1),
            kv: Some(kv),
            ..Report::default()
        }
    }

    /// Whether the run is acceptable: no mutual-exclusion violation.
    pub fn passed(&self) -> bool {
        self.mutual_exclusion.ok
    }

    /// Prints the report as a table.
    pub fn print_table(&self) {
        let parameters: Vec<String> = self
            .parameters
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        println!("scenario {} ({})", self.scenario, parameters.join(" "));
        // The key scenarios and `barrier` do no acquire: their own rows say what they did.
        let mut rows = match (&self.kv, &self.barrier) {
            (Some(kv), _) => kv.rows(self.elapsed_s, self.errors.total),
            (None, Some(barrier)) => barrier.rows(self.elapsed_s, self.errors.total),
            (None, None) => self.cycle_rows(),
        };
        if let Some(election) = &self.election {
            rows.extend(election.rows());
        }
        if let Some(rwlock) = &self.rwlock {
            rows.extend(rwlock.rows());
        }
        if let Some(cpu) = &self.cpu {
            rows.extend(cpu.rows());
        }
        for reclaim in &self.reclaim {
            rows.push(reclaim.row());
        }
        if let Some(scale) = &self.scale {
            rows.extend(scale.rows());
        }
        if let Some(failover) = &self.failover {
            rows.extend(failover_rows(failover));
        }
        if let Some(flood) = &self.flood {
            rows.extend(flood_rows(flood));
        }
        for (what, value) in rows {
            println!("  {what:<24} {value}");
        }
        for (kind, count) in &self.errors.by_kind {
            let sample = self.errors.samples.get(kind).cloned().unwrap_or_default();
            println!("  error x{count}: {sample}");
        }
        for sample in &self.mutual_exclusion.samples {
            println!("  violation: {sample}");
        }
    }

    /// The table's rows every scenario has: the cycles, their latencies and fairness, the
    /// errors and the mutual-exclusion check.
    fn cycle_rows(&self) -> Vec<(String, String)> {
        let mut rows = vec![
            ("elapsed".to_string(), format!("{:.2} s", self.elapsed_s)),
            ("cycles".into(), self.cycles.to_string()),
            ("ops/s".into(), format!("{:.0}", self.ops_per_s)),
        ];
        // Rows a scenario did not measure (no samples) are left out rather than shown as 0.
        if self.acquire.count > 0 {
            rows.push(("acquire".into(), self.acquire.row()));
        }
        if self.handover.count > 0 {
            rows.push(("handover".into(), self.handover.row()));
        }
        if self.fairness.grants_max > 0 {
            rows.push((
                "fairness".into(),
                format!(
                    "Jain {:.4}, grants per agent min {} max {}",
                    self.fairness.jain_index, self.fairness.grants_min, self.fairness.grants_max
                ),
            ));
        }
        rows.push(("errors".into(), self.errors.total.to_string()));
        rows.push((
            "mutual exclusion".into(),
            format!(
                "{} ({} grants checked, {} violations)",
                if self.mutual_exclusion.ok {
                    "ok"
                } else {
                    "VIOLATED"
                },
                self.mutual_exclusion.grants_checked,
                self.mutual_exclusion.violations
            ),
        ));
        rows
    }
}

impl ReclaimFigures {
    /// This TTL's row of the table: every round's reclaim time and the worst over the TTL.
    fn row(&self) -> (String, String) {
        (
            format!("reclaim, TTL {} ms", self.ttl_ms),
            format!(
                "{} ms (worst TTL + {:.0} ms)",
                whole_ms(&self.reclaim_ms),
                self.over_ttl_ms_max
            ),
        )
    }
}

impl ScaleFigures {
    /// The idle swarm's rows of the table: how it connected and stayed live, and memory.
    fn rows(&self) -> Vec<(String, String)> {
        let mb = |value: Option<f64>| value.map_or("unknown".into(), |v| format!("{v:.0} MB"));
        let mut rows = vec![(
            "idle agents".into(),
            format!(
                "{} of {} connected in {:.1} s over {} process(es); sessions live {}, lost {}",
                self.idle_connected,
                self.idle_agents,
                self.connect_s,
                self.processes,
                self.sessions_live,
                self.sessions_lost
            ),
        )];
        if self.nodes.is_empty() {
            rows.push((
                "node RSS".into(),
                format!(
                    "{} (peak {})",
                    mb(self.node_rss_mb),
                    mb(self.node_rss_peak_mb)
                ),
            ));
        }
        for node in &self.nodes {
            rows.push((
                format!("node {} RSS", node.pid),
                format!("{} (peak {})", mb(node.rss_mb), mb(node.rss_peak_mb)),
            ));
        }
        rows.push(("bench RSS peak".into(), mb(self.bench_rss_peak_mb)));
        if let Some(peak) = self.idle_processes_rss_peak_mb {
            rows.push(("idle processes' RSS peak".into(), mb(Some(peak))));
        }
        rows
    }
}

impl Latency {
    /// The latency as a row of the table.
    pub fn row(&self) -> String {
        format!(
            "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={})",
            self.p50_ms, self.p90_ms, self.p99_ms, self.max_ms, self.count
        )
    }
}

impl KvFigures {
    /// The key scenarios' rows of the table: the puts, their commit latency, the events and
    /// the memory.
    fn rows(&self, elapsed_s: f64, errors: u64) -> Vec<(String, String)> {
        let mb = |value: Option<f64>| value.map_or("unknown".into(), |v| format!("{v:.0} MB"));
        let mut rows = vec![
            ("elapsed".to_string(), format!("{elapsed_s:.2} s")),
            ("members".into(), self.members.to_string()),
            ("puts".into(), self.puts.to_string()),
            ("puts/s".into(), format!("{:.0}", self.puts_per_s)),
        ];
        if self.commit.count > 0 {
            rows.push(("commit".into(), self.commit.row()));
        }
        rows.push(("SDK resends".into(), self.resends.to_string()));
        if let Some(event) = &self.event {
            rows.push(("put → event".into(), event.row()));
        }
        if let Some(fan_out) = &self.fan_out {
            rows.push((
                "fan-out watchers".into(),
                format!(
                    "{} of {} connected to {}, {} polls pending ({} resent), set up in {:.1} s",
                    fan_out.connected,
                    fan_out.watchers,
                    fan_out.member,
                    fan_out.polls_pending,
                    fan_out.watcher_resends,
                    fan_out.setup_s
                ),
            ));
            rows.push((
                "fan-out put → events".into(),
                format!("{} ({} received)", fan_out.event.row(), fan_out.received),
            ));
            rows.push((
                format!("{} RSS", fan_out.member),
                format!(
                    "{} before the watchers, {} with every poll pending",
                    mb(fan_out.rss_mb_before),
                    mb(fan_out.rss_mb_pending)
                ),
            ));
        }
        for member in &self.member_rss {
            rows.push((
                format!("{} RSS ({})", member.member, member.role),
                mb(member.rss_mb),
            ));
        }
        rows.push(("errors".into(), errors.to_string()));
        rows
    }
}

/// Times in ms, rounded to whole ms, comma-separated.
fn whole_ms(values: &[f64]) -> String {
    let rounded: Vec<String> = values.iter().map(|ms| format!("{ms:.0}")).collect();
    rounded.join(", ")
}

/// `failover`'s rows of the table: the gaps after each fault and the longest hole.
fn failover_rows(failover: &super::failover::FailoverFigures) -> [(String, String); 2] {
    [
        (
            format!("failover gaps ({} members)", failover.members),
            format!(
                "median {:.0} ms, max {:.0} ms: {} ms",
                failover.gap_ms_median,
                failover.gap_ms_max,
                whole_ms(&failover.gap_ms)
            ),
        ),
        (
            "longest with no grant".into(),
            format!(
                "{:.0} ms, beginning {}",
                failover.longest_no_grant_ms, failover.longest_no_grant_began
            ),
        ),
    ]
}

/// `--flood`'s rows of the table: what the flooding agent sent, how it was answered, and the
/// swarm's sessions lost meanwhile.
fn flood_rows(flood: &super::flood::FloodFigures) -> [(String, String); 2] {
    let answered: Vec<String> = flood
        .answered
        .iter()
        .map(|(code, count)| format!("{code} {count}"))
        .collect();
    [
        (
            "flood".into(),
            format!(
                "{} sent ({:.0}/s), answered: {}",
                flood.sent,
                flood.sent_per_s,
                answered.join(", ")
            ),
        ),
        (
            "sessions lost".into(),
            format!("{} (of the swarm, during the flood)", flood.sessions_lost),
        ),
    ]
}
