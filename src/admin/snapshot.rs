//! `hivekeeper snapshot save FILE` (online, over the admin path) and `hivekeeper snapshot
//! restore FILE --data-dir DIR` (offline): a backup of the replicated state, and a new
//! cluster started from one.
//!
//! ```text
//!  save:    admin.snapshot {}                 ─▶ the leader takes and keeps a snapshot
//!           admin.snapshot {index, offset} …  ─▶ its pages, in order (PageJoiner checks each,
//!                                                and the digest at the end)
//!             too_large  ─▶ the same page again, half as big (a broker with small packets)
//!             not kept   ─▶ start again from a new snapshot (the leader changed), 3 tries
//!           FILE.tmp (header + state) ─ fsync ─ rename ─▶ FILE ─ fsync the directory
//!  restore: FILE ─ checked (magic, version, length, checksum; the state restores)
//!           ─▶ DIR, which must be empty ─▶ a data directory whose latest snapshot is the
//!              state: `hivekeeper serve --data-dir DIR ...` starts on it
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use hivekeeper_agent::protocol::validate::{SNAPSHOT_PAGE_BYTES_DEFAULT, SNAPSHOT_PAGE_BYTES_MIN};
use hivekeeper_agent::protocol::{ErrorCode, Op, SnapshotPage};
use hivekeeper_agent::{Agent, AgentError};
use hivekeeper_coordinator::backup::{self, BackupFile, PageJoiner, Seat};
use hivekeeper_coordinator::node::{ClusterConfig, NodeConfig};
use hivekeeper_coordinator::state_machine::StateMachine;
use serde_json::json;

use super::{Target, block_on, connect, failure};

/// How many times `save` starts again from a new snapshot when the leader no longer keeps the
/// one it was reading (the leader changed, or the read was slower than the keep time).
const SAVE_TRIES: u32 = 3;

/// `hivekeeper snapshot ...`.
#[derive(Debug, clap::Args)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    action: SnapshotAction,
}

/// What `hivekeeper snapshot` does.
#[derive(Debug, clap::Subcommand)]
enum SnapshotAction {
    /// Save a consistent snapshot of the running cluster to FILE (online).
    ///
    /// The state at one log index, read from the leader after a read-index round, page by
    /// page (`admin.snapshot`; with authentication on, it needs the admin role). Written to
    /// FILE.tmp, synced, then renamed to FILE. The file holds everything, account secret
    /// hashes included: keep it like a data directory.
    Save {
        /// Where to write the backup.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Most bytes of state per page (before base64): fewer, smaller MQTT packets. Halved
        /// automatically while the service answers `too_large`.
        #[arg(long, value_name = "BYTES", default_value_t = SNAPSHOT_PAGE_BYTES_DEFAULT)]
        page_bytes_max: u32,
        #[command(flatten)]
        target: Target,
    },
    /// Seed an empty data directory for a NEW cluster from FILE (offline).
    ///
    /// Run it for every member with the same FILE and the same --initial-cluster, then start
    /// each with `hivekeeper serve` on its directory (and the same --name and
    /// --initial-cluster). Without --name: a single node. Every lease, hold with its token,
    /// permit, reservation, waiter and account is restored; a restored lease gets its full
    /// TTL again from when the new cluster's first leader takes office, and new tokens are
    /// higher than every restored one.
    Restore {
        /// The backup written by `snapshot save`.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The new member's data directory: absent or empty (anything in it is refused).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// The member this directory is for, as `serve --name` will say; without it, a single
        /// node.
        #[arg(long, value_name = "NAME", requires = "initial_cluster")]
        name: Option<String>,
        /// Every member of the new cluster, as `serve --initial-cluster` will say, the same
        /// list for every member restored.
        #[arg(long, value_name = "NAME=HOST:PORT,...", requires = "name")]
        initial_cluster: Option<String>,
        /// A single node's id, as its config file's `[node] node_id` says (without --name).
        #[arg(long, value_name = "N", default_value_t = NodeConfig::defaults().node_id, conflicts_with = "name")]
        node_id: u64,
        /// Print JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
}

/// `hivekeeper snapshot`.
pub fn snapshot(args: SnapshotArgs) -> anyhow::Result<()> {
    match args.action {
        SnapshotAction::Save {
            file,
            page_bytes_max,
            target,
        } => block_on(save(file, page_bytes_max, target)),
        SnapshotAction::Restore {
            file,
            data_dir,
            name,
            initial_cluster,
            node_id,
            json,
        } => {
            let seat = match (name, initial_cluster) {
                (Some(name), Some(initial_cluster)) => {
                    Seat::member(&ClusterConfig::new(name, initial_cluster))?
                }
                _ => Seat::single_node(node_id),
            };
            restore(&file, &data_dir, &seat, json)
        }
    }
}

async fn save(path: PathBuf, page_bytes_max: u32, target: Target) -> anyhow::Result<()> {
    let agent = connect(&target, &target.broker).await?;
    let mut tries = 0;
    let file = loop {
        tries += 1;
        match read_snapshot(&agent, page_bytes_max).await? {
            Read::Done(file) => break file,
            Read::NotKept(reason) if tries < SAVE_TRIES => {
                tracing::debug!(%reason, tries, "starting the snapshot again");
            }
            Read::NotKept(reason) => {
                bail!("the snapshot could not be read to its end in {SAVE_TRIES} tries: {reason}")
            }
        }
    };
    let machine = StateMachine::restore(&file.state)
        .map_err(|error| anyhow!("the leader's snapshot does not restore: {error}"))?;
    write_atomically(&path, &file.encode())?;
    let (leases, resources) = (machine.lease_count(), machine.resource_count());
    if target.json {
        println!(
            "{}",
            json!({"file": path, "index": file.index, "term": file.term,
                   "bytes": file.state.len(), "leases": leases, "resources": resources})
        );
    } else {
        println!(
            "saved the state at log index {} (term {}) to {}: {} bytes, {leases} leases, \
             {resources} resources",
            file.index,
            file.term,
            path.display(),
            file.state.len()
        );
    }
    Ok(())
}

/// How one read of a snapshot ended.
enum Read {
    /// Every page, joined and checked.
    Done(BackupFile),
    /// The leader no longer keeps the snapshot (the reason): start again.
    NotKept(String),
}

/// Reads one snapshot page by page, halving the page while the service answers `too_large`.
async fn read_snapshot(agent: &Agent, page_bytes_max: u32) -> anyhow::Result<Read> {
    let mut page_bytes = page_bytes_max;
    let mut joiner: Option<PageJoiner> = None;
    loop {
        let op = Op::AdminSnapshot {
            index: joiner.as_ref().map(PageJoiner::index),
            offset: joiner.as_ref().map(PageJoiner::next_offset),
            page_bytes_max: Some(page_bytes),
        };
        let name = op.name();
        let page = match agent.request_as::<SnapshotPage>(op).await {
            Ok(page) => page,
            Err(AgentError::Service {
                code: ErrorCode::TooLarge,
                message,
            }) => {
                if page_bytes <= SNAPSHOT_PAGE_BYTES_MIN {
                    bail!("admin.snapshot: even {page_bytes}-byte pages are too large: {message}");
                }
                page_bytes = (page_bytes / 2).max(SNAPSHOT_PAGE_BYTES_MIN);
                continue;
            }
            Err(AgentError::Service {
                code: ErrorCode::BadRequest,
                message,
            }) if joiner.is_some() => return Ok(Read::NotKept(message)),
            Err(error) => return Err(failure(name, error)),
        };
        match &mut joiner {
            None => joiner = Some(PageJoiner::start(page)?),
            Some(joiner) => joiner.push(page)?,
        }
        if let Some(done) = joiner.take_if(|joiner| joiner.done()) {
            return Ok(Read::Done(done.finish()?));
        }
    }
}

/// Writes `bytes` to `path` so that `path` is either the old file or the whole new one:
/// `path.tmp`, synced, renamed over `path`, and the directory synced.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut out =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    out.write_all(bytes)
        .and_then(|()| out.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    drop(out);
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("cannot sync directory {}", dir.display()))?;
    Ok(())
}

fn restore(path: &Path, data_dir: &Path, seat: &Seat, json: bool) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file = BackupFile::decode(&bytes).with_context(|| format!("{}", path.display()))?;
    let restored = backup::restore(&file, data_dir, seat)
        .with_context(|| format!("restoring {}", path.display()))?;
    if json {
        println!(
            "{}",
            json!({"data_dir": data_dir, "index": restored.index, "term": restored.term,
                   "bytes": restored.state_bytes, "leases": restored.leases,
                   "resources": restored.resources})
        );
    } else {
        println!(
            "restored the state at log index {} (term {}) into {}: {} bytes, {} leases, {} \
             resources. Start it with `hivekeeper serve --data-dir {}` (and the --name and \
             --initial-cluster given here, for a cluster member); restored leases get their full \
             TTL from when the new cluster's first leader takes office.",
            restored.index,
            restored.term,
            data_dir.display(),
            restored.state_bytes,
            restored.leases,
            restored.resources,
            data_dir.display()
        );
    }
    Ok(())
}
