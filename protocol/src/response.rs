//! Responses: exactly one final answer per request id, on `hk/v1/rsp/{agent}`.
//!
//! Success: `{"id": "...", "ok": true, ...result}`. Failure:
//! `{"id": "...", "ok": false, "error": {"code": "...", "message": "..."}}`, with `"id": null`
//! when the request could not be parsed far enough to read its id.

use serde::{Deserialize, Serialize};

use crate::airspace::ConflictInfo;
use crate::error::ErrorCode;
use crate::kv::{KvDeleted, KvPage, KvPutDone, KvTxnDone, WatchPage};
use crate::request::ResourceKind;
use crate::role::Role;

mod inspect;

pub use inspect::{HolderInfo, Inspection, WaiterInfo};

/// One final response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "WireResponse", try_from = "WireResponse")]
pub struct Response {
    /// The request id this answers; `None` when the request had no readable id.
    pub id: Option<String>,
    /// The result fields, or why the request failed.
    pub outcome: Result<Success, ErrorBody>,
}

/// The `error` object of a failure response.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable reason.
    pub code: ErrorCode,
    /// Human-readable detail.
    pub message: String,
    /// With `compacted`: the oldest revision a watch may resume after.
    pub compact_revision: Option<u64>,
}

impl Default for Success {
    fn default() -> Self {
        Success::Done(Done {})
    }
}

/// A client read a success answer of another shape than its op gets, e.g. no `token` after an
/// acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected {expected}, the service answered {got}")]
pub struct UnexpectedReply {
    /// The shape the client asked for.
    pub expected: &'static str,
    /// The shape that came.
    pub got: &'static str,
}

/// Declares [`Success`] from one list: each variant with its doc, its shape (the answer type)
/// and the shape's name for [`UnexpectedReply`]; and derives `From<shape> for Success`,
/// `TryFrom<Success> for shape` and [`Success::shape`]. The list's order is the untagged
/// decoder's (the most demanding shape first).
macro_rules! reply_shapes {
    (
        $(#[$meta:meta])*
        pub enum Success {
            $($(#[$doc:meta])* $variant:ident($shape:ident) = $name:literal,)*
        }
    ) => {
        $(#[$meta])*
        pub enum Success {
            $($(#[$doc])* $variant($shape),)*
        }

        impl Success {
            /// What this answer is, in words, e.g. "a grant (`token`)".
            pub fn shape(&self) -> &'static str {
                match self {
                    $(Success::$variant(_) => $name,)*
                }
            }
        }
        $(
            impl From<$shape> for Success {
                fn from(reply: $shape) -> Self {
                    Success::$variant(reply)
                }
            }

            impl TryFrom<Success> for $shape {
                type Error = UnexpectedReply;

                fn try_from(success: Success) -> Result<Self, UnexpectedReply> {
                    match success {
                        Success::$variant(reply) => Ok(reply),
                        other => Err(UnexpectedReply {
                            expected: $name,
                            got: other.shape(),
                        }),
                    }
                }
            }
        )*
    };
}

reply_shapes! {
    /// The result of a success response: one shape per kind of answer, its fields sent flat beside
    /// `id` and `ok` (DESIGN.md §3, `docs/PROTOCOL.md`), each shape's fields in the order the wire
    /// carries them.
    ///
    /// Untagged: a decoder picks the first variant whose required fields are all present, so the
    /// variants are ordered from the most demanding to the least (a `lease.grant` answer also has
    /// `lease.keepalive`'s `ttl_ms`; [`Done`], which needs nothing, comes last). No shape denies
    /// unknown fields: a newer service may add fields to an answer, and an older client still reads
    /// the ones it knows. A required field of the wrong type makes its variant not fit, so such an
    /// answer decodes as a less demanding shape (at worst [`Done`]) and shows as an
    /// [`UnexpectedReply`] where it is read, not as a decode error.
    ///
    /// A client that knows which answer its op gets converts with `TryFrom`, e.g.
    /// `Granted::try_from(success)?`, and learns from [`UnexpectedReply`] what came instead.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(untagged)]
    pub enum Success {
        /// `admin.snapshot`.
        Snapshot(SnapshotPage) = "a snapshot page",
        /// `admin.status`.
        Status(StatusReport) = "a node status",
        /// `lease.grant`.
        LeaseGranted(LeaseGranted) = "a new lease",
        /// `fence.check`.
        Fence(FenceStatus) = "a fence check",
        /// `inspect`.
        Inspection(Inspection) = "an inspection",
        /// `admin.leases`.
        Leases(LeasePage) = "a page of leases",
        /// `admin.resources`.
        Resources(ResourcePage) = "a page of resources",
        /// `airspace.query`.
        Conflicts(ConflictPage) = "a page of conflicts",
        /// `admin.agent.list`.
        Accounts(AccountPage) = "a page of accounts",
        /// `admin.agent.add`, `admin.agent.rotate`.
        AccountIssued(AccountIssued) = "an account",
        /// `watch.poll`.
        Watch(WatchPage) = "a page of watch events (`events`)",
        /// `kv.txn`.
        KvTxn(KvTxnDone) = "a txn's outcome (`succeeded`)",
        /// `kv.get`.
        KvPage(KvPage) = "a page of keys (`kvs`)",
        /// `kv.delete`.
        KvDeleted(KvDeleted) = "a delete's count (`deleted`)",
        /// `kv.put`, `election.proclaim`: after the other `kv.*` answers, whose `revision` it
        /// shares.
        KvPut(KvPutDone) = "a put's revision (`revision`)",
        /// `election.leader`: its one field, `leader`, is required even when `null`.
        Leader(LeaderReport) = "an election's leader (`leader`)",
        /// `lock.acquire`, `lock.downgrade`, `lock.acquire_all`, `sem.acquire`,
        /// `waypoint.reserve`, `route.reserve`, `election.campaign`.
        Granted(Granted) = "a grant (`token`)",
        /// `lease.keepalive`.
        LeaseKept(LeaseKept) = "a kept lease (`ttl_ms`)",
        /// `barrier.enter`, `barrier.leave`.
        BarrierPassed(BarrierPassed) = "a barrier's round (`generation`)",
        /// Every op that answers only `ok: true`.
        Done(Done) = "no result fields",
    }
}

/// The answer to `lease.grant`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGranted {
    /// The new lease.
    pub lease: String,
    /// The lease's time to live, milliseconds.
    pub ttl_ms: u64,
}

/// The answer to `lease.keepalive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseKept {
    /// The lease's time to live, milliseconds, counted again from now.
    pub ttl_ms: u64,
}

/// The answer to a grant: `lock.acquire`, `lock.downgrade`, `lock.acquire_all`, `sem.acquire`,
/// `waypoint.reserve`, `route.reserve`, `election.campaign` (the leadership's token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// The grant's fencing token.
    pub token: u64,
}

/// The answer to `election.leader`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderReport {
    /// The leader, `null` when nobody leads. Required on the wire either way (a missing field
    /// is not read as `null`), so that this answer is told apart from every other shape.
    #[serde(deserialize_with = "Option::deserialize")]
    pub leader: Option<LeaderInfo>,
}

/// The leader of an election, in an `election.leader` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderInfo {
    /// The leading agent.
    pub agent: String,
    /// Its value: what it campaigned with, or last proclaimed.
    pub value: String,
    /// The leadership's fencing token (`$election/{name}`'s `create_revision`).
    pub token: u64,
}

/// The answer to `barrier.enter` (the round filled) and to `barrier.leave` (every member of
/// the round left).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierPassed {
    /// The round: the revision of the entry that filled it, so it is unique, increases from
    /// round to round of a barrier (also after the barrier was forgotten while unused) and
    /// compares with fencing tokens and key revisions. Both answers of one round carry it.
    pub generation: u64,
}

/// The answer to `fence.check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceStatus {
    /// The newest token held on the resource right now, 0 when it is free.
    pub current: u64,
    /// Whether the checked token is held right now.
    pub valid: bool,
}

/// The answer to `admin.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The answering node's view of Raft. Boxed: it is large and rare, and every other answer
    /// would otherwise carry its size.
    pub status: Box<NodeStatus>,
}

/// A page of a listing: its rows, under the field its op's answer names, and the cursor of
/// the next page. `Eq` is derived where the rows have it (a conflict's area has floats).
macro_rules! page {
    ($(#[$doc:meta])* $name:ident { $(#[$rows_doc:meta])* $rows:ident: $row:ty } $($eq:ident)?) => {
        $(#[$doc])*
        #[serde_with::skip_serializing_none]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize $(, $eq)?)]
        pub struct $name {
            $(#[$rows_doc])*
            pub $rows: Vec<$row>,
            /// Present when more follow; send it as `after` for the next page.
            pub next_after: Option<String>,
        }
    };
}

page! {
    /// The answer to `admin.leases`.
    LeasePage {
        /// One page of live leases, in lease id order.
        leases: LeaseInfo
    } Eq
}

page! {
    /// The answer to `admin.resources`.
    ResourcePage {
        /// One page of resources held or waited for, in (kind, name) order.
        resources: ResourceInfo
    } Eq
}

page! {
    /// The answer to `airspace.query`.
    ConflictPage {
        /// One page of the held reservations that conflict with the query in space and time, in
        /// name order (UTF-8 bytes). Who holds them (`agent`, `lease`) is left out of other agents'
        /// rows when authentication is on and the asker's role is `agent`.
        conflicts: ConflictInfo
    }
}

page! {
    /// The answer to `admin.agent.list`.
    AccountPage {
        /// One page of accounts, in name order.
        accounts: AccountInfo
    } Eq
}

/// The answer to `admin.agent.add` and `admin.agent.rotate`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountIssued {
    /// The account's agent id.
    pub agent: String,
    /// The account's role.
    pub role: Role,
    /// The new secret, sent this once (the service keeps only its hash). Absent in the answer
    /// to a same-id retry, which cannot send it again: rotate to get a new one.
    pub secret: Option<String>,
}

/// The answer of every op that says only `ok: true`: releases, revokes, cancels, account
/// removal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {}

/// The answer to `admin.snapshot`: one page of the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPage {
    /// The log index the snapshot was taken at (the last entry it covers); every page of one
    /// snapshot says the same, and a later page asks for it by this.
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
    /// The length of the whole snapshot, in bytes (before base64).
    pub total_bytes: u64,
    /// Where this page's bytes start in the snapshot.
    pub offset: u64,
    /// This page's bytes, base64 (standard alphabet, padded).
    pub data: String,
    /// The BLAKE2b-256 digest of the whole snapshot's bytes, 64 lowercase hex digits, so the
    /// reader can check the pages it joined.
    pub digest: String,
    /// True on the page that ends the snapshot.
    pub done: bool,
}

/// One account in an `admin.agent.list` result: never its secret or the secret's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountInfo {
    /// The agent id it authenticates.
    pub agent: String,
    /// What it may do.
    pub role: Role,
    /// Key prefixes it may read under; absent: its role's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_read: Vec<String>,
    /// Key prefixes it may write under; absent: its role's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_write: Vec<String>,
}

/// The result of `admin.status`: one node's own view, not a linearizable read. Log indexes are
/// absent while there is none (an empty log, no snapshot yet).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The answering node's Raft id.
    pub node_id: u64,
    /// The Raft term it is in.
    pub term: u64,
    /// Whether it is the leader.
    pub is_leader: bool,
    /// The leader it knows of, if any.
    pub leader_id: Option<u64>,
    /// Index of the last entry in its log.
    pub last_log_index: Option<u64>,
    /// Index of the last entry it knows committed (durable on a majority).
    pub committed_index: Option<u64>,
    /// Index of the last entry its state machine applied.
    pub applied_index: Option<u64>,
    /// Last index covered by its latest snapshot.
    pub snapshot_index: Option<u64>,
    /// Index up to which its log was purged (entries kept only in the snapshot).
    pub purged_index: Option<u64>,
    /// The voting members of the cluster, as this node's membership config says.
    pub members: Vec<MemberInfo>,
    /// On the leader only: how far each other member's log is known to match the leader's
    /// (an empty list on a single node).
    pub replication: Option<Vec<ReplicationInfo>>,
    /// Whether the node is backed by a quorum. On the leader: a majority of the voters
    /// acknowledged it within the longest election timeout (`false`: it answers every request
    /// `unavailable` at once, `status` shows `NO QUORUM`). On a follower: it knows a leader.
    /// Absent from nodes older than this field.
    pub has_quorum: Option<bool>,
    /// On the leader only, ms since a majority of the voters last acknowledged it.
    pub quorum_ack_age_ms: Option<u64>,
    /// The cluster version this node applied: the feature level every member's build
    /// supports (docs/OPERATIONS.md, "Upgrading one member at a time"). Absent from nodes
    /// older than this field, which are all at version 1.
    pub cluster_version: Option<u32>,
}

/// One member in an `admin.status` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Its Raft id (derived from its name in a cluster).
    pub id: u64,
    /// Its name (`--name`); empty for a single node.
    #[serde(default)]
    pub name: String,
    /// The address other members reach it at (empty for a single node without a transport).
    pub addr: String,
    /// Whether it votes; a member being added is a learner until it has caught up.
    #[serde(default = "voter_default")]
    pub voter: bool,
}

fn voter_default() -> bool {
    true
}

/// One member's replication progress, as the leader sees it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationInfo {
    /// The member's Raft id.
    pub id: u64,
    /// The highest log index known to match the leader's; absent when nothing matched yet.
    pub matched_index: Option<u64>,
}

/// One resource in an `admin.resources` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// Its kind.
    pub kind: ResourceKind,
    /// Its name.
    pub name: String,
    /// How many leases hold it (0 for a waypoint name only waited for).
    pub holders: u64,
    /// How many requests wait for it.
    pub waiters: u64,
}

/// One live lease in an `admin.leases` result.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// The lease id.
    pub lease: String,
    /// The agent it belongs to.
    pub agent: String,
    /// Its time to live, ms.
    pub ttl_ms: u64,
    /// Time left before it expires, ms, on the leader's clock; absent when the answering node
    /// keeps no deadlines (it is not a leader that has applied an entry of its term).
    pub remaining_ms: Option<u64>,
}

impl Response {
    /// A success response.
    pub fn ok(id: impl Into<String>, success: impl Into<Success>) -> Self {
        Response {
            id: Some(id.into()),
            outcome: Ok(success.into()),
        }
    }

    /// A failure response.
    pub fn error(id: Option<String>, code: ErrorCode, message: impl Into<String>) -> Self {
        Response {
            id,
            outcome: Err(ErrorBody {
                code,
                message: message.into(),
                compact_revision: None,
            }),
        }
    }

    /// The `compacted` failure of a `watch.poll` whose cursor is below `compact_revision`.
    pub fn compacted(id: impl Into<String>, compact_revision: u64) -> Self {
        Response {
            id: Some(id.into()),
            outcome: Err(ErrorBody {
                code: ErrorCode::Compacted,
                message: format!(
                    "the events after this cursor are compacted: the oldest kept follow \
                     revision {compact_revision}; re-read with kv.get and watch from its revision"
                ),
                compact_revision: Some(compact_revision),
            }),
        }
    }

    /// The response as JSON bytes, ready to publish.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a response is plain data and always serializes")
    }

    /// The response as JSON of at most `bytes_max` bytes, the room one MQTT packet leaves.
    ///
    /// Only `inspect` of a busy resource can exceed it (about 80 bytes per holder or waiter,
    /// and a lock may have 1,000 waiters by default, a semaphore more holders): its lists are
    /// then cut to the longest prefixes that fit, waiters first, and `holders_total` /
    /// `waiters_total` say how long they really are. Answering nothing instead left the asker
    /// waiting forever, since every retry gets the same answer. Anything else that does not
    /// fit becomes a `too_large` error for the same request id.
    pub fn encode_within(&self, bytes_max: usize) -> Vec<u8> {
        let encoded = self.encode();
        if encoded.len() <= bytes_max {
            return encoded;
        }
        if let Ok(success) = &self.outcome
            && let Some(fitted) = self.fit_lists(success, bytes_max)
        {
            return fitted;
        }
        Response::error(
            self.id.clone(),
            ErrorCode::TooLarge,
            format!(
                "the answer is {} bytes, more than the {bytes_max} one MQTT packet may carry here",
                encoded.len()
            ),
        )
        .encode()
    }

    /// `inspect`'s answer with its lists cut to fit `bytes_max`, or `None` if there are no
    /// lists or even empty ones do not fit.
    fn fit_lists(&self, success: &Success, bytes_max: usize) -> Option<Vec<u8>> {
        let Success::Inspection(whole) = success else {
            return None;
        };
        let (holders, waiters) = (&whole.holders, &whole.waiters);
        let cut = |kept_holders: usize, kept_waiters: usize| {
            let cut = Inspection {
                limit: whole.limit,
                count: whole.count,
                holders: holders[..kept_holders].to_vec(),
                waiters: waiters[..kept_waiters].to_vec(),
                leaving: whole.leaving,
                holders_total: (kept_holders < holders.len()).then_some(holders.len() as u64),
                waiters_total: (kept_waiters < waiters.len()).then_some(waiters.len() as u64),
            };
            Response {
                id: self.id.clone(),
                outcome: Ok(cut.into()),
            }
            .encode()
        };
        // The most entries of one list that fit, by bisection: each try encodes the answer
        // once, and an oversized inspect is rare.
        let longest = |len: usize, encode: &dyn Fn(usize) -> Vec<u8>| {
            let (mut fits, mut too_long) = (0, len + 1);
            while too_long - fits > 1 {
                let mid = fits + (too_long - fits) / 2;
                if encode(mid).len() <= bytes_max {
                    fits = mid;
                } else {
                    too_long = mid;
                }
            }
            fits
        };
        let fitted = if cut(holders.len(), 0).len() <= bytes_max {
            let kept = longest(waiters.len(), &|n| cut(holders.len(), n));
            cut(holders.len(), kept)
        } else {
            let kept = longest(holders.len(), &|n| cut(n, 0));
            cut(kept, 0)
        };
        (fitted.len() <= bytes_max).then_some(fitted)
    }

    /// Parses a response payload (the SDK's side).
    pub fn decode(payload: &[u8]) -> Result<Response, serde_json::Error> {
        serde_json::from_slice(payload)
    }
}

/// The flat shape on the wire; [`Response`] is the shape that cannot say `ok: true` with an
/// error.
#[derive(Serialize, Deserialize)]
struct WireResponse {
    id: Option<String>,
    ok: bool,
    #[serde(flatten)]
    success: Success,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
}

impl From<Response> for WireResponse {
    fn from(response: Response) -> Self {
        match response.outcome {
            Ok(success) => WireResponse {
                id: response.id,
                ok: true,
                success,
                error: None,
            },
            Err(error) => WireResponse {
                id: response.id,
                ok: false,
                success: Success::default(),
                error: Some(error),
            },
        }
    }
}

impl TryFrom<WireResponse> for Response {
    type Error = String;

    fn try_from(wire: WireResponse) -> Result<Self, Self::Error> {
        let outcome = match (wire.ok, wire.error) {
            (true, None) => Ok(wire.success),
            (false, Some(error)) => Err(error),
            (true, Some(_)) => return Err("`ok: true` with an `error`".into()),
            (false, None) => return Err("`ok: false` without an `error`".into()),
        };
        Ok(Response {
            id: wire.id,
            outcome,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Deleted, KeyValue, PutResult, RangePage, TxnResult};
    use crate::lock_mode::LockMode;
    use crate::request::Area;

    fn holder(i: usize) -> HolderInfo {
        HolderInfo {
            agent: format!("drone-{i:04}"),
            lease: format!("{i:016x}"),
            token: i as u64,
            permits: Some(1),
            since_ms: 1_764_500_000_000,
            area: None,
            start_ms: None,
            end_ms: None,
            volumes: Vec::new(),
            priority: None,
            vacate_by_ms: None,
            mode: LockMode::Exclusive,
            value: None,
        }
    }

    fn waiter(i: usize) -> WaiterInfo {
        WaiterInfo {
            agent: format!("drone-{i:04}"),
            position: u32::try_from(i + 1).unwrap(),
            permits: None,
            since_ms: 1_764_500_000_000,
            area: None,
            start_ms: None,
            end_ms: None,
            volumes: Vec::new(),
            priority: None,
            mode: LockMode::Exclusive,
            value: None,
        }
    }

    fn inspect(holders: usize, waiters: usize) -> Response {
        Response::ok(
            "r1",
            Inspection {
                limit: None,
                count: None,
                holders: (0..holders).map(holder).collect(),
                waiters: (0..waiters).map(waiter).collect(),
                leaving: None,
                holders_total: None,
                waiters_total: None,
            },
        )
    }

    fn decoded(bytes: &[u8]) -> Response {
        Response::decode(bytes).expect("a response")
    }

    fn inspection(bytes: &[u8]) -> Inspection {
        let success = decoded(bytes).outcome.expect("still a success");
        Inspection::try_from(success).expect("still an inspection")
    }

    #[test]
    fn an_answer_that_fits_is_encoded_as_is() {
        let response = inspect(1, 10);
        assert_eq!(response.encode_within(65_536), response.encode());
    }

    #[test]
    fn a_long_queue_is_cut_to_the_first_waiters_that_fit_with_the_total() {
        let response = inspect(1, 1_000);
        let full = response.encode().len();
        let bytes_max = 16_384;
        assert!(
            full > bytes_max,
            "the test needs an answer over the limit: {full}"
        );
        let bytes = response.encode_within(bytes_max);
        assert!(bytes.len() <= bytes_max, "{} bytes", bytes.len());
        let success = inspection(&bytes);
        let waiters = success.waiters;
        assert!(waiters.len() > 100, "kept only {}", waiters.len());
        // The first ones in queue order, and as many as fit: one more would not.
        assert_eq!(waiters, (0..waiters.len()).map(waiter).collect::<Vec<_>>());
        let mut one_more = inspect(1, waiters.len() + 1);
        if let Ok(Success::Inspection(success)) = &mut one_more.outcome {
            success.waiters_total = Some(1_000);
        }
        assert!(
            one_more.encode().len() > bytes_max,
            "one more waiter would still have fitted"
        );
        assert_eq!(success.waiters_total, Some(1_000));
        assert_eq!(success.holders.len(), 1);
        assert_eq!(success.holders_total, None, "holders were not cut");
    }

    #[test]
    fn too_many_holders_are_cut_after_every_waiter() {
        let response = inspect(2_000, 50);
        let bytes = response.encode_within(16_384);
        assert!(bytes.len() <= 16_384);
        let success = inspection(&bytes);
        let holders = success.holders;
        assert!(!holders.is_empty() && holders.len() < 2_000);
        assert_eq!(holders, (0..holders.len()).map(holder).collect::<Vec<_>>());
        assert_eq!(success.holders_total, Some(2_000));
        assert_eq!(success.waiters, vec![]);
        assert_eq!(success.waiters_total, Some(50));
    }

    #[test]
    fn anything_else_too_large_is_a_too_large_error_for_the_same_id() {
        let response = Response::ok(
            "r9",
            LeaseGranted {
                lease: "x".repeat(500),
                ttl_ms: 5_000,
            },
        );
        let answer = decoded(&response.encode_within(100));
        assert_eq!(answer.id.as_deref(), Some("r9"));
        let error = answer.outcome.expect_err("an error");
        assert_eq!(error.code, ErrorCode::TooLarge);
        assert!(error.message.contains("100"), "{}", error.message);
    }

    fn key_value() -> KeyValue {
        KeyValue {
            key: "cfg/a".into(),
            value: "on".into(),
            create_revision: 3 << 16,
            mod_revision: 5 << 16,
            version: 2,
            lease: Some("0000000000000011".into()),
        }
    }

    /// One answer of every shape, each with its lists non-empty where it has lists.
    fn every_shape() -> Vec<Success> {
        let page = |after: &str| Some(after.to_string());
        vec![
            SnapshotPage {
                index: 9,
                term: 2,
                total_bytes: 3,
                offset: 0,
                data: "AAEC".into(),
                digest: "ab".repeat(32),
                done: true,
            }
            .into(),
            StatusReport {
                status: Box::new(NodeStatus {
                    node_id: 1,
                    term: 2,
                    is_leader: true,
                    leader_id: Some(1),
                    last_log_index: Some(9),
                    committed_index: Some(9),
                    applied_index: Some(9),
                    snapshot_index: None,
                    purged_index: None,
                    members: vec![MemberInfo {
                        id: 1,
                        name: "a".into(),
                        addr: "10.0.0.1:7001".into(),
                        voter: true,
                    }],
                    replication: Some(vec![]),
                    has_quorum: Some(true),
                    quorum_ack_age_ms: Some(12),
                    cluster_version: None,
                }),
            }
            .into(),
            LeaseGranted {
                lease: "L-17".into(),
                ttl_ms: 5_000,
            }
            .into(),
            FenceStatus {
                current: 42,
                valid: true,
            }
            .into(),
            Inspection {
                limit: Some(3),
                count: None,
                leaving: None,
                holders: vec![HolderInfo {
                    area: Some(Area {
                        lat: 48.5,
                        lon: 11.25,
                        radius_m: 30.0,
                        alt_min_m: Some(0.0),
                        alt_max_m: Some(120.5),
                    }),
                    ..holder(1)
                }],
                waiters: vec![waiter(2)],
                holders_total: None,
                waiters_total: Some(7),
            }
            .into(),
            LeasePage {
                leases: vec![LeaseInfo {
                    lease: "L-1".into(),
                    agent: "drone-1".into(),
                    ttl_ms: 5_000,
                    remaining_ms: Some(4_000),
                }],
                next_after: page("L-1"),
            }
            .into(),
            ResourcePage {
                resources: vec![ResourceInfo {
                    kind: ResourceKind::Lock,
                    name: "gw".into(),
                    holders: 1,
                    waiters: 0,
                }],
                next_after: None,
            }
            .into(),
            ConflictPage {
                conflicts: vec![],
                next_after: page("wp-9"),
            }
            .into(),
            AccountPage {
                accounts: vec![AccountInfo {
                    agent: "drone-1".into(),
                    role: Role::Agent,
                    kv_read: Vec::new(),
                    kv_write: Vec::new(),
                }],
                next_after: None,
            }
            .into(),
            AccountIssued {
                agent: "drone-1".into(),
                role: Role::Agent,
                secret: Some("s3cret".into()),
            }
            .into(),
            KvTxnDone {
                revision: 9 << 16,
                succeeded: true,
                results: vec![
                    TxnResult::Put(PutResult { prev_kv: None }),
                    TxnResult::Delete(Deleted { deleted: 2 }),
                    TxnResult::Get(RangePage {
                        kvs: vec![key_value()],
                        next_after: None,
                    }),
                ],
            }
            .into(),
            KvPage {
                revision: 9 << 16,
                kvs: vec![key_value()],
                next_after: page("cfg/a"),
            }
            .into(),
            KvDeleted {
                revision: 9 << 16,
                deleted: 0,
            }
            .into(),
            KvPutDone {
                revision: 9 << 16,
                prev_kv: Some(key_value()),
            }
            .into(),
            KvPutDone {
                revision: 10 << 16,
                prev_kv: None,
            }
            .into(),
            LeaderReport {
                leader: Some(LeaderInfo {
                    agent: "drone-1".into(),
                    value: "10.0.0.1:7000".into(),
                    token: 9 << 16,
                }),
            }
            .into(),
            LeaderReport { leader: None }.into(),
            Inspection {
                limit: None,
                count: Some(3),
                holders: vec![holder(4)],
                waiters: vec![waiter(5)],
                leaving: Some(2),
                holders_total: None,
                waiters_total: None,
            }
            .into(),
            Granted { token: u64::MAX }.into(),
            LeaseKept { ttl_ms: 5_000 }.into(),
            BarrierPassed {
                generation: 9 << 16,
            }
            .into(),
            Done {}.into(),
        ]
    }

    #[test]
    fn every_shape_decodes_back_to_its_own_variant() {
        let shapes = every_shape();
        for success in shapes {
            let response = Response::ok("r1", success.clone());
            let back = decoded(&response.encode()).outcome.expect("a success");
            assert_eq!(
                back.shape(),
                success.shape(),
                "{}",
                String::from_utf8_lossy(&response.encode())
            );
            assert_eq!(back, success);
        }
    }

    #[test]
    fn fields_a_newer_service_adds_are_ignored() {
        let answer = decoded(br#"{"id":"r1","ok":true,"token":7,"shard":"eu-1"}"#);
        assert_eq!(answer.outcome, Ok(Granted { token: 7 }.into()));
    }

    #[test]
    fn reading_the_wrong_shape_names_what_came() {
        let error =
            Granted::try_from(Success::from(LeaseKept { ttl_ms: 5 })).expect_err("not a grant");
        assert_eq!(
            error,
            UnexpectedReply {
                expected: "a grant (`token`)",
                got: "a kept lease (`ttl_ms`)",
            }
        );
        assert_eq!(
            error.to_string(),
            "expected a grant (`token`), the service answered a kept lease (`ttl_ms`)"
        );
    }
}
