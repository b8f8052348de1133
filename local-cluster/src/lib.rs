//! # hivekeeper-local-cluster: real `serve` processes on this machine, and a raw MQTT client
//!
//! What the two tools that drive Hivekeeper from outside share, and nothing else of either:
//! `hivekeeper bench failover` (a user-facing measurement: it starts its own cluster and kills
//! its leader again and again) and `hivekeeper-nemesis` (the fault test: partitions, clock
//! jumps, full disks). Both start a cluster of real `hivekeeper serve` child processes here,
//! and both need a plain MQTT client that does not behave as the SDK does (the bench's flooder
//! must not back off, the nemesis's sentinels must not leave a member). A crate of its own so
//! that the `hivekeeper` binary links the launcher for its bench without linking the nemesis.
//!
//! # Layout
//! - [`cluster`]: [`Cluster`] and its [`Member`]s: start, find the leader, kill, pause,
//!   restart, and (as root, in network namespaces) cut links, move a member's wall clock and
//!   fill its disk; [`send_signal`], the one way the tools signal a process.
//! - `netns`: the members' network namespaces, their bridge and the iptables cuts.
//! - [`raw_mqtt`]: the raw client (clean session, TCP_NODELAY, a bounded connect) and its
//!   polling task.
//! - [`Error`]: every failure of this crate, with what was being done.
//!
//! ```text
//!  Cluster::start(hivekeeper binary, root dir, Options)
//!    ├─ netns::Network::create (netns mode) or free loopback ports
//!    ├─ per member: data dir (tmpfs), faketime file, `hivekeeper serve --name nK …` child
//!    └─ waits for a leader (the members' /metrics)
//!  Cluster drops: members killed, namespaces, bridge and mounts removed, then the files
//! ```

pub mod cluster;
mod error;
mod netns;
pub mod raw_mqtt;

pub use cluster::{Cluster, LIBFAKETIME, Member, Options, gauge, scrape, send_signal};
pub use error::Error;
