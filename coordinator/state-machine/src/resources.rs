//! `admin.resources`: the resources held or waited for now, a page at a time, for operators
//! who do not know a resource's exact name (discovery; `inspect` then shows one in full).
//!
//! Invariants:
//! 1. A page lists resources in (kind, name) order: locks, then semaphores, then waypoints,
//!    then barriers, each by name bytes; `next_after` is the last one's cursor `kind/name` and
//!    is present exactly when more matching resources follow it.
//! 2. A resource is listed while it exists in the state: a lock or semaphore while it has a
//!    holder (a released one with no holder is gone), a waypoint name while it is held or
//!    waited for, a barrier while anyone is in it.
//! 3. Reading changes nothing (a query, no log entry).

use hivekeeper_protocol::validate::{RESOURCE_PAGE_MAX, resource_cursor};
use hivekeeper_protocol::{ErrorCode, ResourceInfo, ResourceKind};

use super::{Decision, Reply, StateMachine};

/// `admin.resources`' fields, as the machine reads them.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResourceQuery<'a> {
    /// Only this kind; `None`: every kind.
    pub kind: Option<ResourceKind>,
    /// Only names starting with this.
    pub prefix: Option<&'a str>,
    /// Only resources after this cursor (`kind/name`).
    pub after: Option<&'a str>,
    /// Most resources in the page; `None`: [`RESOURCE_PAGE_MAX`].
    pub limit: Option<u32>,
}

impl StateMachine {
    /// One page of `admin.resources` (invariant 1). A malformed cursor or limit is
    /// `bad_request`, as the wire decoder words it.
    pub(crate) fn resource_page(&self, query: ResourceQuery<'_>) -> Decision {
        let refused = |message: String| {
            Reply::refused(ErrorCode::BadRequest, format!("admin.resources: {message}"))
        };
        let after = query.after.map(resource_cursor).transpose();
        let after = after.map_err(|invalid| refused(invalid.to_string()))?;
        let limit = query.limit.unwrap_or(RESOURCE_PAGE_MAX);
        if limit == 0 || limit > RESOURCE_PAGE_MAX {
            let message = format!("`limit` is {limit}, it must be from 1 to {RESOURCE_PAGE_MAX}");
            return Err(refused(message));
        }
        let limit = limit as usize;
        let prefix = query.prefix.unwrap_or("");
        let mut resources: Vec<ResourceInfo> = Vec::new();
        for kind in ResourceKind::ALL {
            if query.kind.is_some_and(|wanted| wanted != kind) {
                continue;
            }
            // Names of this kind past the cursor: all of them after an earlier kind's cursor,
            // none before a later kind's.
            let after_name = match after {
                Some((after_kind, _)) if after_kind > kind => continue,
                Some((after_kind, name)) if after_kind == kind => Some(name),
                _ => None,
            };
            let keep = |name: &str| {
                name.starts_with(prefix) && after_name.is_none_or(|after| name > after)
            };
            let mut page = self.resources_of(kind, &keep);
            page.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            // One more than the page, to know whether more follow.
            page.truncate(limit + 1 - resources.len());
            resources.extend(page);
            if resources.len() > limit {
                break;
            }
        }
        let more = resources.len() > limit;
        resources.truncate(limit);
        let next_after = more
            .then(|| resources.last())
            .flatten()
            .map(|last| format!("{}/{}", last.kind.as_str(), last.name));
        Ok(Reply::Resources {
            resources,
            next_after,
        })
    }

    /// Every resource of `kind` whose name `keep` accepts, unordered, with its counts.
    fn resources_of(&self, kind: ResourceKind, keep: &dyn Fn(&str) -> bool) -> Vec<ResourceInfo> {
        let info = |name: &str, holders: usize, waiters: usize| ResourceInfo {
            kind,
            name: name.to_string(),
            holders: holders as u64,
            waiters: waiters as u64,
        };
        let listed = self.resource(kind).list(keep).into_iter();
        listed
            .map(|(name, holders, waiters)| info(name, holders, waiters))
            .collect()
    }
}
