//! One segment file: its header, its records, and the recovery scan that opens it.
//!
//! ```text
//!  0000000000000000042.seg  (the name is the first index, 20 digits, so names sort by index)
//!  ┌──────────────────────────┬──────────┬──────────┬─────┬──────────┬──────────────────────┐
//!  │ header (24 bytes)        │ record   │ record   │ ... │ record   │ zeros (preallocated) │
//!  │ magic, format, crc,      │ index 42 │ index 43 │     │ index N  │                      │
//!  │ first index              │          │          │     │          │                      │
//!  └──────────────────────────┴──────────┴──────────┴─────┴──────────┴──────────────────────┘
//!  0                          24                                     end                capacity
//! ```
//!
//! Invariants:
//! 1. `offsets[k]` is the byte offset of the record holding index `first_index + k`; offsets
//!    increase, the first is [`SEGMENT_HEADER_BYTES`], and `end` is the end of the last record.
//! 2. On disk, every byte from `end` to `capacity` is zero, except bytes of an append in flight:
//!    a cut (truncation, or a torn tail at recovery) shrinks the file and preallocates it again,
//!    so a stale record never survives past the end to be read back as a live one.
//! 3. The header is durable before any record is written (`create` syncs it).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Damage, Result, SegmentLogError, io};
use crate::record::{self, Parsed};

/// Bytes of a segment's header.
pub const SEGMENT_HEADER_BYTES: u64 = 24;

/// The header's first bytes.
const MAGIC: &[u8; 8] = b"HKSEGLOG";

/// The on-disk format this build writes and reads (the header and record layouts).
pub const SEGMENT_FORMAT: u32 = 1;

/// What recovery cut from the end of the last segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub path: PathBuf,
    /// Where the log now ends in it (the torn record's offset).
    pub offset: u64,
    /// The non-zero bytes found from there on (the torn write's size, at most).
    pub bytes: u64,
    /// What the first bad record looked like.
    pub damage: Damage,
}

/// An open segment.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Its file, for error messages and deletion.
    pub path: PathBuf,
    /// The open file, read and written with positioned I/O (no shared cursor).
    pub file: File,
    /// The index of its first record (from the header).
    pub first_index: u64,
    /// Byte offset of each record (invariant 1).
    pub offsets: Vec<u64>,
    /// The end of the last record: where the next one goes.
    pub end: u64,
    /// The file's preallocated length.
    pub capacity: u64,
}

/// The file name of the segment starting at `first_index`.
pub(crate) fn file_name(first_index: u64) -> String {
    format!("{first_index:020}.seg")
}

/// The first index a segment file name gives, `None` for any other file.
pub(crate) fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn header(first_index: u64) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES as usize];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..12].copy_from_slice(&SEGMENT_FORMAT.to_le_bytes());
    bytes[16..24].copy_from_slice(&first_index.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..12]), &bytes[16..24]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Checks a header and returns its first index.
fn parse_header(bytes: &[u8]) -> Result<u64, Damage> {
    if bytes.len() < SEGMENT_HEADER_BYTES as usize {
        return Err(Damage::Short {
            file_bytes: bytes.len() as u64,
        });
    }
    if &bytes[..8] != MAGIC {
        return Err(Damage::Magic);
    }
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[8..12]);
    let format = u32::from_le_bytes(word);
    if format != SEGMENT_FORMAT {
        return Err(Damage::Format {
            found: format,
            supported: SEGMENT_FORMAT,
        });
    }
    word.copy_from_slice(&bytes[12..16]);
    let stored = u32::from_le_bytes(word);
    let computed = crc32c::crc32c_append(crc32c::crc32c(&bytes[..12]), &bytes[16..24]);
    if stored != computed {
        return Err(Damage::Crc { stored, computed });
    }
    let mut index = [0u8; 8];
    index.copy_from_slice(&bytes[16..24]);
    Ok(u64::from_le_bytes(index))
}

/// Reserves the file's blocks up to `len` (and sets its length): `fallocate` where the file
/// system has it, so a full disk fails here and not during an append; `set_len` (a sparse file)
/// elsewhere.
fn preallocate(file: &File, path: &Path, len: u64) -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
            Ok(()) => return Ok(()),
            Err(errno) if errno == rustix::io::Errno::OPNOTSUPP => {}
            Err(errno) => {
                return Err(io(path, "preallocating a segment")(std::io::Error::from(
                    errno,
                )));
            }
        }
    }
    file.set_len(len)
        .map_err(io(path, "setting a segment's length"))
}

/// Makes a directory's entries (created or removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io(dir, "fsync of the log directory"))
}

/// How opening a segment file went.
#[derive(Debug)]
pub(crate) enum Opened {
    /// A segment, and what recovery cut from its end (the last segment only).
    Segment(Segment, Option<TornTail>),
    /// The last segment's creation never became durable (its header is missing or zero and it
    /// holds nothing else): the caller deletes it.
    Unborn,
}

impl Segment {
    /// Creates the segment starting at `first_index`: header written, blocks reserved, file
    /// synced (invariant 3). The caller syncs the directory.
    pub(crate) fn create(dir: &Path, first_index: u64, segment_bytes: u64) -> Result<Segment> {
        let path = dir.join(file_name(first_index));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io(&path, "creating a segment"))?;
        let made = (|| {
            preallocate(&file, &path, segment_bytes)?;
            file.write_all_at(&header(first_index), 0)
                .map_err(io(&path, "writing a segment header"))?;
            file.sync_data()
                .map_err(io(&path, "fdatasync of a new segment"))
        })();
        if let Err(error) = made {
            // Best effort: a half-made segment would only be found and deleted at the next open.
            let _ = std::fs::remove_file(&path);
            return Err(error);
        }
        Ok(Segment {
            path,
            file,
            first_index,
            offsets: Vec::new(),
            end: SEGMENT_HEADER_BYTES,
            capacity: segment_bytes,
        })
    }

    /// Opens a segment and scans its records. `last` marks the newest segment, the only one an
    /// append can have torn: its tail is checked and cut (see the crate docs for the rule);
    /// in any other segment a damaged record is an error.
    pub(crate) fn open(
        path: &Path,
        name_index: u64,
        last: bool,
        segment_bytes: u64,
    ) -> Result<Opened> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io(path, "opening a segment"))?;
        let data = std::fs::read(path).map_err(io(path, "reading a segment"))?;
        let first_index = match parse_header(&data) {
            Ok(index) => index,
            Err(_) if last && data.iter().all(|&byte| byte == 0) => return Ok(Opened::Unborn),
            Err(damage) => {
                return Err(SegmentLogError::BadSegmentHeader {
                    path: path.to_path_buf(),
                    damage,
                });
            }
        };
        if first_index != name_index {
            return Err(SegmentLogError::BadSegmentHeader {
                path: path.to_path_buf(),
                damage: Damage::NameMismatch {
                    name_index,
                    header_index: first_index,
                },
            });
        }
        let mut offsets = Vec::new();
        let mut at = SEGMENT_HEADER_BYTES as usize;
        let damage = loop {
            let expected = first_index + offsets.len() as u64;
            match record::parse(&data[at..], expected) {
                Parsed::Record { bytes } => {
                    offsets.push(at as u64);
                    at += bytes as usize;
                }
                Parsed::End => break None,
                Parsed::Damaged(damage) => break Some(damage),
            }
        };
        let corrupt = |damage| SegmentLogError::Corrupt {
            path: path.to_path_buf(),
            offset: at as u64,
            damage,
        };
        let next_index = first_index + offsets.len() as u64;
        if last {
            // Valid records after the stop mean the damage is in the middle: refuse.
            if record::find_valid_after(&data[at..], next_index).is_some() {
                return Err(corrupt(damage.unwrap_or(Damage::Zeroed)));
            }
        } else if let Some(damage) = damage {
            return Err(corrupt(damage));
        }
        let file_bytes = data.len() as u64;
        let mut segment = Segment {
            path: path.to_path_buf(),
            file,
            first_index,
            offsets,
            end: at as u64,
            capacity: file_bytes,
        };
        let mut torn = None;
        if last {
            let dirty_bytes = data[at..].iter().filter(|&&byte| byte != 0).count() as u64;
            if dirty_bytes > 0 {
                torn = Some(TornTail {
                    path: path.to_path_buf(),
                    offset: at as u64,
                    bytes: dirty_bytes,
                    damage: damage.unwrap_or(Damage::Zeroed),
                });
            }
            let capacity = file_bytes.max(segment_bytes);
            if torn.is_some() || capacity != file_bytes {
                segment.capacity = capacity;
                segment.cut_to(segment.offsets.len())?;
            }
        }
        Ok(Opened::Segment(segment, torn))
    }

    /// The index the next record here would carry.
    pub(crate) fn next_index(&self) -> u64 {
        self.first_index + self.offsets.len() as u64
    }

    /// Bytes left for records.
    pub(crate) fn room(&self) -> u64 {
        self.capacity - self.end
    }

    /// Writes encoded records (not synced). `sizes` are their sizes, in order.
    pub(crate) fn write(&mut self, bytes: &[u8], sizes: &[u64]) -> Result<()> {
        self.file
            .write_all_at(bytes, self.end)
            .map_err(io(&self.path, "writing records"))?;
        for size in sizes {
            self.offsets.push(self.end);
            self.end += size;
        }
        Ok(())
    }

    /// fdatasync: the written records, and any length change, are durable on return.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(io(&self.path, "fdatasync of appended records"))
    }

    /// Keeps the first `records` records and zeroes everything after them (invariant 2): the
    /// file is shrunk to the end of the kept records, preallocated again, and synced.
    pub(crate) fn cut_to(&mut self, records: usize) -> Result<()> {
        let end = self
            .offsets
            .get(records)
            .copied()
            .unwrap_or(self.end)
            .min(self.end);
        self.file
            .set_len(end)
            .map_err(io(&self.path, "cutting a segment"))?;
        preallocate(&self.file, &self.path, self.capacity)?;
        self.file
            .sync_data()
            .map_err(io(&self.path, "fdatasync of a cut segment"))?;
        self.offsets.truncate(records);
        self.end = end;
        Ok(())
    }

    /// The records holding indexes `from..=to` (both within this segment), checked again
    /// against their CRCs (the disk may have changed since the scan at open).
    pub(crate) fn read(&self, from: u64, to: u64, out: &mut Vec<(u64, Vec<u8>)>) -> Result<()> {
        let first = (from - self.first_index) as usize;
        let last = (to - self.first_index) as usize;
        let start = self.offsets[first];
        let stop = self.offsets.get(last + 1).copied().unwrap_or(self.end);
        let mut bytes = vec![0u8; (stop - start) as usize];
        self.file
            .read_exact_at(&mut bytes, start)
            .map_err(io(&self.path, "reading records"))?;
        let mut at = 0usize;
        for index in from..=to {
            match record::parse(&bytes[at..], index) {
                Parsed::Record { bytes: size } => {
                    let payload =
                        &bytes[at + record::RECORD_HEADER_BYTES as usize..at + size as usize];
                    out.push((index, payload.to_vec()));
                    at += size as usize;
                }
                Parsed::End => {
                    return Err(SegmentLogError::Corrupt {
                        path: self.path.clone(),
                        offset: start + at as u64,
                        damage: Damage::Zeroed,
                    });
                }
                Parsed::Damaged(damage) => {
                    return Err(SegmentLogError::Corrupt {
                        path: self.path.clone(),
                        offset: start + at as u64,
                        damage,
                    });
                }
            }
        }
        Ok(())
    }
}
