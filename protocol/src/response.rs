//! Responses: exactly one final answer per request id, on `hk/v1/rsp/{agent}`.
//!
//! Success: `{"id": "...", "ok": true, ...result}`. Failure:
//! `{"id": "...", "ok": false, "error": {"code": "...", "message": "..."}}`, with `"id": null`
//! when the request could not be parsed far enough to read its id.

use serde::{Deserialize, Serialize};

use crate::airspace::ConflictInfo;
use crate::error::ErrorCode;
use crate::priority::Priority;
use crate::request::{Area, ResourceKind, Volume};
use crate::role::Role;

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable reason.
    pub code: ErrorCode,
    /// Human-readable detail.
    pub message: String,
}

/// The result fields of a success response. Which fields are present depends on the op
/// (DESIGN.md §3, `docs/PROTOCOL.md`); absent fields are not sent. A flat struct rather than an
/// enum so that a client can read the field it expects without knowing every other shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Success {
    /// `lease.grant`: the new lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// `lease.grant`, `lease.keepalive`: the lease's time to live, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// `lock.acquire`, `sem.acquire`, `waypoint.reserve`: the grant's fencing token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// `fence.check`: the newest token held on the resource right now, 0 when it is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<u64>,
    /// `fence.check`: whether the checked token is held right now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid: Option<bool>,
    /// `inspect` of a semaphore: its capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `inspect`: who holds the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holders: Option<Vec<HolderInfo>>,
    /// `inspect`: who waits for it, in queue order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiters: Option<Vec<WaiterInfo>>,
    /// `inspect`: how many hold the resource, present only when `holders` lists just the first
    /// ones because the whole answer would not fit in one MQTT packet
    /// ([`Response::encode_within`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holders_total: Option<u64>,
    /// `inspect`: how many wait, present only when `waiters` lists just the first ones in queue
    /// order, for the same reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiters_total: Option<u64>,
    /// `admin.status`: the answering node's view of Raft. Boxed: it is large and rare, and
    /// every other response would otherwise carry its size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<NodeStatus>>,
    /// `admin.leases`: one page of live leases, in lease id order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<Vec<LeaseInfo>>,
    /// `admin.resources`: one page of resources held or waited for, in (kind, name) order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<ResourceInfo>>,
    /// `airspace.query`: one page of the held reservations that conflict with the query, in
    /// name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<Vec<ConflictInfo>>,
    /// `admin.leases`, `admin.resources`, `admin.agent.list`, `airspace.query`: present when
    /// more follow; send it as `after` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
    /// `admin.agent.add`, `admin.agent.rotate`: the account's agent id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `admin.agent.add`, `admin.agent.rotate`: the account's role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// `admin.agent.add`, `admin.agent.rotate`: the new secret, sent this once (the service
    /// keeps only its hash). Absent in the answer to a same-id retry, which cannot send it
    /// again: rotate to get a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// `admin.agent.list`: one page of accounts, in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounts: Option<Vec<AccountInfo>>,
    /// `admin.snapshot`: the log index the snapshot was taken at (the last entry it covers);
    /// every page of one snapshot says the same, and a later page asks for it by this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// `admin.snapshot`: the term of the entry at `index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// `admin.snapshot`: the length of the whole snapshot, in bytes (before base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// `admin.snapshot`: where this page's bytes start in the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// `admin.snapshot`: this page's bytes, base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// `admin.snapshot`: the BLAKE2b-256 digest of the whole snapshot's bytes, 64 lowercase hex
    /// digits, so the reader can check the pages it joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `admin.snapshot`: true on the page that ends the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
}

/// One page of an `admin.snapshot` result, as the node builds it (the wire carries its fields
/// flat in [`Success`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPage {
    /// The log index the snapshot was taken at.
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
    /// The whole snapshot's length in bytes.
    pub total_bytes: u64,
    /// Where this page starts in the snapshot's bytes.
    pub offset: u64,
    /// This page's bytes, base64.
    pub data: String,
    /// BLAKE2b-256 of the whole snapshot, lowercase hex.
    pub digest: String,
    /// Whether this page ends the snapshot.
    pub done: bool,
}

/// One account in an `admin.agent.list` result: never its secret or the secret's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountInfo {
    /// The agent id it authenticates.
    pub agent: String,
    /// What it may do.
    pub role: Role,
}

/// The result of `admin.status`: one node's own view, not a linearizable read. Log indexes are
/// absent while there is none (an empty log, no snapshot yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The answering node's Raft id.
    pub node_id: u64,
    /// The Raft term it is in.
    pub term: u64,
    /// Whether it is the leader.
    pub is_leader: bool,
    /// The leader it knows of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<u64>,
    /// Index of the last entry in its log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_log_index: Option<u64>,
    /// Index of the last entry it knows committed (durable on a majority).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_index: Option<u64>,
    /// Index of the last entry its state machine applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_index: Option<u64>,
    /// Last index covered by its latest snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_index: Option<u64>,
    /// Index up to which its log was purged (entries kept only in the snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purged_index: Option<u64>,
    /// The voting members of the cluster, as this node's membership config says.
    pub members: Vec<MemberInfo>,
    /// On the leader only: how far each other member's log is known to match the leader's
    /// (an empty list on a single node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<Vec<ReplicationInfo>>,
    /// Whether the node is backed by a quorum. On the leader: a majority of the voters
    /// acknowledged it within the longest election timeout (`false`: it answers every request
    /// `unavailable` at once, `status` shows `NO QUORUM`). On a follower: it knows a leader.
    /// Absent from nodes older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_quorum: Option<bool>,
    /// On the leader only, ms since a majority of the voters last acknowledged it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_ack_age_ms: Option<u64>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationInfo {
    /// The member's Raft id.
    pub id: u64,
    /// The highest log index known to match the leader's; absent when nothing matched yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<u64>,
}

/// One holder in an `inspect` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// The holding agent.
    pub agent: String,
    /// The lease the hold is bound to. With authentication on, an `inspect` answered to a
    /// non-admin leaves out other agents' leases (the empty string, not sent): a lease id is
    /// what a request would need to act on a hold, so only its owner and admins see it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lease: String,
    /// The hold's fencing token.
    pub token: u64,
    /// Permits held (semaphores only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// When it was granted, milliseconds since the Unix epoch on the leader's clock.
    pub since_ms: u64,
    /// The reservation's cylinder (waypoints reserved with geometry only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub area: Option<Area>,
    /// Start of the reservation's time window, ms since the Unix epoch (waypoints reserved with
    /// a window only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// End of the window, exclusive (waypoints reserved with an end only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    /// A route's volumes, in flight order (routes only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// The reservation's priority, when above routine (absent: 0, as in the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// When a preempted reservation is ended unless released first (preempted waypoints and
    /// routes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vacate_by_ms: Option<u64>,
}

/// One waiter in an `inspect` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaiterInfo {
    /// The waiting agent.
    pub agent: String,
    /// Place in the queue, 1 for the next to be granted.
    pub position: u32,
    /// Permits asked for (semaphores only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// When it started waiting, milliseconds since the Unix epoch on the leader's clock.
    pub since_ms: u64,
    /// The cylinder it asks for (waypoints reserved with geometry only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub area: Option<Area>,
    /// Start of the reservation's time window, ms since the Unix epoch (waypoints reserved with
    /// a window only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// End of the window, exclusive (waypoints reserved with an end only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    /// A route's volumes, in flight order (routes only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// The priority it asks for, when above routine (absent: 0). Waiters are listed in queue
    /// order, which priority and aging decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

impl Success {
    /// The result of `lease.grant`.
    pub fn lease(lease: String, ttl_ms: u64) -> Self {
        Success {
            lease: Some(lease),
            ttl_ms: Some(ttl_ms),
            ..Success::default()
        }
    }

    /// The result of `lease.keepalive`.
    pub fn ttl(ttl_ms: u64) -> Self {
        Success {
            ttl_ms: Some(ttl_ms),
            ..Success::default()
        }
    }

    /// The result of a grant.
    pub fn token(token: u64) -> Self {
        Success {
            token: Some(token),
            ..Success::default()
        }
    }

    /// The result of `fence.check`.
    pub fn fence(current: u64, valid: bool) -> Self {
        Success {
            current: Some(current),
            valid: Some(valid),
            ..Success::default()
        }
    }

    /// The result of `admin.snapshot`: one page, its fields flat.
    pub fn snapshot(page: SnapshotPage) -> Self {
        Success {
            index: Some(page.index),
            term: Some(page.term),
            total_bytes: Some(page.total_bytes),
            offset: Some(page.offset),
            data: Some(page.data),
            digest: Some(page.digest),
            done: Some(page.done),
            ..Success::default()
        }
    }

    /// The `admin.snapshot` page this result carries, `None` when a field of one is missing.
    pub fn snapshot_page(&self) -> Option<SnapshotPage> {
        Some(SnapshotPage {
            index: self.index?,
            term: self.term?,
            total_bytes: self.total_bytes?,
            offset: self.offset?,
            data: self.data.clone()?,
            digest: self.digest.clone()?,
            done: self.done?,
        })
    }
}

impl Response {
    /// A success response.
    pub fn ok(id: impl Into<String>, success: Success) -> Self {
        Response {
            id: Some(id.into()),
            outcome: Ok(success),
        }
    }

    /// A failure response.
    pub fn error(id: Option<String>, code: ErrorCode, message: impl Into<String>) -> Self {
        Response {
            id,
            outcome: Err(ErrorBody {
                code,
                message: message.into(),
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
        let holders = success.holders.as_deref()?;
        let waiters = success.waiters.as_deref().unwrap_or_default();
        // Everything but the two lists, copied once rather than with both whole lists at
        // every try of the bisection below.
        let rest = Success {
            holders: None,
            waiters: None,
            ..success.clone()
        };
        let cut = |kept_holders: usize, kept_waiters: usize| {
            let mut cut = rest.clone();
            cut.holders = Some(holders[..kept_holders].to_vec());
            cut.waiters = success
                .waiters
                .as_ref()
                .map(|_| waiters[..kept_waiters].to_vec());
            cut.holders_total = (kept_holders < holders.len()).then_some(holders.len() as u64);
            cut.waiters_total = (kept_waiters < waiters.len()).then_some(waiters.len() as u64);
            Response {
                id: self.id.clone(),
                outcome: Ok(cut),
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
        }
    }

    fn inspect(holders: usize, waiters: usize) -> Response {
        Response::ok(
            "r1",
            Success {
                holders: Some((0..holders).map(holder).collect()),
                waiters: Some((0..waiters).map(waiter).collect()),
                ..Success::default()
            },
        )
    }

    fn decoded(bytes: &[u8]) -> Response {
        Response::decode(bytes).expect("a response")
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
        let success = decoded(&bytes).outcome.expect("still a success");
        let waiters = success.waiters.expect("waiters");
        assert!(waiters.len() > 100, "kept only {}", waiters.len());
        // The first ones in queue order, and as many as fit: one more would not.
        assert_eq!(waiters, (0..waiters.len()).map(waiter).collect::<Vec<_>>());
        let mut one_more = inspect(1, waiters.len() + 1);
        if let Ok(success) = &mut one_more.outcome {
            success.waiters_total = Some(1_000);
        }
        assert!(
            one_more.encode().len() > bytes_max,
            "one more waiter would still have fitted"
        );
        assert_eq!(success.waiters_total, Some(1_000));
        assert_eq!(success.holders.map(|h| h.len()), Some(1));
        assert_eq!(success.holders_total, None, "holders were not cut");
    }

    #[test]
    fn too_many_holders_are_cut_after_every_waiter() {
        let response = inspect(2_000, 50);
        let bytes = response.encode_within(16_384);
        assert!(bytes.len() <= 16_384);
        let success = decoded(&bytes).outcome.expect("still a success");
        let holders = success.holders.expect("holders");
        assert!(!holders.is_empty() && holders.len() < 2_000);
        assert_eq!(holders, (0..holders.len()).map(holder).collect::<Vec<_>>());
        assert_eq!(success.holders_total, Some(2_000));
        assert_eq!(success.waiters, Some(vec![]));
        assert_eq!(success.waiters_total, Some(50));
    }

    #[test]
    fn anything_else_too_large_is_a_too_large_error_for_the_same_id() {
        let response = Response::ok("r9", Success::lease("x".repeat(500), 5_000));
        let answer = decoded(&response.encode_within(100));
        assert_eq!(answer.id.as_deref(), Some("r9"));
        let error = answer.outcome.expect_err("an error");
        assert_eq!(error.code, ErrorCode::TooLarge);
        assert!(error.message.contains("100"), "{}", error.message);
    }
}
