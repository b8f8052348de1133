//! An append-only log of opaque entries keyed by `u64` index, in preallocated segment files,
//! with one `fdatasync` per appended batch: a candidate for the Raft log that costs one small
//! sequential write per commit where redb's B-tree rewrites several pages
//! (docs/BENCHMARKS.md, "Durable append: redb vs a segment log").
//!
//! ```text
//!  append([(i, bytes), ...]) ──▶ frame each: len | crc32c | index | bytes
//!                                │
//!                                ▼  one pwrite at the end of the newest segment
//!  dir/ 00000000000000000001.seg  [hdr|r1|r2|...|r9000|0000000000000000]  sealed (full)
//!       00000000000000009001.seg  [hdr|r9001|...|rN|000000000000 zeros ]  newest: appends here
//!       LOCK                                                      ▲
//!                                  then one fdatasync ────────────┘  durable when append returns
//!
//!  write(batch) + sync()  ── the same in two steps: entries readable after write (&mut self),
//!                           durable after sync (&self), so reads need not wait for the disk
//!  read(range)       ── pread of the records, CRC checked again
//!  truncate_after(i) ── delete newer segments, cut the one holding i, zero its tail, fdatasync
//!  truncate_from(i)  ── the same from i on (i = 0, or the first index, empties the log)
//!  purge_upto(i)     ── delete whole old segments whose entries are all ≤ i
//!  open(dir)         ── scan; cut a torn tail of the newest segment; refuse damage elsewhere
//! ```
//!
//! Recovery rule: opening scans every segment. In the newest one, the first record that is not
//! whole and valid (cut short, bad CRC, wrong index, or zeros where a header belongs) ends the
//! log *if nothing valid follows it*: the bytes from there on are a write torn by a crash before
//! its fdatasync returned, so never acknowledged, and are cut ([`SegmentLog::recovered`] says
//! where). If a valid record with a later index follows, the damage is in the middle of the log
//! and opening fails with [`SegmentLogError::Corrupt`] naming the file and byte offset: dropping
//! it would silently drop acknowledged entries. Damage in an older (sealed) segment is always
//! that error. One case errs on the side of refusing: a power loss that persisted a later page of
//! the last batch but not an earlier one looks like mid-log damage; the node then needs an
//! operator (the batch was never acknowledged, so cutting at the reported offset is safe).
//!
//! Costs: opening reads every segment whole (64 MiB each by default) to rebuild the record
//! offsets, which the log keeps in memory (8 bytes per entry); a log purged behind snapshots
//! has one or two segments. A read is one `pread` per segment it touches.
//!
//! What the log does not do: it keeps no vote, no commit index and no snapshot (those stay in
//! redb), it never interprets the bytes, and it serves one writer (`&mut self`); reads and
//! [`SegmentLog::sync`] take `&self`, so behind an `RwLock` a leader can read the entries it is
//! flushing while the fdatasync runs. The Raft adapter (`coordinator/src/raft/writer.rs`) maps openraft's entries to bytes,
//! keeps the last purged log id beside the vote in redb, and calls [`SegmentLog::write`] and
//! [`SegmentLog::sync`] from its writer thread.
//!
//! # Layout
//! - `config.rs`: [`SegmentLogConfig`], the segment size, with [`DEFAULTS`].
//! - `error.rs`: [`SegmentLogError`] and [`Damage`].
//! - `record.rs`: a record's framing and checks.
//! - `segment.rs`: one segment file, its header and the recovery scan.
//! - `log.rs`: [`SegmentLog`], the segments as one log, and the order of each change's steps
//!   that keeps it crash-safe.

mod config;
mod error;
mod log;
mod record;
mod segment;

pub use config::{DEFAULTS, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SegmentLogConfig};
pub use error::{Damage, Result, SegmentLogError};
pub use log::{InvariantViolation, LOCK_FILE_NAME, SegmentLog};
pub use record::RECORD_HEADER_BYTES;
pub use segment::{SEGMENT_FORMAT, SEGMENT_HEADER_BYTES, TornTail};
