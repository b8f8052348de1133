//! The range checks of an op's fields, run after serde has checked their presence and
//! types, and the geometry of a waypoint reservation, shared with the state machine.

use super::{Area, Op};
use crate::airspace;
use crate::kv;
use crate::kv_access;
use crate::validate;

impl Op {
    /// Checks every field's range. Serde has already checked presence and types.
    pub fn validate(&self) -> Result<(), validate::InvalidField> {
        if let Some(lease) = self.lease() {
            validate::name("lease", lease)?;
        }
        self.validate_times()?;
        match self {
            Op::LeaseGrant { ttl_ms, .. } => validate::ttl_ms(*ttl_ms)?,
            Op::LeaseKeepalive { .. }
            | Op::LeaseRevoke { .. }
            | Op::AdminStatus {}
            | Op::AdminRevoke { .. } => {}
            Op::AdminLeases { .. }
            | Op::AdminResources { .. }
            | Op::AdminSnapshot { .. }
            | Op::AdminMemberAdd { .. }
            | Op::AdminMemberRemove { .. } => self.validate_admin()?,
            Op::AdminAgentAdd { .. }
            | Op::AdminAgentRemove { .. }
            | Op::AdminAgentRotate { .. }
            | Op::AdminAgentList { .. } => self.validate_account()?,
            Op::LockAcquire { name, .. }
            | Op::LockRelease { name, .. }
            | Op::LockDowngrade { name, .. }
            | Op::SemRelease { name, .. }
            | Op::WaypointRelease { name, .. }
            | Op::RouteRelease { name, .. }
            | Op::Inspect { name, .. }
            | Op::BarrierLeave { name, .. } => validate::name("name", name)?,
            Op::LockAcquireAll { names, .. } | Op::LockReleaseAll { names, .. } => {
                validate::lock_names(names)?
            }
            Op::ElectionCampaign { name, .. }
            | Op::ElectionProclaim { name, .. }
            | Op::ElectionResign { name, .. }
            | Op::ElectionLeader { name } => validate::name("name", name)?,
            Op::RouteReserve { name, volumes, .. } | Op::RouteAmend { name, volumes, .. } => {
                validate::name("name", name)?;
                validate::volumes(volumes)?;
            }
            Op::SemAcquire {
                name,
                limit,
                permits,
                ..
            } => {
                validate::name("name", name)?;
                validate::sem_acquire(*limit, *permits)?;
            }
            Op::WaypointReserve {
                name,
                start_ms,
                end_ms,
                ..
            } => {
                validate::name("name", name)?;
                self.area()?;
                validate::window(*start_ms, *end_ms)?;
            }
            Op::FenceCheck { name, .. } => validate::name("name", name)?,
            Op::BarrierEnter { name, count, .. } => {
                validate::name("name", name)?;
                validate::barrier_count(*count)?;
            }
            Op::KvPut { .. }
            | Op::KvGet { .. }
            | Op::KvDelete { .. }
            | Op::KvTxn { .. }
            | Op::WatchPoll { .. } => self.validate_keys()?,
            Op::AirspaceQuery {
                volume,
                volumes,
                after,
                limit,
            } => airspace::check_query(
                volume.as_ref(),
                volumes.as_deref(),
                after.as_deref(),
                *limit,
            )?,
        }
        Ok(())
    }

    /// The checks of the times an op asks for: a wait's `wait_ms`, a lease's `lock_delay_ms`
    /// and an acquire's `max_hold_ms`.
    fn validate_times(&self) -> Result<(), validate::InvalidField> {
        validate::wait_ms(self.wait_ms())?;
        if let Op::LeaseGrant { lock_delay_ms, .. } = self {
            validate::lock_delay_ms(*lock_delay_ms)?;
        }
        validate::max_hold_ms(self.max_hold_ms())
    }

    /// The checks of the admin ops that take arguments: pages, snapshots and members.
    fn validate_admin(&self) -> Result<(), validate::InvalidField> {
        match self {
            Op::AdminLeases { after: Some(after) } => validate::name("after", after)?,
            Op::AdminResources {
                prefix,
                after,
                limit,
                ..
            } => validate::resource_page(prefix.as_deref(), after.as_deref(), *limit)?,
            Op::AdminSnapshot {
                index,
                offset,
                page_bytes_max,
            } => validate::snapshot_page(*index, *offset, *page_bytes_max)?,
            Op::AdminMemberAdd {
                name,
                addr,
                catch_up_timeout_ms,
                ..
            } => {
                validate::member_name(name)?;
                validate::member_addr(addr)?;
                if let Some(timeout_ms) = catch_up_timeout_ms {
                    validate::catch_up_timeout_ms(*timeout_ms)?;
                }
            }
            Op::AdminMemberRemove { name } => validate::member_name(name)?,
            _ => {}
        }
        Ok(())
    }

    /// The checks of the account ops (`admin.agent.*`): names and key permissions.
    fn validate_account(&self) -> Result<(), validate::InvalidField> {
        match self {
            Op::AdminAgentAdd {
                name,
                role,
                kv_read,
                kv_write,
            } => {
                validate::account_name(name)?;
                kv_access::check_prefixes(role.unwrap_or_default(), kv_read, kv_write)?;
            }
            Op::AdminAgentRemove { name } | Op::AdminAgentRotate { name } => {
                validate::account_name(name)?
            }
            Op::AdminAgentList { after: Some(after) } => validate::account_name(after)?,
            _ => {}
        }
        Ok(())
    }

    /// The checks of the key ops (`kv.*`, `watch.poll`): keys, selectors, pages and txns.
    fn validate_keys(&self) -> Result<(), validate::InvalidField> {
        match self {
            Op::KvPut { key, .. } => kv::check_key("key", key, true)?,
            Op::KvGet {
                key,
                prefix,
                after,
                limit,
                ..
            } => {
                let selector = kv::check_selector(key.as_deref(), prefix.as_deref(), false)?;
                kv::check_page(&selector, after.as_deref(), *limit)?;
            }
            Op::KvDelete { key, prefix } => {
                kv::check_selector(key.as_deref(), prefix.as_deref(), true)?;
            }
            Op::WatchPoll {
                key,
                prefix,
                after_key,
                max_events,
                wait_ms,
                ..
            } => {
                kv::check_watch(
                    key.as_deref(),
                    prefix.as_deref(),
                    after_key.as_deref(),
                    *max_events,
                    *wait_ms,
                )?;
            }
            Op::KvTxn {
                compare,
                success,
                failure,
            } => kv::check_txn(compare, success, failure)?,
            _ => {}
        }
        Ok(())
    }

    /// The reservation's cylinder, for a `waypoint.reserve` with `lat` and `lon`; `Ok(None)`
    /// without geometry or for another op. Errors on partial or out-of-range geometry.
    pub fn area(&self) -> Result<Option<Area>, validate::InvalidField> {
        let Op::WaypointReserve {
            lat,
            lon,
            alt_min_m,
            alt_max_m,
            radius_m,
            ..
        } = self
        else {
            return Ok(None);
        };
        Area::from_fields(*lat, *lon, *alt_min_m, *alt_max_m, *radius_m)
    }
}

impl Area {
    /// Checks a cylinder built from a volume against the wire's ranges, as
    /// [`Area::from_fields`] checks a `waypoint.reserve`'s fields.
    pub fn check_ranges(&self) -> Result<(), validate::InvalidField> {
        Area::from_fields(
            Some(self.lat),
            Some(self.lon),
            self.alt_min_m,
            self.alt_max_m,
            Some(self.radius_m),
        )
        .map(|_| ())
    }

    /// The cylinder a `waypoint.reserve`'s optional geometry fields describe: `Ok(None)`
    /// without `lat` and `lon`. Errors on partial or out-of-range geometry. Shared by the wire
    /// decoder and the state machine, which checks a request again when it applies it.
    pub fn from_fields(
        lat: Option<f64>,
        lon: Option<f64>,
        alt_min_m: Option<f64>,
        alt_max_m: Option<f64>,
        radius_m: Option<f64>,
    ) -> Result<Option<Area>, validate::InvalidField> {
        let (lat, lon) = match (lat, lon) {
            (Some(lat), Some(lon)) => (lat, lon),
            (None, None) => {
                if radius_m.is_some() || alt_min_m.is_some() || alt_max_m.is_some() {
                    return Err(
                        "`radius_m`, `alt_min_m` and `alt_max_m` need `lat` and `lon`".into(),
                    );
                }
                return Ok(None);
            }
            _ => return Err("`lat` and `lon` go together: give both or neither".into()),
        };
        validate::float_in("lat", lat, -90.0, 90.0)?;
        validate::float_in("lon", lon, -180.0, 180.0)?;
        let radius_m = radius_m.unwrap_or(0.0);
        validate::float_in("radius_m", radius_m, 0.0, validate::RADIUS_M_MAX)?;
        if let Some(alt) = alt_min_m {
            validate::float_in("alt_min_m", alt, validate::ALT_M_MIN, validate::ALT_M_MAX)?;
        }
        if let Some(alt) = alt_max_m {
            validate::float_in("alt_max_m", alt, validate::ALT_M_MIN, validate::ALT_M_MAX)?;
        }
        if let (Some(min), Some(max)) = (alt_min_m, alt_max_m)
            && min > max
        {
            return Err(format!("`alt_min_m` ({min}) is above `alt_max_m` ({max})").into());
        }
        Ok(Some(Area {
            lat,
            lon,
            radius_m,
            alt_min_m,
            alt_max_m,
        }))
    }
}
