//! The reads of `/api/v1/`: each a [`View`] (what a URL asks for) and [`read`] (the protocol
//! requests that answer it, reshaped for a page). Every read is an existing op, asked as the
//! session's account, so the node checks roles exactly as it does over MQTT.
//!
//! ```text
//!  /api/v1/cluster                       ─▶ admin.status (+ the leader's unreachable members)
//!  /api/v1/resources?kind&prefix&after&limit&all ─▶ admin.resources, then inspect each row
//!  /api/v1/airspace?prefix&after&limit&all       ─▶ the same, kind = waypoint
//!  /api/v1/leases?after&holdings         ─▶ admin.leases (+ every resource's holders, joined)
//!  /api/v1/keys?prefix&after&limit       ─▶ kv.get with a prefix
//!  /api/v1/accounts?after                ─▶ admin.agent.list
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use hivekeeper_protocol::{
    AccountPage, ErrorCode, Inspection, KvPage, LeasePage, NodeStatus, Op, Request, ResourceInfo,
    ResourceKind, ResourcePage, Response, StatusReport, Success,
};
use serde::Serialize;
use serde_json::Value;

use crate::backend::{ConsoleBackend, Storage};
use crate::http::{ApiError, query_pairs};

/// Rows a read with `all` (or `holdings`) follows pages for, at most: past it the answer says
/// `truncated`.
pub const ALL_ROWS_MAX: usize = 10_000;

/// How often a request refused `rate_limited` is sent again ([`Reader::ask`]).
const RATE_LIMITED_RETRIES: u32 = 50;

/// How long [`Reader::ask`] waits before sending a `rate_limited` request again.
const RATE_LIMITED_PAUSE: Duration = Duration::from_millis(100);

/// Inspections of one page in flight at once.
const INSPECTIONS_IN_FLIGHT: usize = 16;

/// What one URL of the API asks for. Equal views read the same, so the hub reads each once for
/// every page that shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum View {
    /// This member's view of the cluster.
    Cluster,
    /// Resources with their holders and queues.
    Resources(ResourceQuery),
    /// Live leases.
    Leases {
        /// The previous page's `next_after`.
        after: Option<String>,
        /// Join what each lease holds (a walk of every resource).
        holdings: bool,
    },
    /// Keys under a prefix.
    Keys {
        /// The prefix (empty: every key).
        prefix: String,
        /// The previous page's `next_after`.
        after: Option<String>,
        /// Most keys in the page.
        limit: Option<u32>,
    },
    /// Accounts (admins only).
    Accounts {
        /// The previous page's `next_after`.
        after: Option<String>,
    },
}

/// Which resources a [`View::Resources`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ResourceQuery {
    /// Only this kind.
    pub kind: Option<ResourceKind>,
    /// Only names starting with this.
    pub prefix: Option<String>,
    /// The previous page's `next_after`.
    pub after: Option<String>,
    /// Most resources in the page (the op's bound applies).
    pub limit: Option<u32>,
    /// Follow the pages, up to [`ALL_ROWS_MAX`] rows.
    pub all: bool,
}

impl View {
    /// The view `/api/v1/{name}?{query}` asks for.
    pub fn parse(name: &str, query: Option<&str>) -> Result<View, ApiError> {
        let mut fields = Fields::new(query)?;
        let view = match name {
            "cluster" => View::Cluster,
            "resources" | "airspace" => {
                let kind = if name == "airspace" {
                    Some(ResourceKind::Waypoint)
                } else {
                    fields
                        .take("kind")
                        .map(|kind| {
                            ResourceKind::parse(&kind).ok_or_else(|| {
                                ApiError::bad_request(format!("kind {kind:?} is no resource kind"))
                            })
                        })
                        .transpose()?
                };
                View::Resources(ResourceQuery {
                    kind,
                    prefix: fields.take("prefix").filter(|prefix| !prefix.is_empty()),
                    after: fields.take("after"),
                    limit: fields.number("limit")?,
                    all: fields.flag("all")?,
                })
            }
            "leases" => View::Leases {
                after: fields.take("after"),
                holdings: fields.flag("holdings")?,
            },
            "keys" => View::Keys {
                prefix: fields.take("prefix").unwrap_or_default(),
                after: fields.take("after"),
                limit: fields.number("limit")?,
            },
            "accounts" => View::Accounts {
                after: fields.take("after"),
            },
            other => {
                return Err(ApiError::new(
                    ErrorCode::UnknownOp,
                    format!("/api/v1/{other} is not served: see docs/HTTP.md"),
                ));
            }
        };
        fields.done()?;
        Ok(view)
    }

    /// Whether what it shows changes without an applied entry (the cluster's members and
    /// indexes), so the hub also reads it on a timer.
    pub fn changes_unapplied(&self) -> bool {
        matches!(self, View::Cluster)
    }
}

/// A query string's fields, taken one by one; one left over is refused.
struct Fields(Vec<(String, String)>);

impl Fields {
    fn new(query: Option<&str>) -> Result<Fields, ApiError> {
        Ok(Fields(query_pairs(query)?))
    }

    fn take(&mut self, name: &str) -> Option<String> {
        let at = self.0.iter().position(|(field, _)| field == name)?;
        Some(self.0.remove(at).1)
    }

    fn number(&mut self, name: &str) -> Result<Option<u32>, ApiError> {
        self.take(name)
            .map(|text| {
                text.parse().map_err(|_| {
                    ApiError::bad_request(format!("{name}={text:?} is not a whole number"))
                })
            })
            .transpose()
    }

    fn flag(&mut self, name: &str) -> Result<bool, ApiError> {
        match self.take(name).as_deref() {
            None | Some("0" | "false") => Ok(false),
            Some("" | "1" | "true") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "{name}={other:?}: say 1 or 0"
            ))),
        }
    }

    fn done(self) -> Result<(), ApiError> {
        match self.0.first() {
            None => Ok(()),
            Some((name, _)) => Err(ApiError::bad_request(format!(
                "unknown or repeated field {name:?}: see docs/HTTP.md"
            ))),
        }
    }
}

/// Numbers the console's requests: a prefix per process (its start time) keeps them apart from
/// an earlier console's, whose writes the service may still remember by id.
pub(crate) struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

impl RequestIds {
    pub(crate) fn new() -> RequestIds {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        RequestIds {
            prefix: format!("console-{started:x}"),
            next: AtomicU64::new(0),
        }
    }

    pub(crate) fn request(&self, op: Op) -> Request {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Request {
            id: format!("{}-{n}", self.prefix),
            op,
        }
    }
}

/// What the console reads with: the backend, as which account, and the request ids.
pub(crate) struct Reader<'a, B> {
    pub(crate) backend: &'a B,
    pub(crate) account: &'a str,
    pub(crate) ids: &'a RequestIds,
}

impl<B: ConsoleBackend> Reader<'_, B> {
    /// `op`'s success answer as `T`, or the service's refusal. A request refused
    /// `rate_limited` (refused before anything was done) is sent again, up to
    /// [`RATE_LIMITED_RETRIES`] times [`RATE_LIMITED_PAUSE`] apart: one view of many resources is
    /// many requests of the session's account, which may pass the account's rate.
    pub(crate) async fn ask<T>(&self, op: Op) -> Result<T, ApiError>
    where
        T: TryFrom<Success, Error = hivekeeper_protocol::UnexpectedReply>,
    {
        let mut retries = 0;
        let outcome = loop {
            let request = self.ids.request(op.clone());
            let Response { outcome, .. } = self.backend.call(self.account, request).await;
            match outcome {
                Err(refusal)
                    if refusal.code == ErrorCode::RateLimited && retries < RATE_LIMITED_RETRIES =>
                {
                    retries += 1;
                    tokio::time::sleep(RATE_LIMITED_PAUSE).await;
                }
                outcome => break outcome,
            }
        };
        let success = outcome.map_err(ApiError::from_body)?;
        T::try_from(success)
            .map_err(|unexpected| ApiError::new(ErrorCode::Unavailable, unexpected.to_string()))
    }
}

/// Reads `view`, as the JSON the API answers.
pub(crate) async fn read<B: ConsoleBackend>(
    reader: &Reader<'_, B>,
    view: &View,
) -> Result<Value, ApiError> {
    match view {
        View::Cluster => to_json(&cluster(reader).await?),
        View::Resources(query) => to_json(&resources(reader, query).await?),
        View::Leases { after, holdings } => to_json(&leases(reader, after, *holdings).await?),
        View::Keys {
            prefix,
            after,
            limit,
        } => {
            let op = Op::KvGet {
                key: None,
                prefix: Some(prefix.clone()),
                after: after.clone(),
                limit: *limit,
                serializable: None,
            };
            to_json(&reader.ask::<KvPage>(op).await?)
        }
        View::Accounts { after } => {
            let op = Op::AdminAgentList {
                after: after.clone(),
            };
            to_json(&reader.ask::<AccountPage>(op).await?)
        }
    }
}

fn to_json(value: &impl Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(value)
        .map_err(|error| ApiError::new(ErrorCode::Unavailable, error.to_string()))
}

/// `/api/v1/cluster`.
#[derive(Debug, Serialize)]
pub struct ClusterView {
    /// The answering member's own status, as `admin.status` gives it.
    #[serde(flatten)]
    pub status: NodeStatus,
    /// Each member with its role, replication and reachability.
    pub member_views: Vec<MemberView>,
    /// What the answering member's data takes on disk (the log entries themselves are
    /// `last_log_index` − `purged_index`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
}

/// One member in [`ClusterView`].
#[derive(Debug, Serialize)]
pub struct MemberView {
    /// Its Raft id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Where the members reach it.
    pub addr: String,
    /// `leader`, `follower` or `learner`.
    pub role: &'static str,
    /// On the leader: how far its log matches the leader's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched_index: Option<u64>,
    /// On the leader: entries it lacks of the leader's log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
    /// On the leader: whether it answered within the election timeout (`null` elsewhere:
    /// only a leader hears from every member).
    pub reachable: Option<bool>,
}

async fn cluster<B: ConsoleBackend>(reader: &Reader<'_, B>) -> Result<ClusterView, ApiError> {
    let StatusReport { status } = reader.ask(Op::AdminStatus {}).await?;
    let unreachable = reader.backend.unreachable();
    let member_views = status
        .members
        .iter()
        .map(|member| {
            let matched_index = status.replication.as_ref().and_then(|replication| {
                replication
                    .iter()
                    .find(|row| row.id == member.id)
                    .and_then(|row| row.matched_index)
            });
            let me = member.id == status.node_id;
            let matched_index = if me && status.is_leader {
                status.last_log_index
            } else {
                matched_index
            };
            let lag = status
                .is_leader
                .then(|| {
                    status
                        .last_log_index
                        .map(|last| last.saturating_sub(matched_index.unwrap_or(0)))
                })
                .flatten();
            MemberView {
                id: member.id,
                name: member.name.clone(),
                addr: member.addr.clone(),
                role: if status.leader_id == Some(member.id) {
                    "leader"
                } else if member.voter {
                    "follower"
                } else {
                    "learner"
                },
                matched_index,
                lag,
                reachable: if me {
                    Some(true)
                } else {
                    unreachable
                        .as_ref()
                        .map(|names| !names.contains(&member.name))
                },
            }
        })
        .collect();
    Ok(ClusterView {
        status: *status,
        member_views,
        storage: reader.backend.storage(),
    })
}

/// One resource with its holders and queue, in `/api/v1/resources` and `/api/v1/airspace`.
#[derive(Debug, Serialize)]
pub struct ResourceView {
    /// Its kind.
    pub kind: ResourceKind,
    /// Its name.
    pub name: String,
    /// `inspect`'s answer: holders with tokens, modes and (waypoints) volumes, the queue in
    /// order, a semaphore's limit and count, a barrier's size.
    #[serde(flatten)]
    pub inspection: Inspection,
}

/// A page (or with `all`, every page) of resources.
#[derive(Debug, Serialize)]
pub struct ResourcesView {
    /// The resources, in (kind, name) order.
    pub resources: Vec<ResourceView>,
    /// Present when more follow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
    /// With `all`: more than [`ALL_ROWS_MAX`] rows were there.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

async fn resources<B: ConsoleBackend>(
    reader: &Reader<'_, B>,
    query: &ResourceQuery,
) -> Result<ResourcesView, ApiError> {
    let mut rows: Vec<ResourceInfo> = Vec::new();
    let mut after = query.after.clone();
    let next_after = loop {
        let op = Op::AdminResources {
            kind: query.kind,
            prefix: query.prefix.clone(),
            after: after.clone(),
            limit: query.limit,
        };
        let page: ResourcePage = reader.ask(op).await?;
        rows.extend(page.resources);
        match page.next_after {
            Some(next) if query.all && rows.len() < ALL_ROWS_MAX => after = Some(next),
            next => break next,
        }
    };
    let truncated = query.all && next_after.is_some();
    let resources = futures_util::stream::iter(rows)
        .map(|row| inspect(reader, row))
        .buffered(INSPECTIONS_IN_FLIGHT)
        .filter_map(|row| async move { row.transpose() })
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(ResourcesView {
        resources,
        next_after: if query.all { None } else { next_after },
        truncated,
    })
}

/// `row` with its holders and waiters; `None` when it went free between the two reads.
async fn inspect<B: ConsoleBackend>(
    reader: &Reader<'_, B>,
    row: ResourceInfo,
) -> Result<Option<ResourceView>, ApiError> {
    let op = Op::Inspect {
        kind: row.kind,
        name: row.name.clone(),
    };
    let inspection: Inspection = reader.ask(op).await?;
    if inspection.holders.is_empty() && inspection.waiters.is_empty() {
        return Ok(None);
    }
    Ok(Some(ResourceView {
        kind: row.kind,
        name: row.name,
        inspection,
    }))
}

/// `/api/v1/leases`.
#[derive(Debug, Serialize)]
pub struct LeasesView {
    /// `admin.leases`' page.
    #[serde(flatten)]
    pub page: LeasePage,
    /// With `holdings`: what each lease of the page holds, by lease id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holdings: Option<BTreeMap<String, Vec<Holding>>>,
}

/// One grant a lease holds.
#[derive(Debug, Clone, Serialize)]
pub struct Holding {
    /// The resource's kind.
    pub kind: ResourceKind,
    /// Its name.
    pub name: String,
    /// The grant's fencing token.
    pub token: u64,
}

async fn leases<B: ConsoleBackend>(
    reader: &Reader<'_, B>,
    after: &Option<String>,
    holdings: bool,
) -> Result<LeasesView, ApiError> {
    let page: LeasePage = reader
        .ask(Op::AdminLeases {
            after: after.clone(),
        })
        .await?;
    if !holdings {
        return Ok(LeasesView {
            page,
            holdings: None,
        });
    }
    let all = ResourceQuery {
        all: true,
        ..ResourceQuery::default()
    };
    let mut held: BTreeMap<String, Vec<Holding>> = page
        .leases
        .iter()
        .map(|lease| (lease.lease.clone(), Vec::new()))
        .collect();
    for resource in resources(reader, &all).await?.resources {
        for holder in &resource.inspection.holders {
            if let Some(list) = held.get_mut(&holder.lease) {
                list.push(Holding {
                    kind: resource.kind,
                    name: resource.name.clone(),
                    token: holder.token,
                });
            }
        }
    }
    Ok(LeasesView {
        page,
        holdings: Some(held),
    })
}
