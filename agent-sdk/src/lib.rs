//! # hivekeeper-agent: the Rust agent SDK
//!
//! What a drone, a sensor or a service links to coordinate through Hivekeeper over MQTT: a
//! [`Session`] is a lease the SDK keeps alive in the background; through it the agent takes
//! FIFO locks (exclusive or shared, one or several at once), semaphore permits and waypoint
//! reservations, each returned as a [`Guard`] that carries its fencing token, leads elections
//! ([`Leadership`]) and passes barriers ([`Barrier`]). The SDK retries safely (a resend reuses the request id, which the
//! service deduplicates), backs off with full jitter, fails over between brokers, and gives up
//! on a lease *before* the service could hand its resources to someone else (DESIGN.md §5.3).
//!
//! It depends on `hivekeeper-protocol` and rumqttc only, never on the coordinator, so an agent
//! never compiles openraft. What it is not: a generic MQTT client, or a guarantee by itself —
//! the fencing token checked by the protected resource is the safety mechanism; the session
//! state is a liveness hint that tells the application when to stop.
//!
//! ```no_run
//! # async fn fly() -> Result<(), hivekeeper_agent::AgentError> {
//! use hivekeeper_agent::{Agent, AgentConfig};
//! let agent = Agent::connect(AgentConfig::new("drone-7", &["127.0.0.1:1883"])).await?;
//! let session = agent.session(5_000).await?;
//! let guard = session.lock("pad-3").await?;
//! println!("landing with fencing token {}", guard.token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`config`]: [`AgentConfig`], its [`DEFAULTS`] and `validate()`.
//! - [`agent`]: [`Agent`]: connect, and the request loop (same-id resends, deadlines).
//! - [`airspace`]: [`AirspaceQuery`] and [`Agent::airspace_query`]: which held reservations a
//!   planned cylinder or route would conflict with, a [`ConflictPage`] at a time.
//! - `connection`: the task that polls rumqttc, re-subscribes on every ConnAck, fails over to
//!   the next broker with jittered backoff, and routes responses and events. It never
//!   publishes (rumqtt#1025, #263, #910).
//! - [`session`]: [`Session`] and [`SessionState`]: keepalives every TTL/3, the local deadline,
//!   jeopardy, expiry, revoke; [`SessionOptions`] (a lock-delay) for [`Agent::session_with`].
//! - [`guard`]: [`Guard`], [`Resource`] and [`Wait`]: acquire, fencing token, release (also
//!   on drop); locks exclusive or shared ([`LockMode`], [`Session::read_lock`],
//!   [`Guard::downgrade`]) and multi-locks ([`Session::lock_all`]); a max-hold
//!   ([`AcquireOptions`], [`Session::acquire_with`]) and how a hold ended ([`Guard::ended`],
//!   [`HoldEnd`]); a reservation's [`Priority`] and its [`Guard::preempted`] future
//!   ([`Preempted`]: vacate by a deadline) and [`Guard::preemption_withdrawn`] (the deadline
//!   dropped: keep it).
//! - `resource`: [`Resource`], [`Wait`] and [`AcquireOptions`] (re-exported by [`guard`]):
//!   what an acquire asks for, how long it queues, how it is held.
//! - `claim`: one hold per resource per session (a multi-lock claims each of its locks).
//! - `hold_watch`: the agent's registry of held grants, which the connection tells of their
//!   `*.lost` events for [`Guard::ended`].
//! - [`election`]: [`Leadership`] from [`Session::campaign`]: the leader's token, proclaim,
//!   resign (also on drop), and [`Leadership::lost`] ([`LeadershipEnd`]).
//! - [`observe`]: [`Observe`] from [`Agent::observe`], a `Stream` of an election's
//!   [`Leader`]s, one item per change, on a watch of `$election/{name}`.
//! - [`barrier`]: [`Barrier`] from [`Session::barrier`]: enter and leave a double barrier's
//!   rounds, each answered with the round's generation.
//! - [`kv`]: [`Kv`] from [`Agent::kv`] or [`Session::kv`]: get, put (leased to the session
//!   with [`Kv::put_leased`]), delete and [`Txn`], each answer with its revision.
//! - [`watch`]: [`Watch`], a `Stream` of [`WatchItem`]s that long-polls `watch.poll` with a
//!   client-held cursor, resuming across reconnects and failover.
//! - [`kv_cache`]: [`KvCache`], a local `BTreeMap` of a prefix kept in step: a read, then a
//!   watch from its revision; on `compacted` it reads again.
//! - [`recipes`]: leader election and double barriers; config distribution, presence, a
//!   counter and a work queue on keys (docs only).
//! - [`backoff`]: [`Backoff`], exponential bounds (from `backon`) with full jitter.
//! - `request_id`: ids unique per agent across restarts (`{random boot}-{counter}`).
//! - [`error`]: [`AgentError`], the one error type.
//!
//! # Data flow
//!
//! ```text
//!  application task                          connection task (polls rumqttc, never publishes)
//!  ───────────────                           ──────────────────────────────────────────────
//!  session.lock("pad-3")                      EventLoop::poll()
//!   └▶ Agent::call: id = {boot}-{n}             ├ ConnAck ─▶ SUBSCRIBE {p}/rsp/{agent},
//!      pending[id] = oneshot ◀─────────┐        │            {p}/evt/{agent} (QoS 1)
//!      publish {p}/req/{agent} (QoS 1) │        ├ SubAck  ─▶ link ready (epoch + 1)
//!      wait: response | attempt timeout│        ├ Publish rsp ─▶ pending[id].send ──┘
//!            | link lost | deadline    │        ├ Publish evt ─▶ broadcast<Event> ─▶ keepers
//!      resend SAME id after backoff    │        └ Err ─▶ link down, backoff, next broker
//!                                      │
//!  keeper task (one per session)       │
//!   every TTL/3: lease.keepalive ──────┘ ack ─▶ deadline = send time + TTL − margin
//!   deadline passed ─▶ Jeopardy (lost() resolves); lease.expired / lease_not_found ─▶ Expired
//! ```

pub mod agent;
pub mod airspace;
pub mod backoff;
pub mod barrier;
mod claim;
pub mod config;
mod connection;
pub mod election;
pub mod error;
pub mod guard;
mod hold_watch;
pub mod kv;
pub mod kv_cache;
pub mod observe;
pub mod recipes;
mod request_id;
mod resource;
pub mod session;
pub mod watch;

pub use agent::{Agent, AgentStats};
pub use airspace::{AirspaceQuery, QueryShape};
pub use backoff::Backoff;
pub use barrier::Barrier;
pub use config::{
    AgentConfig, BadBrokerAddr, BrokerAddr, BrokerOrder, DEFAULT_BROKER, DEFAULTS, Secret,
};
pub use election::{Leadership, LeadershipEnd};
pub use error::{AgentError, CredentialsRefusal, TlsFailure};
pub use guard::{AcquireOptions, Geometry, Guard, HoldEnd, Preempted, Resource, TimeWindow, Wait};
pub use hivekeeper_protocol::{ConflictPage, LockMode, Priority};
pub use hivekeeper_protocol::{KeyValue, KvDeleted, KvPage, KvPutDone, KvTxnDone};
pub use kv::{KeyRead, Kv, Txn};
pub use kv_cache::{CacheSnapshot, KvCache};
pub use observe::{Leader, Observe};
pub use session::{Session, SessionOptions, SessionState};
pub use watch::{Watch, WatchItem};

/// The wire types (`Op`, `Success`, `Event`, `ErrorCode`, ...), re-exported so an agent needs
/// only this crate.
pub use hivekeeper_protocol as protocol;
