//! One record: a 16-byte header and the entry's bytes.
//!
//! ```text
//!  offset  0        4        8                16
//!          ┌────────┬────────┬────────────────┬──────────────────────┐
//!          │ len u32│ crc u32│ index u64      │ payload (len bytes)  │
//!          └────────┴────────┴────────────────┴──────────────────────┘
//!  little-endian; crc = CRC-32C over len, index and payload (every byte but the crc itself)
//! ```
//!
//! The CRC covers the length and the index too, so a flipped length bit cannot make a record
//! swallow its neighbours unnoticed, and a stale record at the right offset but with another
//! index is caught by the index check. A header of sixteen zero bytes is never a record (its CRC
//! would have to be zero, and CRC-32C of twelve zero bytes is not; a unit test pins it), so it
//! marks the end of the written part of a preallocated segment.

use crate::error::Damage;

/// Bytes before a record's payload.
pub const RECORD_HEADER_BYTES: u64 = 16;

/// [`RECORD_HEADER_BYTES`] as a `usize`, for slicing.
const HEADER: usize = 16;

/// The CRC-32C of a record: its length, index and payload.
fn checksum(payload_len: u32, index: u64, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&payload_len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &index.to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

/// Appends one framed record to `out`. The caller has checked that the payload fits a segment,
/// so its length fits a `u32`.
pub(crate) fn encode(index: u64, payload: &[u8], out: &mut Vec<u8>) {
    let payload_len = u32::try_from(payload.len())
        .expect("payloads are checked against the segment size (at most 1 GiB) before encoding");
    out.extend_from_slice(&payload_len.to_le_bytes());
    out.extend_from_slice(&checksum(payload_len, index, payload).to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(payload);
}

/// The size of a record carrying `payload_bytes`.
pub(crate) fn record_bytes(payload_bytes: u64) -> u64 {
    RECORD_HEADER_BYTES + payload_bytes
}

/// What the bytes at a record position hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A whole, valid record with the expected index, `bytes` long in all.
    Record {
        /// Header plus payload.
        bytes: u64,
    },
    /// Zeros: nothing was written here (the rest of a preallocated segment, or a file end).
    End,
    /// Something that is not a valid record.
    Damaged(Damage),
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Parses the record at the start of `bytes` (which run to the end of the segment file), which
/// should carry `expected_index`.
pub(crate) fn parse(bytes: &[u8], expected_index: u64) -> Parsed {
    if bytes.len() < HEADER {
        if bytes.iter().all(|&byte| byte == 0) {
            return Parsed::End;
        }
        return Parsed::Damaged(Damage::Cut {
            need_bytes: RECORD_HEADER_BYTES,
            have_bytes: bytes.len() as u64,
        });
    }
    if bytes[..HEADER].iter().all(|&byte| byte == 0) {
        return Parsed::End;
    }
    let payload_len = u32_at(bytes, 0);
    let stored = u32_at(bytes, 4);
    let index = u64_at(bytes, 8);
    let need = HEADER as u64 + u64::from(payload_len);
    if need > bytes.len() as u64 {
        return Parsed::Damaged(Damage::Cut {
            need_bytes: need,
            have_bytes: bytes.len() as u64,
        });
    }
    let payload = &bytes[HEADER..HEADER + payload_len as usize];
    let computed = checksum(payload_len, index, payload);
    if computed != stored {
        return Parsed::Damaged(Damage::Crc { stored, computed });
    }
    if index != expected_index {
        return Parsed::Damaged(Damage::Index {
            expected: expected_index,
            found: index,
        });
    }
    Parsed::Record { bytes: need }
}

/// Where in `bytes`, after position 0, a valid record with an index from `index_min` on starts,
/// if anywhere. Recovery asks this about the bytes after a damaged record: if one is found, the
/// damage is in the middle of the log, not a torn tail. Every byte offset is tried (records are
/// not aligned); zeros are skipped cheaply, and a candidate's CRC is computed only when its
/// length fits and its index is plausible.
pub(crate) fn find_valid_after(bytes: &[u8], index_min: u64) -> Option<u64> {
    let mut at = 1usize;
    while at + HEADER <= bytes.len() {
        if bytes[at..at + HEADER].iter().all(|&byte| byte == 0) {
            // A record's header has a non-zero byte, so the next candidate starts at most 15
            // bytes before the next non-zero byte.
            match bytes[at..].iter().position(|&byte| byte != 0) {
                None => return None,
                Some(non_zero) => {
                    at = (at + non_zero).saturating_sub(HEADER - 1).max(at + 1);
                    continue;
                }
            }
        }
        let candidate = &bytes[at..];
        let index = u64_at(candidate, 8);
        // An index past the number of records that could fit before this point is implausible.
        let records_possible = (at / HEADER) as u64 + 1;
        if index >= index_min
            && index - index_min <= records_possible
            && matches!(parse(candidate, index), Parsed::Record { .. })
        {
            return Some(at as u64);
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end-of-data rule relies on this: an all-zero header never passes the CRC check.
    #[test]
    fn a_zero_header_is_never_a_valid_record() {
        assert_ne!(checksum(0, 0, &[]), 0);
    }

    #[test]
    fn a_record_round_trips_and_each_damage_is_named() {
        let mut bytes = Vec::new();
        encode(7, b"hello", &mut bytes);
        assert_eq!(bytes.len(), 21);
        assert_eq!(parse(&bytes, 7), Parsed::Record { bytes: 21 });
        assert_eq!(
            parse(&bytes, 8),
            Parsed::Damaged(Damage::Index {
                expected: 8,
                found: 7
            })
        );
        assert_eq!(
            parse(&bytes[..20], 7),
            Parsed::Damaged(Damage::Cut {
                need_bytes: 21,
                have_bytes: 20
            })
        );
        assert_eq!(
            parse(&bytes[..5], 7),
            Parsed::Damaged(Damage::Cut {
                need_bytes: 16,
                have_bytes: 5
            })
        );
        let mut flipped = bytes.clone();
        flipped[17] ^= 1;
        assert!(matches!(
            parse(&flipped, 7),
            Parsed::Damaged(Damage::Crc { .. })
        ));
        assert_eq!(parse(&[0u8; 40], 7), Parsed::End);
        assert_eq!(parse(&[0u8; 3], 7), Parsed::End);
    }

    #[test]
    fn a_valid_record_after_damage_is_found_at_its_offset() {
        let mut bytes = Vec::new();
        encode(3, b"first", &mut bytes);
        let second = bytes.len();
        encode(4, b"second", &mut bytes);
        bytes.extend_from_slice(&[0u8; 64]);
        bytes[2] ^= 0xff;
        assert_eq!(find_valid_after(&bytes, 3), Some(second as u64));
        assert_eq!(find_valid_after(&bytes[second..], 5), None);
    }
}
