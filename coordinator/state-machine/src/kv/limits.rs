//! The key space's bounds ([`KvLimits`]) and its refusals ([`KvError`]).
//!
//! Like the machine's [`crate::Limits`], the bounds are replicated state: a bound decides a
//! reply, so every replica must apply the same ones. They travel inside the key space's
//! snapshot bytes, and change only through a `Command::Configure` entry (`kv`), which every
//! replica applies at the same position. A lowered bound takes nothing already stored back
//! (it bounds the writes that come after), except the history's: lowering one compacts the
//! history at once ([`super::KeySpace::configure`]).

use hivekeeper_protocol::kv::KEY_BYTES_MAX;
use hivekeeper_protocol::validate::REQUEST_BYTES_MAX;
use serde::{Deserialize, Serialize};

use crate::LeaseId;

/// Every bound the key space enforces. Units are in the names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvLimits {
    /// Most keys alive at once: 1,000,000, the size the service is measured at (1M keys of
    /// 32-byte names and 100-byte values in at most 400 MB per member).
    pub keys_max: u32,
    /// Most bytes of keys plus values alive at once: 256 MiB, twice what those 1M keys take,
    /// so a few large values cannot push a member out of memory.
    pub bytes_max: u64,
    /// Most keys bound to one lease: 1,024. A presence entry is one key per lease; the bound
    /// keeps the entry that ends a lease (which deletes its keys) small.
    pub keys_per_lease_max: u32,
    /// Longest key in bytes of UTF-8: 512, the wire contract.
    pub key_bytes_max: u32,
    /// Longest value in bytes of UTF-8: 8 KiB. A value travels as a JSON string, which can
    /// escape a byte into six (`\u0000`), so even the worst value stays inside the default
    /// 64 KiB MQTT packet.
    pub value_bytes_max: u32,
    /// Most events the history keeps: 10,000. Past it the oldest whole revisions are dropped
    /// (compacted) and a watcher behind them re-reads.
    pub history_events_max: u32,
    /// Most bytes (keys plus values) the history's events keep: 16 MiB, a bound on the
    /// history's memory and on its share of every snapshot.
    pub history_bytes_max: u64,
}

/// The defaults, each explained on its field.
pub const KV_LIMITS_DEFAULT: KvLimits = KvLimits {
    keys_max: 1_000_000,
    bytes_max: 256 << 20,
    keys_per_lease_max: 1_024,
    key_bytes_max: 512,
    value_bytes_max: 8 << 10,
    history_events_max: 10_000,
    history_bytes_max: 16 << 20,
};

impl Default for KvLimits {
    fn default() -> Self {
        KV_LIMITS_DEFAULT
    }
}

/// The longest `value_bytes_max` accepted: a put's value travels inside one request, which the
/// wire refuses past [`REQUEST_BYTES_MAX`] bytes, so a larger bound could never be reached.
pub const VALUE_BYTES_MAX_CEILING: u32 = REQUEST_BYTES_MAX as u32;

/// The longest `key_bytes_max` accepted: keys are 1 to [`KEY_BYTES_MAX`] bytes on the wire.
pub const KEY_BYTES_MAX_CEILING: u32 = KEY_BYTES_MAX as u32;

impl KvLimits {
    /// The rules every bound keeps: each is at least 1 (a bound of 0 would refuse every write
    /// it bounds, or leave no history to watch), and the key and value lengths stay within
    /// what the wire can carry.
    pub fn validate(&self) -> Result<(), KvLimitsError> {
        for (limit, value) in [
            ("keys_max", u64::from(self.keys_max)),
            ("bytes_max", self.bytes_max),
            ("keys_per_lease_max", u64::from(self.keys_per_lease_max)),
            ("key_bytes_max", u64::from(self.key_bytes_max)),
            ("value_bytes_max", u64::from(self.value_bytes_max)),
            ("history_events_max", u64::from(self.history_events_max)),
            ("history_bytes_max", self.history_bytes_max),
        ] {
            if value == 0 {
                return Err(KvLimitsError::Zero { limit });
            }
        }
        for (limit, value, max, why) in [
            (
                "key_bytes_max",
                self.key_bytes_max,
                KEY_BYTES_MAX_CEILING,
                "the wire contract's longest key",
            ),
            (
                "value_bytes_max",
                self.value_bytes_max,
                VALUE_BYTES_MAX_CEILING,
                "a value travels inside one request, whose MQTT payload is at most this",
            ),
        ] {
            if value > max {
                return Err(KvLimitsError::AboveCeiling {
                    limit,
                    value,
                    max,
                    why,
                });
            }
        }
        Ok(())
    }
}

/// Key-space bounds that break a rule of [`KvLimits::validate`]; the text names the bound, its
/// value and the accepted range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvLimitsError {
    /// A bound is 0, so the key space would refuse everything it bounds.
    #[error("kv.{limit} must be at least 1")]
    Zero {
        /// The bound's field name, e.g. `history_events_max`.
        limit: &'static str,
    },
    /// A length bound past what the wire can carry.
    #[error("kv.{limit} = {value} is outside 1..={max} ({max}: {why})")]
    AboveCeiling {
        /// The bound's field name, `key_bytes_max` or `value_bytes_max`.
        limit: &'static str,
        /// The value given.
        value: u32,
        /// The largest value accepted.
        max: u32,
        /// Where the ceiling comes from.
        why: &'static str,
    },
}

/// A refused key-space call: the state is unchanged. The machine answers each with a
/// `Reply::Refused`; [`KvError::RevisionNotIncreasing`] alone is a bug in the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// A key must be 1 to `key_bytes_max` bytes.
    #[error("key is {len} bytes, it must be 1 to {max}")]
    KeyLength {
        /// The key's length in bytes.
        len: usize,
        /// The longest allowed.
        max: u32,
    },
    /// A prefix is at most [`KEY_BYTES_MAX_CEILING`] bytes (the empty prefix is every key).
    #[error("prefix is {len} bytes, it must be at most {max}")]
    PrefixLength {
        /// The prefix's length in bytes.
        len: usize,
        /// The longest allowed.
        max: u32,
    },
    /// A value is at most `value_bytes_max` bytes.
    #[error("value is {len} bytes, it must be at most {max}")]
    ValueLength {
        /// The value's length in bytes.
        len: usize,
        /// The longest allowed.
        max: u32,
    },
    /// Keys starting with `$` belong to the service; a client may read them only.
    #[error("key {key:?} is reserved for the service (it starts with `$`): read-only")]
    Reserved {
        /// The key or prefix written.
        key: String,
    },
    /// The put would create a key past `keys_max`.
    #[error("{max} keys exist, the limit")]
    KeysFull {
        /// The limit.
        max: u32,
    },
    /// The put would take the keys and values past `bytes_max`.
    #[error("the keys and values would take {bytes} bytes, past the limit of {max}")]
    BytesFull {
        /// What they would take.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// The put would bind more than `keys_per_lease_max` keys to one lease.
    #[error("lease {lease} has {max} keys, the limit")]
    LeaseKeysFull {
        /// The lease.
        lease: LeaseId,
        /// The limit.
        max: u32,
    },
    /// A txn's delete or get names neither or both of `key` and `prefix`.
    #[error("a txn op must give exactly one of `key` and `prefix`")]
    Selector,
    /// A lease named by a put or a compare is not a lease id (16 hex digits).
    #[error("lease {lease:?} is not a lease id")]
    LeaseId {
        /// What was named.
        lease: String,
    },
    /// A txn has more than [`super::TXN_COMPARES_MAX`] compares.
    #[error("txn has {count} compares, at most {max} are allowed")]
    TxnCompares {
        /// How many it has.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A txn branch has more than [`super::TXN_OPS_MAX`] ops.
    #[error("txn branch has {count} ops, at most {max} are allowed")]
    TxnOps {
        /// How many the larger branch has.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The results of a txn's branch (its gets' keys) would pass one answer's bound: the txn
    /// is refused whole, nothing written, rather than committed with an answer that cannot be
    /// delivered (and that the retry memory would keep).
    #[error(
        "txn results would be {bytes} bytes of JSON, more than one answer carries ({max}): read \
         fewer keys in one txn (page a prefix with `limit`, or use kv.get)"
    )]
    TxnResultsTooLarge {
        /// The results' size.
        bytes: usize,
        /// [`hivekeeper_protocol::kv::ANSWER_BYTES_MAX`].
        max: usize,
    },
    /// Two writes of one txn branch touch the same key (two puts, or a put and a delete that
    /// covers it): one revision has one event per key, as in etcd.
    #[error("txn writes key {key:?} twice in one branch")]
    TxnDuplicateKey {
        /// The key written twice.
        key: String,
    },
    /// A mutating call's revision is not after the last one: the caller passed an old log
    /// index, a bug rather than a refusal.
    #[error("revision {got} is not after the key space's revision {last}")]
    RevisionNotIncreasing {
        /// The key space's last revision.
        last: u64,
        /// The revision offered.
        got: u64,
    },
}
