//! What `inspect` answers: who holds one resource and who waits for it, in queue order.

use serde::{Deserialize, Serialize};

use crate::lock_mode::LockMode;
use crate::priority::Priority;
use crate::request::{Area, Volume};

/// The answer to `inspect`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inspection {
    /// A semaphore's capacity (semaphores only).
    pub limit: Option<u32>,
    /// How many members the barrier's round filling now needs (barriers only, while a round
    /// fills).
    pub count: Option<u32>,
    /// Who holds the resource.
    pub holders: Vec<HolderInfo>,
    /// Who waits for it, in queue order.
    pub waiters: Vec<WaiterInfo>,
    /// How many members of the barrier's passed rounds have sent `barrier.leave` and wait for
    /// the rest of their round (barriers only, when any do); `holders` lists the members that
    /// have not.
    pub leaving: Option<u32>,
    /// How many hold the resource, present only when `holders` lists just the first ones
    /// because the whole answer would not fit in one MQTT packet ([`super::Response::encode_within`]).
    pub holders_total: Option<u64>,
    /// How many wait, present only when `waiters` lists just the first ones in queue order, for
    /// the same reason.
    pub waiters_total: Option<u64>,
}

/// Declares one row of an `inspect` result: the fields written before `..reservation`, then
/// what a waypoint or route reservation asks for (one list for holders and waiters, so the two
/// rows name, document and serialize it alike), then the fields written after.
macro_rules! inspect_row {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$head_meta:meta])* pub $head:ident: $head_ty:ty,)*
            ..reservation,
            $($(#[$tail_meta:meta])* pub $tail:ident: $tail_ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$head_meta])* pub $head: $head_ty,)*
            /// The reservation's cylinder (waypoints reserved with geometry only).
            pub area: Option<Area>,
            /// Start of the reservation's time window, ms since the Unix epoch (waypoints
            /// reserved with a window only).
            pub start_ms: Option<u64>,
            /// End of the window, exclusive (waypoints reserved with an end only).
            pub end_ms: Option<u64>,
            /// A route's volumes, in flight order (routes only).
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub volumes: Vec<Volume>,
            /// The reservation's priority, when above routine (absent: 0, as in the request).
            /// A waiter's place in its queue follows priority and aging.
            pub priority: Option<Priority>,
            $($(#[$tail_meta])* pub $tail: $tail_ty,)*
        }
    };
}

inspect_row! {
    /// One holder in an `inspect` result.
    #[serde_with::skip_serializing_none]
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct HolderInfo {
        /// The holding agent.
        pub agent: String,
        /// The lease the hold is bound to. With authentication on, an `inspect` answered to a
        /// non-admin leaves out other agents' leases (the empty string, not sent): a lease id
        /// is what a request would need to act on a hold, so only its owner and admins see it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub lease: String,
        /// The hold's fencing token.
        pub token: u64,
        /// Permits held (semaphores only).
        pub permits: Option<u32>,
        /// When it was granted, milliseconds since the Unix epoch on the leader's clock.
        pub since_ms: u64,
        ..reservation,
        /// When a preempted reservation is ended unless released first (preempted waypoints
        /// and routes only).
        pub vacate_by_ms: Option<u64>,
        /// A lock hold's mode: `shared` for a shared hold; absent (exclusive) otherwise, as in
        /// the request.
        #[serde(default, skip_serializing_if = "LockMode::is_exclusive")]
        pub mode: LockMode,
        /// The leader's value (elections only).
        pub value: Option<String>,
    }
}

inspect_row! {
    /// One waiter in an `inspect` result.
    #[serde_with::skip_serializing_none]
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct WaiterInfo {
        /// The waiting agent.
        pub agent: String,
        /// Place in the queue, 1 for the next to be granted.
        pub position: u32,
        /// Permits asked for (semaphores only).
        pub permits: Option<u32>,
        /// When it started waiting, milliseconds since the Unix epoch on the leader's clock.
        pub since_ms: u64,
        ..reservation,
        /// The mode a lock waiter asks for: `shared`, or absent (exclusive), as in the request.
        #[serde(default, skip_serializing_if = "LockMode::is_exclusive")]
        pub mode: LockMode,
        /// The value the candidate campaigns with (elections only).
        pub value: Option<String>,
    }
}
