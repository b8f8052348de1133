//! `admin.snapshot`'s pages: cut from a snapshot the leader keeps ([`PinnedSnapshot`]), and
//! joined again by the reader ([`PageJoiner`]).
//!
//! ```text
//!  leader: PinnedSnapshot { index, term, bytes, digest } ─ page(offset, bytes_max) ─▶ SnapshotPage
//!            (bytes[offset .. offset+bytes_max] as base64, done when it reaches the end)
//!  reader: PageJoiner::start(first page) ─ push(page at next_offset()) … ─ finish() ─▶ BackupFile
//!            every page of the same index, term, length and digest, in order, no gap, no
//!            overlap; the joined bytes hash to the digest
//! ```
//!
//! Invariants:
//! 1. A page never reaches past the snapshot's end, and the page that reaches it says `done`.
//! 2. A joiner accepts only the page that starts where the bytes it holds end, of the snapshot
//!    its first page named, and never more bytes than the first page announced; so a reading
//!    loop that asks for `next_offset()` until `done()` ends after at most
//!    `total_bytes / page + 1` pages or with an error.
//! 3. `finish` returns only bytes of the announced length whose digest is the announced one.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hivekeeper_protocol::SnapshotPage;

use super::{BackupError, BackupFile, digest_hex};

/// Largest snapshot a reader accepts: 4 GiB. The state is bounded by its replicated limits
/// (leases, resources, waiters, remembered outcomes) to far less; this only stops a broken
/// or hostile answer from making the reader allocate without bound.
pub const SNAPSHOT_BYTES_MAX: u64 = 4 << 30;

/// A snapshot the leader keeps while an operator reads it page by page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedSnapshot {
    /// The log index it was taken at.
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
    /// `StateMachine::snapshot()` of the state at `index`.
    bytes: Vec<u8>,
    /// BLAKE2b-256 of `bytes`, hex, sent with every page.
    digest: String,
}

impl PinnedSnapshot {
    /// Keeps `bytes`, the state at log position (`index`, `term`).
    pub fn new(index: u64, term: u64, bytes: Vec<u8>) -> PinnedSnapshot {
        let digest = digest_hex(&bytes);
        PinnedSnapshot {
            index,
            term,
            bytes,
            digest,
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it has no bytes (never, for a machine's snapshot, which is JSON).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The page of at most `page_bytes_max` bytes from `offset` (invariant 1). `Err` names an
    /// offset past the end (a reader that lost count: it should start again).
    pub fn page(&self, offset: u64, page_bytes_max: usize) -> Result<SnapshotPage, BackupError> {
        let total = self.bytes.len();
        let start = usize::try_from(offset)
            .ok()
            .filter(|start| *start <= total)
            .ok_or(BackupError::OffsetPastEnd {
                index: self.index,
                offset,
                total_bytes: total as u64,
            })?;
        let end = start.saturating_add(page_bytes_max.max(1)).min(total);
        Ok(SnapshotPage {
            index: self.index,
            term: self.term,
            total_bytes: total as u64,
            offset,
            data: BASE64.encode(&self.bytes[start..end]),
            digest: self.digest.clone(),
            done: end == total,
        })
    }
}

/// The reader's side: joins the pages of one snapshot, checking each (invariants 2 and 3).
#[derive(Debug)]
pub struct PageJoiner {
    /// What the first page announced; every later page must say the same.
    first: SnapshotPage,
    /// The bytes so far.
    bytes: Vec<u8>,
    /// Whether the last page taken said `done`.
    done: bool,
}

impl PageJoiner {
    /// Starts from the first page of a snapshot (offset 0).
    pub fn start(first: SnapshotPage) -> Result<PageJoiner, BackupError> {
        if first.total_bytes > SNAPSHOT_BYTES_MAX {
            return Err(BackupError::TooLarge {
                total_bytes: first.total_bytes,
            });
        }
        let mut joiner = PageJoiner {
            first: SnapshotPage {
                data: String::new(),
                ..first.clone()
            },
            bytes: Vec::new(),
            done: false,
        };
        joiner.push(first)?;
        Ok(joiner)
    }

    /// The offset of the next page to ask for.
    pub fn next_offset(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The log index of the snapshot being read (what later pages ask for).
    pub fn index(&self) -> u64 {
        self.first.index
    }

    /// Whether the last page said it ends the snapshot.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Takes the next page: it must be of the same snapshot and start at [`next_offset`].
    ///
    /// [`next_offset`]: PageJoiner::next_offset
    pub fn push(&mut self, page: SnapshotPage) -> Result<(), BackupError> {
        let first = &self.first;
        if (page.index, page.term, page.total_bytes, &page.digest)
            != (first.index, first.term, first.total_bytes, &first.digest)
        {
            return Err(BackupError::OtherSnapshot {
                index: first.index,
                found_index: page.index,
            });
        }
        if page.offset != self.next_offset() || self.done {
            return Err(BackupError::PageOutOfOrder {
                expected: self.next_offset(),
                found: page.offset,
            });
        }
        let data = BASE64
            .decode(page.data.as_bytes())
            .map_err(|error| BackupError::PageData {
                offset: page.offset,
                reason: error.to_string(),
            })?;
        let end = page.offset.saturating_add(data.len() as u64);
        if end > first.total_bytes || (page.done != (end == first.total_bytes)) {
            return Err(BackupError::PageLength {
                offset: page.offset,
                bytes: data.len() as u64,
                total_bytes: first.total_bytes,
                done: page.done,
            });
        }
        self.bytes.extend_from_slice(&data);
        self.done = page.done;
        Ok(())
    }

    /// The joined snapshot, once done, if its digest is the announced one.
    pub fn finish(self) -> Result<BackupFile, BackupError> {
        if !self.done {
            return Err(BackupError::PageOutOfOrder {
                expected: self.next_offset(),
                found: self.next_offset(),
            });
        }
        let found = digest_hex(&self.bytes);
        if found != self.first.digest {
            return Err(BackupError::Digest {
                expected: self.first.digest,
                found,
            });
        }
        Ok(BackupFile {
            index: self.first.index,
            term: self.first.term,
            state: self.bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pinned(len: usize) -> PinnedSnapshot {
        let bytes = (0..len).map(|i| (i % 251) as u8).collect();
        PinnedSnapshot::new(120, 3, bytes)
    }

    /// Reads `snapshot` page by page as the CLI does; returns the file and the page count.
    fn read_all(snapshot: &PinnedSnapshot, page_bytes: usize) -> (BackupFile, usize) {
        let mut joiner =
            PageJoiner::start(snapshot.page(0, page_bytes).expect("page 0")).expect("starts");
        let mut pages = 1;
        while !joiner.done() {
            let page = snapshot
                .page(joiner.next_offset(), page_bytes)
                .expect("a page");
            joiner.push(page).expect("in order");
            pages += 1;
            assert!(pages < 1_000, "the loop ends");
        }
        (joiner.finish().expect("the digest matches"), pages)
    }

    #[test]
    fn pages_join_into_the_snapshot_whatever_their_size() {
        let snapshot = pinned(10_000);
        for (page_bytes, pages) in [(1_024, 10), (4_000, 3), (10_000, 1), (65_536, 1)] {
            let (file, count) = read_all(&snapshot, page_bytes);
            assert_eq!(count, pages, "{page_bytes}-byte pages");
            assert_eq!(file.state, snapshot.bytes);
            assert_eq!((file.index, file.term), (120, 3));
        }
        // An empty snapshot is one empty page that is done.
        let empty = PinnedSnapshot::new(0, 0, Vec::new());
        let page = empty.page(0, 1_024).expect("page 0");
        assert!(page.done && page.data.is_empty());
        assert_eq!(read_all(&empty, 1_024).0.state, Vec::<u8>::new());
    }

    #[test]
    fn an_offset_past_the_end_is_refused() {
        let snapshot = pinned(100);
        assert!(snapshot.page(100, 10).expect("the end").done);
        assert_eq!(
            snapshot.page(101, 10).unwrap_err().to_string(),
            "`offset` 101 is past the end of the snapshot at index 120 (100 bytes)"
        );
    }

    #[test]
    fn a_page_of_another_snapshot_or_out_of_order_is_refused() {
        let snapshot = pinned(3_000);
        let mut joiner = PageJoiner::start(snapshot.page(0, 1_024).expect("0")).expect("starts");
        // The same page again (a duplicate), and one that skips ahead.
        for offset in [0, 2_048] {
            let error = joiner
                .push(snapshot.page(offset, 1_024).expect("a page"))
                .unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("a page starts at byte {offset}, but the next one is at 1024")
            );
        }
        let other = PinnedSnapshot::new(130, 3, snapshot.bytes.clone());
        assert_eq!(
            joiner
                .push(other.page(1_024, 1_024).expect("a page"))
                .unwrap_err()
                .to_string(),
            "a page of the snapshot at index 130 came while reading the one at index 120"
        );
    }

    #[test]
    fn damaged_pages_are_caught() {
        let snapshot = pinned(2_000);
        let mut first = snapshot.page(0, 1_024).expect("0");
        first.data.replace_range(0..4, "@@@@");
        assert!(matches!(
            PageJoiner::start(first),
            Err(BackupError::PageData { offset: 0, .. })
        ));
        // Bytes that decode but are not the snapshot's: the digest says so at the end.
        let mut joiner = PageJoiner::start(snapshot.page(0, 1_024).expect("0")).expect("starts");
        let mut last = snapshot.page(1_024, 1_024).expect("1");
        let mut bytes = BASE64.decode(&last.data).expect("base64");
        bytes[0] ^= 1;
        last.data = BASE64.encode(&bytes);
        joiner.push(last).expect("the right length");
        assert!(matches!(joiner.finish(), Err(BackupError::Digest { .. })));
        // A page that claims to end early, or runs past the end.
        let mut joiner = PageJoiner::start(snapshot.page(0, 1_024).expect("0")).expect("starts");
        let mut early = snapshot.page(1_024, 100).expect("short");
        early.done = true;
        assert_eq!(
            joiner.push(early).unwrap_err().to_string(),
            "a page of 100 bytes at 1024 does not fit a snapshot of 2000 bytes (done: true)"
        );
        let mut huge = snapshot.page(0, 1_024).expect("0");
        huge.total_bytes = SNAPSHOT_BYTES_MAX + 1;
        assert!(matches!(
            PageJoiner::start(huge),
            Err(BackupError::TooLarge { .. })
        ));
    }
}
