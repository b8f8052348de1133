//! The log's one setting, the segment size, with its default and its bounds.

use crate::error::{Result, SegmentLogError};
use crate::record::RECORD_HEADER_BYTES;
use crate::segment::SEGMENT_HEADER_BYTES;

/// How a segment log lays out its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentLogConfig {
    /// Size of each segment file, preallocated when the segment is created. Larger segments
    /// mean fewer files and fewer preallocations; purging frees space only a whole segment at a
    /// time, so a log purged behind snapshots keeps up to one segment of old entries.
    pub segment_bytes: u64,
}

/// The defaults: 64 MiB segments (about 300,000 entries of 200 bytes).
pub const DEFAULTS: SegmentLogConfig = SegmentLogConfig {
    segment_bytes: 64 * 1024 * 1024,
};

/// The smallest segment: a header and one record of a few bytes (tests use small segments to
/// cross segment boundaries often).
pub const SEGMENT_BYTES_MIN: u64 = 256;

/// The largest segment: record offsets and lengths stay far from `u32` limits.
pub const SEGMENT_BYTES_MAX: u64 = 1024 * 1024 * 1024;

impl Default for SegmentLogConfig {
    fn default() -> Self {
        DEFAULTS
    }
}

impl SegmentLogConfig {
    /// Checks the values' ranges.
    pub fn validate(&self) -> Result<()> {
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return Err(SegmentLogError::Config {
                field: "segment_bytes",
                value: self.segment_bytes,
                reason: "must be between 256 bytes and 1 GiB",
            });
        }
        Ok(())
    }

    /// The largest payload one record can carry in a segment of this size.
    pub fn payload_bytes_max(&self) -> u64 {
        self.segment_bytes - SEGMENT_HEADER_BYTES - RECORD_HEADER_BYTES
    }
}
