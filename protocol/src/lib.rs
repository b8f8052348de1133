//! # hivekeeper-protocol: wire protocol v1
//!
//! The types that travel over MQTT between agents and a Hivekeeper node, shared by the bridge
//! (`hivekeeper-mqtt`) and the agent SDK (`hivekeeper-agent`). Pure serde and validation: no I/O,
//! no runtime, small enough for an agent to embed. `docs/PROTOCOL.md` is the prose version of
//! this crate; the golden tests in `tests/golden.rs` pin the JSON so it cannot drift silently,
//! and `tests/protocol_doc.rs` holds the document's ops, fields, error codes, events and
//! examples to the decoder.
//!
//! ```text
//!  agent                                   node
//!  Request ──encode()──▶ hk/v1/req/{agent} ──▶ Topics::parse_request_topic()
//!                                              Request::decode(bytes) ──▶ Ok(Request)
//!                                                                    └──▶ Err(ProtocolError)
//!  Response ◀─decode── hk/v1/rsp/{agent}  ◀── Response::encode()  (exactly one per request id)
//!  Event    ◀─decode── hk/v1/evt/{agent}  ◀── Event::encode()     (lease.expired, lock.lost, ...)
//! ```
//!
//! # Layout
//! - [`request`]: [`Request`] and [`Op`], one variant per op, and the stepwise decoder that tells a
//!   malformed message (`bad_request`) from an unknown op (`unknown_op`) from one too large
//!   (`too_large`).
//! - [`response`]: [`Response`] with its success fields and [`ErrorBody`].
//! - [`kv`]: keys, txns and watch events: what the `kv.*` ops carry and answer.
//! - [`kv_access`]: [`KvAccess`], an account's key-prefix permissions and their check.
//! - [`airspace`]: `airspace.query`'s volume and its answer's rows.
//! - [`role`]: [`Role`] (`agent`, `observer`, `admin`) and the role each op needs.
//! - [`event`]: unsolicited [`Event`]s.
//! - [`priority`]: [`Priority`], a reservation's level (0 routine to 3 emergency).
//! - [`lock_mode`]: [`LockMode`], a lock's `exclusive` or `shared` mode.
//! - [`error`]: [`ErrorCode`], the closed list of codes, and [`ProtocolError`].
//! - [`topic`]: building and parsing `hk/v1/{req,rsp,evt}/{agent}`.
//! - [`validate`]: the bounds on ids, names and numeric fields, one precise message per failure.

pub mod airspace;
pub mod error;
pub mod event;
pub mod kv;
pub mod kv_access;
pub mod lock_mode;
pub mod priority;
pub mod request;
pub mod response;
pub mod role;
pub mod topic;
pub mod validate;

pub use airspace::{ConflictInfo, QueryVolume, ReservationKind};
pub use error::{ErrorCode, ProtocolError};
pub use event::{Event, LostReason};
pub use kv::{KeySelector, KeyValue, KvDeleted, KvEvent, KvPage, KvPutDone, KvTxnDone, WatchPage};
pub use kv_access::{KvAccess, KvAccessKind, KvDenied};
pub use lock_mode::LockMode;
pub use priority::Priority;
pub use request::{Area, CLUSTER_VERSION_INITIAL, Op, OpClass, Request, ResourceKind, Volume};
pub use response::{
    AccountInfo, AccountIssued, AccountPage, BarrierPassed, ConflictPage, Done, ErrorBody,
    FenceStatus, Granted, HolderInfo, Inspection, LeaderInfo, LeaderReport, LeaseGranted,
    LeaseInfo, LeaseKept, LeasePage, MemberInfo, NodeStatus, ReplicationInfo, ResourceInfo,
    ResourcePage, Response, SnapshotPage, StatusReport, Success, UnexpectedReply, WaiterInfo,
};
pub use role::{Role, UnknownRole};
pub use topic::Topics;
