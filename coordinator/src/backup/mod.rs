//! Online backup and restore: a consistent snapshot of a running cluster, read page by page
//! over the admin path, saved to a file, and seeded into a new cluster.
//!
//! ```text
//!  hivekeeper snapshot save FILE                         (an admin client, over MQTT)
//!    admin.snapshot {}              ─▶ leader: read-index, a copy of the machine at its
//!                                      applied index (raft::RaftHandle::applied_state),
//!                                      serialized and kept: PinnedSnapshot (node/snapshot.rs)
//!                                   ◀─ page 0 { index, term, total_bytes, digest, data, done }
//!    admin.snapshot {index, offset} ◀─ the next page of that same snapshot … until done
//!    PageJoiner: in order, same snapshot, digest checked ─▶ BackupFile
//!    FILE.tmp ─ fsync ─ rename ─▶ FILE  (header + state, file.rs)
//!
//!  hivekeeper snapshot restore FILE --data-dir DIR [--name N --initial-cluster …]  (offline)
//!    BackupFile::decode (magic, version, length, checksum) ─▶ restore(): the state restores,
//!    DIR is empty ─▶ raft::seed_data_dir ─▶ `hivekeeper serve` on DIR starts from the state
//! ```
//!
//! # Layout
//! - `file.rs`: [`BackupFile`], the file's layout and its checks ([`FileError`]).
//! - `pages.rs`: [`PinnedSnapshot`] (the leader cuts pages) and [`PageJoiner`] (the reader
//!   joins them).
//! - `restore.rs`: [`restore`] a data directory for one member ([`Seat`]) from a file.

mod file;
mod pages;
mod restore;

use std::path::PathBuf;

pub use file::{BackupFile, FILE_FORMAT, FileError, HEADER_BYTES, MAGIC};
pub use pages::{PageJoiner, PinnedSnapshot, SNAPSHOT_BYTES_MAX};
pub use restore::{Restored, Seat, restore};

use crate::raft::{NodeId, RaftError};

/// BLAKE2b with a 256-bit output: the checksum of backup files and the digest of snapshots.
pub(crate) type Blake2b256 = blake2::Blake2b<blake2::digest::consts::U32>;

/// BLAKE2b-256 of `bytes`, 64 lowercase hex digits: the digest `admin.snapshot` sends.
pub fn digest_hex(bytes: &[u8]) -> String {
    use blake2::Digest;
    hex(&Blake2b256::digest(bytes))
}

/// Bytes as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// Why a backup could not be read, joined or restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The file is not a backup this build reads.
    #[error(transparent)]
    File(#[from] FileError),
    /// An `offset` past the snapshot's end was asked for.
    #[error(
        "`offset` {offset} is past the end of the snapshot at index {index} ({total_bytes} bytes)"
    )]
    OffsetPastEnd {
        /// The snapshot's index.
        index: u64,
        /// The offset asked for.
        offset: u64,
        /// Its length.
        total_bytes: u64,
    },
    /// The first page announced a snapshot larger than a reader accepts.
    #[error(
        "the snapshot is {total_bytes} bytes, more than the {SNAPSHOT_BYTES_MAX} a reader accepts"
    )]
    TooLarge {
        /// The announced length.
        total_bytes: u64,
    },
    /// A page of another snapshot than the first page's.
    #[error(
        "a page of the snapshot at index {found_index} came while reading the one at index {index}"
    )]
    OtherSnapshot {
        /// The snapshot being read.
        index: u64,
        /// The page's.
        found_index: u64,
    },
    /// A page that does not start where the bytes so far end.
    #[error("a page starts at byte {found}, but the next one is at {expected}")]
    PageOutOfOrder {
        /// Where the next page should start.
        expected: u64,
        /// Where it did.
        found: u64,
    },
    /// A page's `data` is not base64.
    #[error("the page at byte {offset} is not base64: {reason}")]
    PageData {
        /// The page's offset.
        offset: u64,
        /// The decoder's complaint.
        reason: String,
    },
    /// A page's length disagrees with the snapshot's, or with its `done`.
    #[error(
        "a page of {bytes} bytes at {offset} does not fit a snapshot of {total_bytes} bytes \
         (done: {done})"
    )]
    PageLength {
        /// The page's offset.
        offset: u64,
        /// Its decoded length.
        bytes: u64,
        /// The snapshot's length.
        total_bytes: u64,
        /// What it said about ending the snapshot.
        done: bool,
    },
    /// The joined bytes are not the snapshot the leader announced.
    #[error(
        "the joined snapshot hashes to {found}, not the {expected} the leader announced: a page \
         was damaged on the way"
    )]
    Digest {
        /// The announced digest.
        expected: String,
        /// The joined bytes' digest.
        found: String,
    },
    /// The state inside the file does not restore (the checksum matched: it was saved so, by a
    /// build whose state format differs, or it was rewritten with a new checksum).
    #[error("the state in the file cannot be restored: {reason}")]
    State {
        /// Why.
        reason: String,
    },
    /// The member being restored is not in the new cluster's member list.
    #[error("node {node_id} is not one of the members it is restored for")]
    NotAMember {
        /// Its node id.
        node_id: NodeId,
    },
    /// The data directory already holds something.
    #[error(
        "{} already holds data ({}): a restore seeds a new, empty data directory only (move it \
         away, or give another --data-dir)",
        path.display(),
        entry.display()
    )]
    DataDirNotEmpty {
        /// The directory.
        path: PathBuf,
        /// The first entry found in it.
        entry: PathBuf,
    },
    /// The data directory could not be read.
    #[error("cannot read data directory {}: {source}", path.display())]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing the seeded data file failed.
    #[error("seeding the data directory: {0}")]
    Seed(RaftError),
}
