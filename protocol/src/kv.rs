//! Keys on the wire: what `kv.put`, `kv.get`, `kv.delete` and `kv.txn` carry and answer, and
//! the events a watch reads. Declared once here; the state machine's key space stores and
//! answers these same types.
//!
//! The JSON forms, pinned by `tests/golden.rs` and documented in docs/PROTOCOL.md §8:
//!
//! ```text
//!  key      {"key", "value", "create_revision", "mod_revision", "version", "lease"?}
//!  compare  {"key": "a", "target": "value"|"version"|"create_revision"|"mod_revision"|"lease",
//!            "op": "=="|"!="|"<"|">", "value": ...}
//!           {"holder": {"kind": "lock", "name": "gw"}, "token": 42}
//!  txn op   {"put": {"key", "value", "lease"?, "prev_kv"?}}
//!           {"delete": {"key"} | {"prefix"}}
//!           {"get": {"key"} | {"prefix", "after"?, "limit"?}}
//!  result   {"put": {"prev_kv"?}} | {"delete": {"deleted"}} | {"get": {"kvs", "next_after"?}}
//! ```
//!
//! A txn op is externally tagged by its verb, as etcd's `RequestOp` is a one-of of
//! `request_put`, `request_delete_range` and `request_range`. Lease ids are their 16-hex-digit
//! string form, as in every other op.

use serde::{Deserialize, Serialize};

use crate::request::ResourceKind;
use crate::validate::{self, InvalidField};

/// Most compares in one txn, as etcd's default: a txn is one log entry, so it is bounded.
pub const TXN_COMPARES_MAX: usize = 64;

/// Most ops in each branch (success, failure) of one txn.
pub const TXN_OPS_MAX: usize = 64;

/// Longest key or prefix, in bytes of UTF-8: the wire contract.
pub const KEY_BYTES_MAX: usize = 512;

/// Most keys in one `kv.get` page, and the default `limit`: a page of small keys fits one
/// MQTT packet; an answer that would not is `too_large` and is re-asked with a lower `limit`.
pub const KV_PAGE_MAX: u32 = 1_000;

/// Most events one `watch.poll` answer carries (one revision's events come whole, even past
/// it).
pub const WATCH_EVENTS_MAX: u32 = 1_000;

/// Most bytes of JSON the keys of one `kv.get` page, or the events of one `watch.poll` answer,
/// take: 48 KiB, so that the answer fits the default 64 KiB MQTT packet. A page stops before
/// the key that would pass it (it always holds one: the longest key and value, escaped, fit
/// the packet). A watch answer stops before the revision that would pass it, and a revision
/// whose events alone pass it comes in fragments (see [`WatchPage::next_key`]).
pub const ANSWER_BYTES_MAX: usize = 48 * 1024;

/// The length of `value` as compact JSON, without building the text: what it adds to an
/// answer, for [`ANSWER_BYTES_MAX`].
pub fn json_len<T: Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("plain data always serializes");
    count.0
}

/// Most `watch.poll`s one agent may have pending on one member; one more is refused
/// `resource_exhausted` (a client needs one per watched selector).
pub const WATCH_POLLS_PER_AGENT_MAX: usize = 64;

/// `watch.poll`'s `max_events` when absent.
pub const WATCH_EVENTS_DEFAULT: u32 = 100;

/// The longest a `watch.poll` waits for an event, ms.
pub const WATCH_WAIT_MS_MAX: u64 = 60_000;

/// `watch.poll`'s `wait_ms` when absent.
pub const WATCH_WAIT_MS_DEFAULT: u64 = 30_000;

/// The first character of the keys reserved for the service: a client may read them only.
pub const RESERVED_PREFIX: char = '$';

/// Where the service mirrors each election's leader: `$election/{name}` holds the leader's
/// value, created at the revision of the leadership's token, modified by each proclaim and
/// deleted when nobody leads (docs/PROTOCOL.md §8.23), so a watch on this prefix follows every
/// election.
pub const ELECTION_KEY_PREFIX: &str = "$election/";

// The mirror key is reserved (clients read it only), and the longest election name fits in a
// key.
const _: () = assert!(ELECTION_KEY_PREFIX.as_bytes()[0] == RESERVED_PREFIX as u8);
const _: () = assert!(ELECTION_KEY_PREFIX.len() + crate::validate::NAME_BYTES_MAX <= KEY_BYTES_MAX);

/// The key that mirrors election `name`'s leader.
pub fn election_key(name: &str) -> String {
    format!("{ELECTION_KEY_PREFIX}{name}")
}

/// One key as it is read and as events carry it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key, 1 to 512 bytes of UTF-8.
    pub key: String,
    /// The value, a string.
    pub value: String,
    /// The revision of the put that created the key (since its last delete).
    pub create_revision: u64,
    /// The revision of the key's last put.
    pub mod_revision: u64,
    /// Puts since creation: 1 after the creating put.
    pub version: u64,
    /// The lease the key is deleted with, if any (its wire id).
    pub lease: Option<String>,
}

/// Which keys an op or a watch names: one key, or every key with a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySelector {
    /// Exactly this key.
    Key(String),
    /// Every key starting with this (the empty prefix: every key).
    Prefix(String),
}

impl KeySelector {
    /// Whether `key` is one the selector names.
    pub fn matches(&self, key: &str) -> bool {
        match self {
            KeySelector::Key(named) => named == key,
            KeySelector::Prefix(prefix) => key.starts_with(prefix.as_str()),
        }
    }

    /// The selector of an op's optional `key` and `prefix`: exactly one must be given.
    pub fn from_fields(
        key: Option<&str>,
        prefix: Option<&str>,
    ) -> Result<KeySelector, InvalidField> {
        match (key, prefix) {
            (Some(key), None) => Ok(KeySelector::Key(key.to_string())),
            (None, Some(prefix)) => Ok(KeySelector::Prefix(prefix.to_string())),
            _ => Err(InvalidField(
                "give exactly one of `key` and `prefix`".to_string(),
            )),
        }
    }
}

/// A put: the key, its new value and lease, and whether to answer the previous key.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Put {
    /// The key.
    pub key: String,
    /// Its new value.
    pub value: String,
    /// The lease to bind it to (replacing any it had), or none: a put without a lease unbinds
    /// the key, as in etcd.
    pub lease: Option<String>,
    /// Answer the key as it was before the put.
    #[serde(default, skip_serializing_if = "is_false")]
    pub prev_kv: bool,
}

/// A txn's delete: one key or every key with a prefix.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delete {
    /// One key; exactly one of `key` and `prefix`.
    pub key: Option<String>,
    /// Every key with this prefix.
    pub prefix: Option<String>,
}

/// A txn's read: one key, or a page of a prefix.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Get {
    /// One key; exactly one of `key` and `prefix`.
    pub key: Option<String>,
    /// Every key with this prefix, a page at a time.
    pub prefix: Option<String>,
    /// For a prefix: only keys after this one (the previous page's `next_after`).
    pub after: Option<String>,
    /// For a prefix: most keys in the page, 1 to [`KV_PAGE_MAX`]; absent: the maximum.
    pub limit: Option<u32>,
}

impl From<KeySelector> for Delete {
    fn from(selector: KeySelector) -> Self {
        match selector {
            KeySelector::Key(key) => Delete {
                key: Some(key),
                prefix: None,
            },
            KeySelector::Prefix(prefix) => Delete {
                key: None,
                prefix: Some(prefix),
            },
        }
    }
}

impl Delete {
    /// The keys it names; exactly one of `key` and `prefix` must be given.
    pub fn selector(&self) -> Result<KeySelector, InvalidField> {
        KeySelector::from_fields(self.key.as_deref(), self.prefix.as_deref())
    }
}

impl Get {
    /// The keys it names; exactly one of `key` and `prefix` must be given.
    pub fn selector(&self) -> Result<KeySelector, InvalidField> {
        KeySelector::from_fields(self.key.as_deref(), self.prefix.as_deref())
    }

    /// A read of `selector`: for a prefix, the page after `after` of at most `limit` keys.
    pub fn new(selector: KeySelector, after: Option<String>, limit: Option<u32>) -> Self {
        let Delete { key, prefix } = selector.into();
        Get {
            key,
            prefix,
            after,
            limit,
        }
    }
}

/// A comparison operator, with its wire spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    /// Equal.
    #[serde(rename = "==")]
    Eq,
    /// Not equal.
    #[serde(rename = "!=")]
    Ne,
    /// The key's is less than the compare's.
    #[serde(rename = "<")]
    Lt,
    /// The key's is greater than the compare's.
    #[serde(rename = ">")]
    Gt,
}

/// The field a key compare reads, with the value it is compared to (on the wire
/// `"target": "version", "value": 3`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "target", content = "value", rename_all = "snake_case")]
pub enum CompareTarget {
    /// The value, in byte order.
    Value(String),
    /// Puts since creation (0: missing).
    Version(u64),
    /// The creating revision (0: missing).
    CreateRevision(u64),
    /// The last put's revision (0: missing).
    ModRevision(u64),
    /// The key's lease id (null: unbound or missing).
    Lease(Option<String>),
}

/// A resource a holder compare names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Its kind.
    pub kind: ResourceKind,
    /// Its name.
    pub name: String,
}

/// One condition of a txn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Compare {
    /// A field of a key against a value.
    Key {
        /// The key read (it may be reserved: reads are allowed).
        key: String,
        /// How the key's field must relate to the value.
        op: CompareOp,
        /// The field and the value.
        #[serde(flatten)]
        target: CompareTarget,
    },
    /// True while `token` holds the resource: a write fenced by a lock, inside the service.
    Holder {
        /// The resource.
        holder: Holder,
        /// The fencing token that must hold it.
        token: u64,
    },
}

/// One op of a txn branch, tagged by its verb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnOp {
    /// A put.
    Put(Put),
    /// A delete of a key or a prefix.
    Delete(Delete),
    /// A read of a key or a page of a prefix.
    Get(Get),
}

/// What a put answers inside a txn.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResult {
    /// The key before the put, when asked for and it existed.
    pub prev_kv: Option<KeyValue>,
}

/// What a delete answers inside a txn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// How many keys it deleted.
    pub deleted: u64,
}

/// One page of keys in byte order, as a txn's get answers it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangePage {
    /// The keys, in byte order.
    pub kvs: Vec<KeyValue>,
    /// The last key of this page when more keys follow: pass it as `after` for the next page.
    pub next_after: Option<String>,
}

/// What one op of the branch that ran answered, tagged by its verb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnResult {
    /// A put's answer.
    Put(PutResult),
    /// A delete's answer.
    Delete(Deleted),
    /// A get's keys (none or one for a key).
    Get(RangePage),
}

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Created or changed.
    Put,
    /// Deleted (by a delete, a txn or the end of its lease).
    Delete,
}

/// One change of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEvent {
    /// The revision of the change.
    pub revision: u64,
    /// Put or delete.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// A put's key as it is after the put; a delete's key as it was before the delete.
    pub kv: KeyValue,
}

/// One page of a watch's events.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchPage {
    /// The matching events, whole revisions in revision order (or one fragment of a revision
    /// too large for one answer, see `next_key`).
    pub events: Vec<KvEvent>,
    /// The `after` of the next call.
    pub next: u64,
    /// Present when the answer is a fragment: the events of revision `next + 1` pass
    /// [`ANSWER_BYTES_MAX`] alone, so they come in several answers, in key order, and this is
    /// the last key sent. The next call passes it back as `after_key` (with `after: next`) and
    /// gets the rest of that revision.
    pub next_key: Option<String>,
    /// When no matching event remains: the revision up to which nothing else matched.
    pub progress: Option<u64>,
}

/// The answer to `kv.put`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPutDone {
    /// The put's revision.
    pub revision: u64,
    /// The key before the put, when `prev_kv` asked for it and it existed.
    pub prev_kv: Option<KeyValue>,
}

/// The answer to `kv.get`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvPage {
    /// The service's revision the read saw: a watch from it misses nothing.
    pub revision: u64,
    /// The keys, in byte order.
    pub kvs: Vec<KeyValue>,
    /// Present when more keys follow: send it as `after` for the next page.
    pub next_after: Option<String>,
}

/// The answer to `kv.delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvDeleted {
    /// The delete's revision.
    pub revision: u64,
    /// How many keys it deleted.
    pub deleted: u64,
}

/// The answer to `kv.txn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvTxnDone {
    /// The txn's revision.
    pub revision: u64,
    /// Whether every compare held (the success branch ran).
    pub succeeded: bool,
    /// One result per op of the branch that ran, in order.
    pub results: Vec<TxnResult>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// A key: 1 to [`KEY_BYTES_MAX`] bytes; `writes` refuses the reserved keys.
pub(crate) fn check_key(field: &str, key: &str, writes: bool) -> Result<(), InvalidField> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(InvalidField(format!(
            "`{field}` is {} bytes, it must be 1 to {KEY_BYTES_MAX}",
            key.len()
        )));
    }
    check_reserved(field, key, writes)
}

/// A prefix: at most [`KEY_BYTES_MAX`] bytes (empty: every key); `writes` refuses one in the
/// reserved keys.
fn check_prefix(prefix: &str, writes: bool) -> Result<(), InvalidField> {
    if prefix.len() > KEY_BYTES_MAX {
        return Err(InvalidField(format!(
            "`prefix` is {} bytes, it must be at most {KEY_BYTES_MAX}",
            prefix.len()
        )));
    }
    check_reserved("prefix", prefix, writes)
}

fn check_reserved(field: &str, key: &str, writes: bool) -> Result<(), InvalidField> {
    if writes && key.starts_with(RESERVED_PREFIX) {
        return Err(InvalidField(format!(
            "`{field}` {key:?} is reserved for the service (it starts with `$`): \
             clients may only read it"
        )));
    }
    Ok(())
}

/// The selector of a `key`/`prefix` pair, each within its bounds.
pub(crate) fn check_selector(
    key: Option<&str>,
    prefix: Option<&str>,
    writes: bool,
) -> Result<KeySelector, InvalidField> {
    let selector = KeySelector::from_fields(key, prefix)?;
    match &selector {
        KeySelector::Key(key) => check_key("key", key, writes)?,
        KeySelector::Prefix(prefix) => check_prefix(prefix, writes)?,
    }
    Ok(selector)
}

/// A page's `after` and `limit`: `after` only with a prefix.
pub(crate) fn check_page(
    selector: &KeySelector,
    after: Option<&str>,
    limit: Option<u32>,
) -> Result<(), InvalidField> {
    if let Some(after) = after {
        if matches!(selector, KeySelector::Key(_)) {
            return Err("`after` pages a `prefix`, not a `key`".into());
        }
        check_key("after", after, false)?;
    }
    if let Some(limit) = limit
        && !(1..=KV_PAGE_MAX).contains(&limit)
    {
        return Err(InvalidField(format!(
            "`limit` is {limit}, it must be from 1 to {KV_PAGE_MAX}"
        )));
    }
    Ok(())
}

/// A txn's shape: its counts, every key, prefix and lease of its compares and both branches.
pub(crate) fn check_txn(
    compare: &[Compare],
    success: &[TxnOp],
    failure: &[TxnOp],
) -> Result<(), InvalidField> {
    if compare.len() > TXN_COMPARES_MAX {
        return Err(InvalidField(format!(
            "`compare` has {} compares, at most {TXN_COMPARES_MAX} are allowed",
            compare.len()
        )));
    }
    for compare in compare {
        match compare {
            Compare::Key { key, target, .. } => {
                check_key("key", key, false)?;
                if let CompareTarget::Lease(Some(lease)) = target {
                    validate::name("lease", lease)?;
                }
            }
            Compare::Holder { holder, .. } => validate::name("name", &holder.name)?,
        }
    }
    for (field, branch) in [("success", success), ("failure", failure)] {
        if branch.len() > TXN_OPS_MAX {
            return Err(InvalidField(format!(
                "`{field}` has {} ops, at most {TXN_OPS_MAX} are allowed",
                branch.len()
            )));
        }
        for op in branch {
            match op {
                TxnOp::Put(put) => {
                    check_key("key", &put.key, true)?;
                    if let Some(lease) = &put.lease {
                        validate::name("lease", lease)?;
                    }
                }
                TxnOp::Delete(delete) => {
                    check_selector(delete.key.as_deref(), delete.prefix.as_deref(), true)?;
                }
                TxnOp::Get(get) => {
                    let selector =
                        check_selector(get.key.as_deref(), get.prefix.as_deref(), false)?;
                    check_page(&selector, get.after.as_deref(), get.limit)?;
                }
            }
        }
    }
    Ok(())
}

/// The checks of a `watch.poll`: one key or a prefix, its bounds, and a fragment's cursor.
pub(crate) fn check_watch(
    key: Option<&str>,
    prefix: Option<&str>,
    after_key: Option<&str>,
    max_events: Option<u32>,
    wait_ms: Option<u64>,
) -> Result<KeySelector, InvalidField> {
    let selector = check_selector(key, prefix, false)?;
    if let Some(after_key) = after_key {
        check_key("after_key", after_key, false)?;
    }
    if let Some(max_events) = max_events
        && !(1..=WATCH_EVENTS_MAX).contains(&max_events)
    {
        return Err(InvalidField(format!(
            "`max_events` is {max_events}, it must be from 1 to {WATCH_EVENTS_MAX}"
        )));
    }
    if let Some(wait_ms) = wait_ms
        && wait_ms > WATCH_WAIT_MS_MAX
    {
        return Err(InvalidField(format!(
            "`wait_ms` is {wait_ms}, it must be at most {WATCH_WAIT_MS_MAX}"
        )));
    }
    Ok(selector)
}
