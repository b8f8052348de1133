//! [`Resource`]: what an acquire asks for (a lock exclusive or shared, a multi-lock, permits,
//! a reservation), with [`Wait`] (how long it may queue) and [`AcquireOptions`] (how it is
//! held: a max-hold), and the requests that take and give each back. Re-exported by
//! [`crate::guard`], whose [`Guard`](crate::Guard) a grant returns.

use std::time::Duration;

use hivekeeper_protocol::{Area, LockMode, Op, Priority, ResourceKind, Volume};

use crate::error::AgentError;
#[cfg(doc)]
use crate::guard::{Guard, HoldEnd};
#[cfg(doc)]
use crate::session::Session;

/// The vertical cylinder of a waypoint reservation (the protocol's `Area`): centre `lat`/`lon`
/// in degrees, `radius_m`, and an optional altitude band.
pub type Geometry = Area;

/// The time window of a waypoint reservation: `[start_ms, end_ms)` in UTC milliseconds since
/// the Unix epoch, compared by the service with the time of the log entry that applies the
/// request. Without a start it begins at once; without an end it lasts until released. The
/// default (neither) covers all time, as a reservation without a window always has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeWindow {
    /// First instant covered; `None`: from the request's time.
    pub start_ms: Option<u64>,
    /// First instant no longer covered; `None`: until released. The service ends the
    /// reservation by itself then (the guard's token stops being valid).
    pub end_ms: Option<u64>,
}

impl TimeWindow {
    /// `[start_ms, end_ms)`.
    pub fn between(start_ms: u64, end_ms: u64) -> TimeWindow {
        TimeWindow {
            start_ms: Some(start_ms),
            end_ms: Some(end_ms),
        }
    }

    /// From now until `end_ms`.
    pub fn until(end_ms: u64) -> TimeWindow {
        TimeWindow {
            start_ms: None,
            end_ms: Some(end_ms),
        }
    }
}

/// What to acquire.
#[derive(Debug, Clone, PartialEq)]
pub enum Resource {
    /// A FIFO lock, exclusive (a writer) or shared (a reader).
    Lock {
        /// The lock's name.
        name: String,
        /// Exclusive ([`Resource::lock`]) or shared with other shared holders
        /// ([`Resource::read_lock`]); strict FIFO whatever the mode, so a waiting writer is
        /// never overtaken by later readers.
        mode: LockMode,
    },
    /// Several locks at once (`lock.acquire_all`), all in one mode: granted together with one
    /// token, or queued FIFO as a unit, so taking them can never deadlock against another
    /// multi-lock naming them in another order. A multi-lock is a lock of each of its names
    /// (`kind` is lock).
    LockAll {
        /// The locks' names: 1 to 64, distinct, in any order.
        names: Vec<String>,
        /// The mode of every one of them.
        mode: LockMode,
    },
    /// Permits of a counting semaphore.
    Semaphore {
        /// The semaphore's name.
        name: String,
        /// Its capacity; the first acquirer fixes it.
        limit: u32,
        /// How many permits to take, 1 to `limit`.
        permits: u32,
    },
    /// A waypoint reservation.
    Waypoint {
        /// The waypoint's name.
        name: String,
        /// The cylinder it also claims; `None` conflicts by name only.
        geometry: Option<Geometry>,
        /// When: two cylinders conflict only if their windows overlap.
        window: TimeWindow,
        /// The priority, 0 (routine) to 3 (emergency). A reservation in the way only of lower
        /// priorities preempts them instead of waiting behind them.
        priority: Priority,
    },
    /// A whole route (`route.reserve`): 1 to 64 4D volumes granted all or nothing with one
    /// token. A route is a waypoint reservation of its name (`kind` is waypoint).
    Route {
        /// The route's name.
        name: String,
        /// Its volumes, in flight order.
        volumes: Vec<Volume>,
        /// As for [`Resource::Waypoint`]'s.
        priority: Priority,
    },
}

impl Resource {
    /// The lock `name`, exclusive.
    pub fn lock(name: impl Into<String>) -> Resource {
        Resource::Lock {
            name: name.into(),
            mode: LockMode::Exclusive,
        }
    }

    /// The lock `name`, shared with any other shared holders (a read lock).
    pub fn read_lock(name: impl Into<String>) -> Resource {
        Resource::Lock {
            name: name.into(),
            mode: LockMode::Shared,
        }
    }

    /// The locks `names`, all in `mode`, as one multi-lock.
    pub fn lock_all<N: Into<String>>(
        names: impl IntoIterator<Item = N>,
        mode: LockMode,
    ) -> Resource {
        Resource::LockAll {
            names: names.into_iter().map(Into::into).collect(),
            mode,
        }
    }

    /// Lock, semaphore or waypoint.
    pub fn kind(&self) -> ResourceKind {
        match self {
            Resource::Lock { .. } | Resource::LockAll { .. } => ResourceKind::Lock,
            Resource::Semaphore { .. } => ResourceKind::Sem,
            Resource::Waypoint { .. } | Resource::Route { .. } => ResourceKind::Waypoint,
        }
    }

    /// The priority asked for: routine for locks and semaphores, which have none.
    pub fn priority(&self) -> Priority {
        match self {
            Resource::Waypoint { priority, .. } | Resource::Route { priority, .. } => *priority,
            Resource::Lock { .. } | Resource::LockAll { .. } | Resource::Semaphore { .. } => {
                Priority::ROUTINE
            }
        }
    }

    /// The lock mode asked for; `None` for a semaphore or a reservation.
    pub fn mode(&self) -> Option<LockMode> {
        match self {
            Resource::Lock { mode, .. } | Resource::LockAll { mode, .. } => Some(*mode),
            _ => None,
        }
    }

    /// The resource's name (a multi-lock's first; empty for a multi-lock of none, which the
    /// acquire refuses).
    pub fn name(&self) -> &str {
        match self {
            Resource::LockAll { names, .. } => names.first().map_or("", String::as_str),
            Resource::Lock { name, .. }
            | Resource::Semaphore { name, .. }
            | Resource::Waypoint { name, .. }
            | Resource::Route { name, .. } => name,
        }
    }

    /// Every name the grant will hold: one, or a multi-lock's.
    pub(crate) fn names(&self) -> Vec<String> {
        match self {
            Resource::LockAll { names, .. } => names.clone(),
            _ => vec![self.name().to_string()],
        }
    }

    /// The acquire request for it under `lease`. [`AgentError::Config`] for a `max_hold` on a
    /// waypoint or a route, which have none (their own bound is a time window).
    pub(crate) fn acquire_op(
        &self,
        lease: &str,
        wait_ms: Option<u64>,
        options: AcquireOptions,
    ) -> Result<Op, AgentError> {
        let lease = lease.to_string();
        let max_hold_ms = options.max_hold_ms();
        if max_hold_ms.is_some() && self.kind() == ResourceKind::Waypoint {
            return Err(AgentError::Config(format!(
                "max_hold applies to locks and semaphores; the reservation {:?} is bounded by \
                 its time window instead",
                self.name()
            )));
        }
        Ok(match self {
            Resource::Lock { name, mode } => Op::LockAcquire {
                name: name.clone(),
                lease,
                wait_ms,
                max_hold_ms,
                mode: *mode,
            },
            Resource::LockAll { names, mode } => Op::LockAcquireAll {
                names: names.clone(),
                lease,
                wait_ms,
                max_hold_ms,
                mode: *mode,
            },
            Resource::Semaphore {
                name,
                limit,
                permits,
            } => Op::SemAcquire {
                name: name.clone(),
                limit: *limit,
                lease,
                permits: *permits,
                wait_ms,
                max_hold_ms,
            },
            Resource::Waypoint {
                name,
                geometry,
                window,
                priority,
            } => Op::WaypointReserve {
                name: name.clone(),
                lease,
                lat: geometry.map(|g| g.lat),
                lon: geometry.map(|g| g.lon),
                alt_min_m: geometry.and_then(|g| g.alt_min_m),
                alt_max_m: geometry.and_then(|g| g.alt_max_m),
                radius_m: geometry.map(|g| g.radius_m),
                wait_ms,
                start_ms: window.start_ms,
                end_ms: window.end_ms,
                priority: *priority,
            },
            Resource::Route {
                name,
                volumes,
                priority,
            } => Op::RouteReserve {
                name: name.clone(),
                lease,
                volumes: volumes.clone(),
                wait_ms,
                priority: *priority,
            },
        })
    }

    /// The release request for it under `lease`.
    pub(crate) fn release_op(&self, lease: &str) -> Op {
        release_op(self.kind(), &self.names(), lease)
    }
}

/// The request that ends a hold of `names` (one, or a multi-lock's, released together by
/// `lock.release_all`) under `lease`.
pub(crate) fn release_op(kind: ResourceKind, names: &[String], lease: &str) -> Op {
    let lease = lease.to_string();
    if let [_, _, ..] = names {
        return Op::LockReleaseAll {
            names: names.to_vec(),
            lease,
        };
    }
    let name = names[0].clone();
    match kind {
        ResourceKind::Lock => Op::LockRelease { name, lease },
        ResourceKind::Sem => Op::SemRelease { name, lease },
        ResourceKind::Waypoint => Op::WaypointRelease { name, lease },
        ResourceKind::Election => unreachable!(
            "a guard holds a lock, a semaphore or a waypoint ([`Resource::kind`]), never an \
             election, which is left by `election.resign` with its token"
        ),
        ResourceKind::Barrier => unreachable!(
            "a guard holds a lock, a semaphore or a waypoint ([`Resource::kind`]), never a \
             barrier, which is left by `barrier.leave`"
        ),
    }
}

/// How long an acquire may wait in the service's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Until granted, while the session is live (no `wait_ms`).
    UntilGranted,
    /// Not at all: grant now or [`AgentError::WouldBlock`] (`wait_ms: 0`).
    Try,
    /// At most this long, then [`AgentError::WaitTimeout`] (`wait_ms`, at most one day).
    AtMost(Duration),
}

impl Wait {
    /// The wait a `wait_ms` field asks for, as the protocol reads it: absent, until granted;
    /// 0, a try; `n`, at most n ms. The inverse of [`Wait::wait_ms`].
    pub fn from_wait_ms(wait_ms: Option<u64>) -> Wait {
        match wait_ms {
            None => Wait::UntilGranted,
            Some(0) => Wait::Try,
            Some(wait_ms) => Wait::AtMost(Duration::from_millis(wait_ms)),
        }
    }

    /// The `wait_ms` field this sends.
    pub fn wait_ms(self) -> Option<u64> {
        match self {
            Wait::UntilGranted => None,
            Wait::Try => Some(0),
            // Out of range (over a day) is refused by validation, not silently shortened.
            Wait::AtMost(wait) => Some(whole_ms(wait)),
        }
    }
}

/// `duration` in whole milliseconds, `u64::MAX` past that: the op's validation refuses a
/// value out of its range rather than have it silently shortened here.
pub(crate) fn whole_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// How an acquire asks to be held, beyond what and how long to wait; the default asks for
/// nothing more. Passed to [`Session::acquire_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AcquireOptions {
    /// The hold ends this long after its grant, whether or not the session lives
    /// (`max_hold_ms`, at least 1 ms and at most the service's longest lease TTL): a stuck or
    /// forgetful holder cannot keep a lock or permits forever. The guard's
    /// [`Guard::ended`] then resolves [`HoldEnd::MaxHold`]. Locks, multi-locks (all their
    /// locks end together) and semaphores; a waypoint or route with it is refused
    /// ([`AgentError::Config`]). `None`, the default: no bound.
    pub max_hold: Option<Duration>,
}

impl AcquireOptions {
    /// Options with a max-hold of `max_hold`.
    pub fn max_hold(max_hold: Duration) -> AcquireOptions {
        AcquireOptions {
            max_hold: Some(max_hold),
        }
    }

    /// The `max_hold_ms` field this sends.
    fn max_hold_ms(self) -> Option<u64> {
        self.max_hold.map(whole_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_reads_back_from_the_wait_ms_it_sends() {
        for wait_ms in [None, Some(0), Some(1), Some(2_500)] {
            assert_eq!(Wait::from_wait_ms(wait_ms).wait_ms(), wait_ms);
        }
    }

    #[test]
    fn a_multi_lock_is_released_together_and_a_single_lock_alone() {
        let all = Resource::lock_all(["bay/1", "bay/2"], LockMode::Shared);
        assert_eq!(
            all.release_op("L"),
            Op::LockReleaseAll {
                names: vec!["bay/1".into(), "bay/2".into()],
                lease: "L".into(),
            }
        );
        assert_eq!(
            Resource::read_lock("db").release_op("L"),
            Op::LockRelease {
                name: "db".into(),
                lease: "L".into(),
            }
        );
    }

    #[test]
    fn max_hold_goes_on_locks_and_semaphores_but_not_on_reservations() {
        let options = AcquireOptions::max_hold(Duration::from_millis(1_500));
        let op = Resource::read_lock("db")
            .acquire_op("L", None, options)
            .expect("a lock takes a max-hold");
        assert_eq!(op.max_hold_ms(), Some(1_500));
        assert!(matches!(
            op,
            Op::LockAcquire {
                mode: LockMode::Shared,
                ..
            }
        ));
        let waypoint = Resource::Waypoint {
            name: "pad".into(),
            geometry: None,
            window: TimeWindow::default(),
            priority: Priority::ROUTINE,
        };
        assert!(matches!(
            waypoint.acquire_op("L", None, options),
            Err(AgentError::Config(_))
        ));
    }
}
