//! The backup file `hivekeeper snapshot save` writes and `hivekeeper snapshot restore` reads:
//! a fixed header, then the state's bytes.
//!
//! | offset | bytes | field                                                             |
//! |--------|-------|-------------------------------------------------------------------|
//! | 0      | 8     | magic, `HKBACKUP`                                                 |
//! | 8      | 4     | file format version, u32 little-endian ([`FILE_FORMAT`])           |
//! | 12     | 8     | log index the state was taken at, u64 LE                          |
//! | 20     | 8     | term of the entry at that index, u64 LE                           |
//! | 28     | 8     | length of the state, bytes, u64 LE                                |
//! | 36     | 32    | BLAKE2b-256 of bytes 0..36 followed by the state                  |
//! | 68     | n     | the state: `StateMachine::snapshot()` (JSON with its own format)  |
//!
//! Why a header of our own around the machine's bytes: the state alone does not say which log
//! position it is (a restore needs the index and the term), and a checksum over everything
//! tells a damaged or truncated file from a good one before anything is seeded from it. The
//! checksum covers the header's fields too, so a flipped bit in the index is caught as well.
//!
//! Invariants:
//! 1. `decode(encode(f)) == f` for every file.
//! 2. `decode` never panics: a short, foreign, newer, truncated, padded or damaged file is a
//!    [`FileError`] naming what is wrong, checked in that order.

use blake2::Digest;

use super::Blake2b256;

/// The first 8 bytes of every backup file.
pub const MAGIC: [u8; 8] = *b"HKBACKUP";

/// The version of the layout above. A reader refuses any other.
pub const FILE_FORMAT: u32 = 1;

/// Bytes before the state: magic, version, index, term, length, checksum.
pub const HEADER_BYTES: usize = 8 + 4 + 8 + 8 + 8 + 32;

/// Where the checksum starts: everything before it is what it covers, with the state.
const CHECKSUM_AT: usize = HEADER_BYTES - 32;

/// A backup: the state at one log position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupFile {
    /// The log index the state was taken at.
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
    /// `StateMachine::snapshot()` bytes of the state at `index`.
    pub state: Vec<u8>,
}

/// Why bytes are not a backup file this build can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// Fewer bytes than the header.
    #[error(
        "the file is {bytes} bytes, shorter than the {HEADER_BYTES}-byte header of a Hivekeeper \
         backup: it is truncated, or not a backup"
    )]
    TooShort {
        /// The file's length.
        bytes: usize,
    },
    /// The first 8 bytes are not [`MAGIC`].
    #[error(
        "the file does not start with HKBACKUP (it starts with {found}): not a Hivekeeper backup"
    )]
    Magic {
        /// The first bytes, escaped for printing.
        found: String,
    },
    /// Another version of the layout.
    #[error(
        "the file has backup format {found}; this build reads format {FILE_FORMAT} only (restore \
         it with the version of hivekeeper that saved it)"
    )]
    Version {
        /// The version in the file.
        found: u32,
    },
    /// The header's length of the state is not what follows it.
    #[error(
        "the header says {declared} bytes of state follow it, but {found} do: the file is \
         {}",
        if found < declared { "truncated" } else { "longer than it should be" }
    )]
    Length {
        /// The length in the header.
        declared: u64,
        /// The bytes after the header.
        found: u64,
    },
    /// The checksum does not match the content.
    #[error(
        "checksum mismatch: the header says BLAKE2b-256 {expected}, the content hashes to \
         {found}: the file is damaged"
    )]
    Checksum {
        /// The checksum in the file, hex.
        expected: String,
        /// The checksum of what is there, hex.
        found: String,
    },
}

impl BackupFile {
    /// The file's bytes: header, then state.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_BYTES + self.state.len());
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&FILE_FORMAT.to_le_bytes());
        bytes.extend_from_slice(&self.index.to_le_bytes());
        bytes.extend_from_slice(&self.term.to_le_bytes());
        bytes.extend_from_slice(&(self.state.len() as u64).to_le_bytes());
        let checksum = checksum(&bytes, &self.state);
        bytes.extend_from_slice(&checksum);
        bytes.extend_from_slice(&self.state);
        bytes
    }

    /// Reads a file written by [`BackupFile::encode`], checking it (invariant 2).
    pub fn decode(bytes: &[u8]) -> Result<BackupFile, FileError> {
        if bytes.len() < HEADER_BYTES {
            // A file too short for a header may still be foreign: say so when its start shows.
            if bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] != MAGIC {
                return Err(FileError::Magic {
                    found: escaped(&bytes[..MAGIC.len()]),
                });
            }
            return Err(FileError::TooShort { bytes: bytes.len() });
        }
        let (header, state) = bytes.split_at(HEADER_BYTES);
        if header[..8] != MAGIC {
            return Err(FileError::Magic {
                found: escaped(&header[..8]),
            });
        }
        let version = u32::from_le_bytes(field(header, 8));
        if version != FILE_FORMAT {
            return Err(FileError::Version { found: version });
        }
        let index = u64::from_le_bytes(field(header, 12));
        let term = u64::from_le_bytes(field(header, 20));
        let declared = u64::from_le_bytes(field(header, 28));
        let found = state.len() as u64;
        if declared != found {
            return Err(FileError::Length { declared, found });
        }
        let expected: [u8; 32] = field(header, CHECKSUM_AT);
        let computed = checksum(&header[..CHECKSUM_AT], state);
        if expected != computed {
            return Err(FileError::Checksum {
                expected: super::hex(&expected),
                found: super::hex(&computed),
            });
        }
        Ok(BackupFile {
            index,
            term,
            state: state.to_vec(),
        })
    }
}

/// `N` bytes of `header` from `at`; the caller checked the header's length.
fn field<const N: usize>(header: &[u8], at: usize) -> [u8; N] {
    header[at..at + N]
        .try_into()
        .expect("the header is HEADER_BYTES long, and every field lies inside it")
}

/// BLAKE2b-256 of the header's fields followed by the state.
fn checksum(fields: &[u8], state: &[u8]) -> [u8; 32] {
    let mut hasher = Blake2b256::new();
    hasher.update(fields);
    hasher.update(state);
    hasher.finalize().into()
}

/// Bytes as printable text: ASCII as is, anything else as `\xNN`.
fn escaped(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BackupFile {
        BackupFile {
            index: 120,
            term: 3,
            state: br#"{"format":1,"state":{}}"#.to_vec(),
        }
    }

    #[test]
    fn a_file_reads_back_as_written() {
        let file = sample();
        let bytes = file.encode();
        assert_eq!(bytes.len(), HEADER_BYTES + file.state.len());
        assert_eq!(&bytes[..8], b"HKBACKUP");
        assert_eq!(&bytes[8..12], &[1, 0, 0, 0]);
        assert_eq!(&bytes[12..20], &120u64.to_le_bytes());
        assert_eq!(BackupFile::decode(&bytes), Ok(file));
    }

    #[test]
    fn a_truncated_file_is_named_truncated() {
        let bytes = sample().encode();
        assert_eq!(
            BackupFile::decode(&bytes[..bytes.len() - 1]),
            Err(FileError::Length {
                declared: 23,
                found: 22
            })
        );
        let error = BackupFile::decode(&bytes[..bytes.len() - 1]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the header says 23 bytes of state follow it, but 22 do: the file is truncated"
        );
        assert_eq!(
            BackupFile::decode(&bytes[..40]),
            Err(FileError::TooShort { bytes: 40 })
        );
        assert_eq!(
            BackupFile::decode(&[]).unwrap_err().to_string(),
            "the file is 0 bytes, shorter than the 68-byte header of a Hivekeeper backup: it is \
             truncated, or not a backup"
        );
        let mut longer = bytes.clone();
        longer.push(b'\n');
        assert_eq!(
            BackupFile::decode(&longer).unwrap_err().to_string(),
            "the header says 23 bytes of state follow it, but 24 do: the file is longer than it \
             should be"
        );
    }

    #[test]
    fn a_foreign_file_is_named_by_its_magic() {
        let mut bytes = sample().encode();
        bytes[..8].copy_from_slice(b"redb\x1a\x0a\xa9\x0d");
        assert_eq!(
            BackupFile::decode(&bytes).unwrap_err().to_string(),
            "the file does not start with HKBACKUP (it starts with redb\\x1a\\n\\xa9\\r): not a \
             Hivekeeper backup"
        );
        // Even when it is shorter than a header.
        assert_eq!(
            BackupFile::decode(b"{\"format\":1}"),
            Err(FileError::Magic {
                found: "{\\\"format".into()
            })
        );
    }

    #[test]
    fn a_damaged_file_fails_its_checksum() {
        let good = sample().encode();
        // A flipped bit in the state, and one in the header's index: both are covered.
        for at in [HEADER_BYTES + 5, 12] {
            let mut bytes = good.clone();
            bytes[at] ^= 0x01;
            match BackupFile::decode(&bytes) {
                Err(FileError::Checksum { expected, found }) => {
                    assert_eq!(
                        expected,
                        super::super::hex(&good[CHECKSUM_AT..HEADER_BYTES])
                    );
                    assert_ne!(expected, found);
                    assert_eq!(found.len(), 64);
                }
                other => panic!("a flipped bit at {at} decoded as {other:?}"),
            }
        }
    }

    #[test]
    fn another_version_is_refused_by_number() {
        let mut bytes = sample().encode();
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            BackupFile::decode(&bytes).unwrap_err().to_string(),
            "the file has backup format 2; this build reads format 1 only (restore it with the \
             version of hivekeeper that saved it)"
        );
    }
}
