//! [`AirspaceQuery`]: which held reservations a planned volume or route would conflict with
//! (`airspace.query`, docs/PROTOCOL.md §8.9.5), without reserving anything.
//!
//! A planner asks before it reserves, to pick a slot that is free: the answer is one page of
//! the protocol's own [`ConflictInfo`](hivekeeper_protocol::ConflictInfo) rows in name order, and the `next_after` to ask for the
//! next page with. The conflict test is the one a grant uses (space **and** time, half-open
//! windows), so an empty answer means a reserve of the same airspace would be granted at once,
//! unless a request still *waiting* is queued ahead (waiters hold nothing and are not listed).
//!
//! ```text
//!  AirspaceQuery::route(volumes).limit(10) ──▶ Agent::airspace_query
//!     Op::AirspaceQuery ─▶ checked locally (the service's own rules) ─▶ Agent::request
//!     ◀── ConflictPage { conflicts, next_after } ◀── Success::Conflicts
//!  next page: query.after(next_after)
//! ```

use hivekeeper_protocol::{ConflictPage, Op, QueryVolume, Volume};

use crate::agent::Agent;
use crate::error::AgentError;

/// The airspace an [`AirspaceQuery`] asks about: exactly one cylinder or one route, as the
/// wire's `volume` and `volumes` (of which the service takes exactly one).
#[derive(Debug, Clone, PartialEq)]
pub enum QueryShape {
    /// One cylinder, its window optional (without `start_ms` from the service's time on,
    /// without `end_ms` with no end).
    Volume(QueryVolume),
    /// A route's volumes, 1 to 64, each with its window, as `route.reserve` takes them.
    Route(Vec<Volume>),
}

/// One `airspace.query` request: the airspace, and which page of its conflicts.
///
/// Built with [`AirspaceQuery::volume`] or [`AirspaceQuery::route`]; [`AirspaceQuery::after`]
/// and [`AirspaceQuery::limit`] page through the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct AirspaceQuery {
    /// The cylinder or the route to check.
    pub shape: QueryShape,
    /// Only reservations whose name sorts after this one (a page's
    /// [`ConflictPage::next_after`]); `None` starts from the first name.
    pub after: Option<String>,
    /// Most reservations in the page, 1 to 100 (`CONFLICT_PAGE_MAX`); `None` asks for the
    /// service's maximum.
    pub limit: Option<u32>,
}

impl AirspaceQuery {
    /// The conflicts of one cylinder, from the first page on.
    pub fn volume(volume: QueryVolume) -> AirspaceQuery {
        AirspaceQuery {
            shape: QueryShape::Volume(volume),
            after: None,
            limit: None,
        }
    }

    /// The conflicts of a route's `volumes`, from the first page on.
    pub fn route(volumes: Vec<Volume>) -> AirspaceQuery {
        AirspaceQuery {
            shape: QueryShape::Route(volumes),
            after: None,
            limit: None,
        }
    }

    /// The page after the reservation `name` (the previous page's `next_after`).
    pub fn after(mut self, name: impl Into<String>) -> AirspaceQuery {
        self.after = Some(name.into());
        self
    }

    /// At most `limit` reservations in a page.
    pub fn limit(mut self, limit: u32) -> AirspaceQuery {
        self.limit = Some(limit);
        self
    }

    /// The wire request.
    pub(crate) fn op(&self) -> Op {
        let (volume, volumes) = match &self.shape {
            QueryShape::Volume(volume) => (Some(*volume), None),
            QueryShape::Route(volumes) => (None, Some(volumes.clone())),
        };
        Op::AirspaceQuery {
            volume,
            volumes,
            after: self.after.clone(),
            limit: self.limit,
        }
    }
}

impl Agent {
    /// `airspace.query`: one page of the held reservations (waypoints with geometry, and
    /// routes) that `query`'s cylinder or route would conflict with, in space and time.
    /// Reserves nothing and needs no session; a linearizable read, like `inspect`.
    ///
    /// A query the service would refuse (neither volume nor route, a route of 0 or more than
    /// 64 volumes, an empty window, a `limit` outside 1 to 100) is refused here with the
    /// service's code and message, [`AgentError::Service`] with `bad_request`, and nothing is
    /// sent; what only the service can check (a window in the past or too far ahead) comes
    /// back from it the same way.
    ///
    /// ```no_run
    /// # async fn plan(
    /// #     agent: &hivekeeper_agent::Agent,
    /// #     legs: Vec<hivekeeper_agent::protocol::Volume>,
    /// # ) -> Result<(), hivekeeper_agent::AgentError> {
    /// use hivekeeper_agent::AirspaceQuery;
    /// let mut query = AirspaceQuery::route(legs);
    /// loop {
    ///     let page = agent.airspace_query(&query).await?;
    ///     for row in &page.conflicts {
    ///         println!("{} is in the way", row.name);
    ///     }
    ///     let Some(next) = page.next_after else { break };
    ///     query = query.after(next);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn airspace_query(&self, query: &AirspaceQuery) -> Result<ConflictPage, AgentError> {
        let op = query.op();
        AgentError::check_locally(&op)?;
        self.request_as(op).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cylinder() -> QueryVolume {
        QueryVolume {
            lat: 47.3769,
            lon: 8.5417,
            radius_m: 20.0,
            alt_min_m: 0.0,
            alt_max_m: 120.0,
            start_ms: Some(1_000),
            end_ms: None,
        }
    }

    #[test]
    fn a_volume_query_sends_volume_after_and_limit_and_no_volumes() {
        let query = AirspaceQuery::volume(cylinder()).after("east").limit(7);
        assert_eq!(
            query.op(),
            Op::AirspaceQuery {
                volume: Some(cylinder()),
                volumes: None,
                after: Some("east".into()),
                limit: Some(7),
            }
        );
    }
}
