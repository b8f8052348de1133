//! Durable append, redb against the segment log, the way the hot lock writes: batches of one or
//! two entries of about 200 bytes, each batch durable (fsynced) before the next starts.
//!
//! ```sh
//! cargo run --release -p hivekeeper-segment-log --example durable_append -- \
//!     [--rounds 6] [--batches 2000] [--dir /var/tmp/durable-append] \
//!     [--only redb|segment-log|bare-fdatasync]
//! ```
//!
//! - **redb**: the node's layout (`coordinator/src/raft/database.rs`): a `log` table keyed by
//!   index and a `meta` table, one write transaction per batch with `Durability::Immediate`,
//!   inserting the batch's rows and the committed log id (the node's writer writes it with every
//!   transaction while commits advance), exactly as `writer.rs` commits.
//! - **segment-log**: `SegmentLog::append` of the same rows, 64 MiB segments.
//! - **bare-fdatasync**: the floor: the same bytes written over one already-written page of a
//!   file, then fdatasync (no framing, no index, nothing else).
//!
//! Each round runs every mode, the order rotating from round to round, each on a fresh directory (after 200 unmeasured
//! batches), so a noisy neighbour on the machine hits both alike. Per mode and round it prints
//! the median, p90 and p99 latency of one durable batch, and per batch the write system calls,
//! bytes passed to them, and bytes sent to the block layer (`syscw`, `wchar`, `write_bytes` of
//! `/proc/self/io`). fdatasync counts need strace: run one mode under
//! `strace -f -c -e trace=pwrite64,write,fdatasync,fsync` (docs/BENCHMARKS.md).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hivekeeper_segment_log::{SegmentLog, SegmentLogConfig};
use redb::{Database, Durability, ReadableDatabase, TableDefinition};

/// The node's log table: entries by index.
const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
/// The node's meta table: vote, committed id, purge point.
const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");

/// Batches run before measuring, on each fresh store.
const WARMUP_BATCHES: u64 = 200;

/// A log entry about the size of a hot-lock release: openraft's JSON for one command.
fn entry(index: u64) -> Vec<u8> {
    format!(
        r#"{{"log_id":{{"leader_id":{{"term":3,"node_id":1}},"index":{index}}},"payload":{{"Normal":{{"now_ms":{},"commands":[{{"request":{{"agent":"bench-{:03}","request":{{"id":"r{index}","op":"lock.release","name":"hot","lease":"000000000000002a"}}}}}}]}}}}}}"#,
        1_700_000_000_000u64 + index,
        index % 100
    )
    .into_bytes()
}

/// One or two entries per batch, alternating: 1.5 entries per fsync, as a handover costs
/// 1.6-1.8 entries (docs/BENCHMARKS.md).
fn batch(index: u64, batch_number: u64) -> Vec<(u64, Vec<u8>)> {
    let count = 1 + batch_number % 2;
    (index..index + count).map(|at| (at, entry(at))).collect()
}

trait Store {
    /// Appends the rows durably.
    fn append(&mut self, rows: &[(u64, Vec<u8>)]) -> anyhow::Result<()>;
    /// How many entries the store holds (read back after a run, so the writes were real).
    fn entries(&self) -> anyhow::Result<u64>;
}

struct RedbStore {
    database: Database,
}

impl RedbStore {
    fn create(dir: &Path) -> anyhow::Result<RedbStore> {
        let database = Database::builder()
            .set_cache_size(64 * 1024 * 1024)
            .create(dir.join("hivekeeper.redb"))?;
        let txn = database.begin_write()?;
        txn.open_table(LOG)?;
        txn.open_table(META)?;
        txn.commit()?;
        Ok(RedbStore { database })
    }
}

impl Store for RedbStore {
    fn append(&mut self, rows: &[(u64, Vec<u8>)]) -> anyhow::Result<()> {
        let mut txn = self.database.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        {
            let mut log = txn.open_table(LOG)?;
            let mut meta = txn.open_table(META)?;
            for (index, row) in rows {
                log.insert(index, row.as_slice())?;
            }
            let last = rows.last().map_or(0, |(index, _)| *index);
            let committed = format!(
                r#"{{"leader_id":{{"term":3,"node_id":1}},"index":{}}}"#,
                last.saturating_sub(1)
            );
            meta.insert("committed", committed.as_bytes())?;
        }
        txn.commit()?;
        Ok(())
    }

    fn entries(&self) -> anyhow::Result<u64> {
        let txn = self.database.begin_read()?;
        Ok(redb::ReadableTableMetadata::len(&txn.open_table(LOG)?)?)
    }
}

/// The floor: the batch's bytes written over the same offset of a file whose blocks are
/// already written, then fdatasync. No framing, no index, no metadata change.
struct BareStore {
    file: std::fs::File,
    entries: u64,
}

impl BareStore {
    fn create(dir: &Path) -> anyhow::Result<BareStore> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("bare"))?;
        file.write_all_at(&[1u8; 4096], 0)?;
        file.sync_all()?;
        Ok(BareStore { file, entries: 0 })
    }
}

impl Store for BareStore {
    fn append(&mut self, rows: &[(u64, Vec<u8>)]) -> anyhow::Result<()> {
        let bytes: Vec<u8> = rows
            .iter()
            .flat_map(|(_, row)| row.iter().copied())
            .collect();
        self.file.write_all_at(&bytes, 0)?;
        self.file.sync_data()?;
        self.entries += rows.len() as u64;
        Ok(())
    }

    fn entries(&self) -> anyhow::Result<u64> {
        Ok(self.entries)
    }
}

struct SegmentStore {
    log: SegmentLog,
}

impl Store for SegmentStore {
    fn append(&mut self, rows: &[(u64, Vec<u8>)]) -> anyhow::Result<()> {
        self.log
            .append(rows.iter().map(|(index, row)| (*index, row.as_slice())))?;
        Ok(())
    }

    fn entries(&self) -> anyhow::Result<u64> {
        Ok(self.log.read(..)?.len() as u64)
    }
}

/// The write counters of `/proc/self/io`, and the CPU time the process has used.
#[derive(Debug, Clone, Copy, Default)]
struct Io {
    syscw: u64,
    wchar: u64,
    write_bytes: u64,
    /// On-CPU time of the main thread (the only one that writes),
    /// from `/proc/self/schedstat`, nanoseconds: user and system time, at nanosecond resolution.
    cpu_ns: u64,
}

fn io_now() -> anyhow::Result<Io> {
    let text = std::fs::read_to_string("/proc/self/io").context("reading /proc/self/io")?;
    let mut io = Io::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(": ") else {
            continue;
        };
        let value: u64 = value.trim().parse().unwrap_or(0);
        match key {
            "syscw" => io.syscw = value,
            "wchar" => io.wchar = value,
            "write_bytes" => io.write_bytes = value,
            _ => {}
        }
    }
    let schedstat =
        std::fs::read_to_string("/proc/self/schedstat").context("reading /proc/self/schedstat")?;
    io.cpu_ns = schedstat
        .split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .context("the first field of /proc/self/schedstat")?;
    Ok(io)
}

/// What one mode did in one round.
struct Measured {
    latencies: Vec<Duration>,
    entries: u64,
    io: Io,
}

fn measure(store: &mut dyn Store, batches: u64) -> anyhow::Result<Measured> {
    let mut index = 1u64;
    for number in 0..WARMUP_BATCHES {
        let rows = batch(index, number);
        store.append(&rows)?;
        index += rows.len() as u64;
    }
    let start_io = io_now()?;
    let first = index;
    let mut latencies = Vec::with_capacity(batches as usize);
    for number in 0..batches {
        let rows = batch(index, number);
        let started = Instant::now();
        store.append(&rows)?;
        latencies.push(started.elapsed());
        index += rows.len() as u64;
    }
    let end_io = io_now()?;
    let stored = store.entries()?;
    if stored != index - 1 {
        bail!(
            "the store holds {stored} entries, {} were appended",
            index - 1
        );
    }
    latencies.sort();
    Ok(Measured {
        latencies,
        entries: index - first,
        io: Io {
            syscw: end_io.syscw - start_io.syscw,
            wchar: end_io.wchar - start_io.wchar,
            write_bytes: end_io.write_bytes - start_io.write_bytes,
            cpu_ns: end_io.cpu_ns - start_io.cpu_ns,
        },
    })
}

fn percentile(sorted: &[Duration], fraction: f64) -> f64 {
    let at = ((sorted.len() as f64 * fraction) as usize).min(sorted.len() - 1);
    sorted[at].as_secs_f64() * 1e6
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Redb,
    SegmentLog,
    BareFdatasync,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Redb => "redb",
            Mode::SegmentLog => "segment-log",
            Mode::BareFdatasync => "bare-fdatasync",
        }
    }

    fn open(self, dir: &Path) -> anyhow::Result<Box<dyn Store>> {
        Ok(match self {
            Mode::Redb => Box::new(RedbStore::create(dir)?),
            Mode::SegmentLog => Box::new(SegmentStore {
                log: SegmentLog::open(dir, SegmentLogConfig::default())?,
            }),
            Mode::BareFdatasync => Box::new(BareStore::create(dir)?),
        })
    }
}

struct Args {
    rounds: u64,
    batches: u64,
    dir: PathBuf,
    modes: Vec<Mode>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        rounds: 6,
        batches: 2000,
        dir: PathBuf::from("/var/tmp/durable-append"),
        modes: vec![Mode::Redb, Mode::SegmentLog, Mode::BareFdatasync],
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rounds" => args.rounds = value.parse().context("--rounds")?,
            "--batches" => args.batches = value.parse().context("--batches")?,
            "--dir" => args.dir = PathBuf::from(value),
            "--only" => {
                args.modes = match value.as_str() {
                    "redb" => vec![Mode::Redb],
                    "segment-log" => vec![Mode::SegmentLog],
                    "bare-fdatasync" => vec![Mode::BareFdatasync],
                    other => bail!("--only redb|segment-log|bare-fdatasync, not {other:?}"),
                }
            }
            other => bail!("unknown flag {other:?}"),
        }
    }
    if args.batches == 0 {
        bail!("--batches must be at least 1");
    }
    Ok(args)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    println!(
        "{} rounds x {} durable batches of 1-2 entries ({} bytes each) per mode, dir {}",
        args.rounds,
        args.batches,
        entry(1000).len(),
        args.dir.display()
    );
    println!(
        "round  mode           entries  p50 µs  p90 µs  p99 µs  batches/s  cpu µs/batch  syscw/batch  wchar/batch  write_bytes/batch"
    );
    let mut medians: Vec<(Mode, f64)> = Vec::new();
    for round in 0..args.rounds {
        // Rotate the order each round, so no mode always runs first or after the same one.
        let mut order = args.modes.clone();
        let turn = round as usize % order.len();
        order.rotate_left(turn);
        for mode in order {
            let dir = args.dir.join(format!("{}-{round}", mode.name()));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            let mut store = mode.open(&dir)?;
            let measured = measure(store.as_mut(), args.batches)?;
            drop(store);
            std::fs::remove_dir_all(&dir)?;
            let total: f64 = measured.latencies.iter().map(Duration::as_secs_f64).sum();
            let per_batch = |value: u64| value as f64 / args.batches as f64;
            let p50 = percentile(&measured.latencies, 0.5);
            medians.push((mode, p50));
            println!(
                "{round:>5}  {:<14} {:>6} {:>7.0} {:>7.0} {:>7.0} {:>10.0} {:>13.1} {:>12.1} {:>12.0} {:>18.0}",
                mode.name(),
                measured.entries,
                p50,
                percentile(&measured.latencies, 0.9),
                percentile(&measured.latencies, 0.99),
                args.batches as f64 / total,
                per_batch(measured.io.cpu_ns) / 1000.0,
                per_batch(measured.io.syscw),
                per_batch(measured.io.wchar),
                per_batch(measured.io.write_bytes),
            );
        }
    }
    for mode in &args.modes {
        let mut p50s: Vec<f64> = medians
            .iter()
            .filter(|(of, _)| of == mode)
            .map(|(_, p50)| *p50)
            .collect();
        p50s.sort_by(f64::total_cmp);
        println!(
            "{}: median of the rounds' p50: {:.0} µs",
            mode.name(),
            p50s[p50s.len() / 2]
        );
    }
    Ok(())
}
