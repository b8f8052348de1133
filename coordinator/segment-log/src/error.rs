//! The crate's one error type, [`SegmentLogError`], and what it says about damaged bytes,
//! [`Damage`].
//!
//! Every variant carries the values an operator needs to act: the file, the byte offset, the
//! indexes involved. An I/O error says which operation failed, so a full disk during
//! preallocation reads differently from one during an append.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong opening, writing or reading a segment log.
#[derive(Debug, thiserror::Error)]
pub enum SegmentLogError {
    /// A system call failed (a full disk is `ENOSPC` here, never a panic).
    #[error("{path}: {operation}: {source}")]
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// What the log was doing, e.g. "preallocating a segment" or "fdatasync of an append".
        operation: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Another process (or another `SegmentLog` in this one) has the directory open.
    #[error("{dir}: the segment log is already open (its LOCK file is locked)")]
    InUse {
        /// The log's directory.
        dir: PathBuf,
    },

    /// A record that is not the log's torn tail failed its check: valid records follow it, or it
    /// sits in a sealed segment. The log refuses to open rather than drop the entries after it.
    #[error(
        "{path}: damaged record at byte {offset}: {damage}; refusing to open, since dropping it \
         would drop the entries after it"
    )]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the damaged record's header in that file.
        offset: u64,
        /// What is wrong with it.
        damage: Damage,
    },

    /// A file named like a segment whose header is not a segment header of this format.
    #[error("{path}: not a segment of this log: {damage}")]
    BadSegmentHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong with its header.
        damage: Damage,
    },

    /// Two consecutive segments do not continue each other: entries are missing.
    #[error(
        "{after}: the segment starts at index {first_index}, but the segment before it \
         ({before}) ends at {last_index}: entries are missing"
    )]
    Gap {
        /// The earlier segment.
        before: PathBuf,
        /// Its last index (its first index minus one when it is empty).
        last_index: u64,
        /// The later segment.
        after: PathBuf,
        /// The later segment's first index.
        first_index: u64,
    },

    /// An appended entry's index does not continue the log.
    #[error("append out of order: the next index is {expected}, the entry has {found}")]
    OutOfOrder {
        /// The index the log expects next.
        expected: u64,
        /// The index the entry carried.
        found: u64,
    },

    /// An entry at `u64::MAX`: no entry could follow it, so the log refuses it.
    #[error("entry index {index} is the largest there is; the log cannot continue after it")]
    IndexMax {
        /// The index.
        index: u64,
    },

    /// An entry is larger than one segment can hold.
    #[error("entry {index} is {payload_bytes} bytes; a segment holds at most {payload_bytes_max}")]
    TooLarge {
        /// The entry's index.
        index: u64,
        /// Its payload size.
        payload_bytes: u64,
        /// The largest payload a segment of the configured size holds.
        payload_bytes_max: u64,
    },

    /// `truncate_after` below the first stored entry: those entries are purged, not truncated.
    #[error("cannot truncate after index {index}: the log starts at {first_index}")]
    TruncateBeforeStart {
        /// The index asked for.
        index: u64,
        /// The first index stored.
        first_index: u64,
    },

    /// A write, a sync or a file operation failed earlier; nothing more is written, because after
    /// a failed fdatasync the kernel may have dropped the dirty pages ("fsyncgate"): the state on
    /// disk is unknown until the log is reopened and recovered.
    #[error(
        "an earlier write failed ({first}); the log accepts no more writes until it is reopened"
    )]
    Poisoned {
        /// The first failure, as text (the original error went to the caller that saw it).
        first: String,
    },

    /// A configuration value out of its range.
    #[error("config: {field} = {value}: {reason}")]
    Config {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The rule it breaks.
        reason: &'static str,
    },
}

/// What is wrong with a record or a segment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The stored CRC-32C does not match the bytes.
    Crc {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// The record's index is not the one its position implies.
    Index {
        /// The index the position implies.
        expected: u64,
        /// The index in the header.
        found: u64,
    },
    /// The record (its header, or the payload length its header gives) runs past the end of
    /// the segment file.
    Cut {
        /// The bytes the record needs from its offset.
        need_bytes: u64,
        /// The bytes the file has from that offset.
        have_bytes: u64,
    },
    /// Zeros where a record belongs, with valid records after them.
    Zeroed,
    /// The segment header's magic bytes are not this crate's.
    Magic,
    /// The segment header's format version is not one this build reads.
    Format {
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file name's index and the header's first index differ.
    NameMismatch {
        /// The index in the file name.
        name_index: u64,
        /// The first index in the header.
        header_index: u64,
    },
    /// The file is shorter than a segment header.
    Short {
        /// Its length.
        file_bytes: u64,
    },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Crc { stored, computed } => {
                write!(
                    f,
                    "CRC-32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
                )
            }
            Damage::Index { expected, found } => {
                write!(f, "index {found} where {expected} belongs")
            }
            Damage::Cut {
                need_bytes,
                have_bytes,
            } => write!(
                f,
                "the record needs {need_bytes} bytes, the file has {have_bytes} from there"
            ),
            Damage::Zeroed => write!(f, "zeros where a record belongs"),
            Damage::Magic => write!(f, "bad magic bytes"),
            Damage::Format { found, supported } => {
                write!(f, "format {found}, this build reads {supported}")
            }
            Damage::NameMismatch {
                name_index,
                header_index,
            } => write!(
                f,
                "its name says index {name_index}, its header says {header_index}"
            ),
            Damage::Short { file_bytes } => {
                write!(f, "{file_bytes} bytes, shorter than a segment header")
            }
        }
    }
}

/// Shorthand for the crate's results.
pub type Result<T, E = SegmentLogError> = std::result::Result<T, E>;

/// Builds the `Io` variant: `io(path, "what")(error)`, for `map_err`.
pub(crate) fn io(
    path: &std::path::Path,
    operation: &'static str,
) -> impl FnOnce(std::io::Error) -> SegmentLogError {
    let path = path.to_path_buf();
    move |source| SegmentLogError::Io {
        path,
        operation,
        source,
    }
}
