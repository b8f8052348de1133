//! `hivekeeper inspect KIND NAME [--limit N]`: holders and waiters of one resource, in queue
//! order, with how long each has held or waited, the time each holder's lease has left and a
//! waypoint's cylinders; the first `--limit` waiters, then how many more.

use hivekeeper_agent::protocol::{
    self, Area, HolderInfo, Op, Priority, ResourceKind, Volume, WaiterInfo,
};
use serde::Serialize;

use super::leases::all_leases;
use super::table::{Table, human_ms, index};
use super::{Target, block_on, connect, request};

/// `hivekeeper inspect KIND NAME`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// What kind of resource.
    #[arg(value_parser = kind_parser())]
    kind: ResourceKind,
    /// The resource's name (`hivekeeper ls` lists them).
    name: String,
    /// Show at most this many waiters, the first in queue order (then how many more).
    #[arg(long, value_name = "N", default_value_t = 20)]
    limit: usize,
    #[command(flatten)]
    target: Target,
}

/// A resource kind on the command line: every [`ResourceKind`], by its wire name.
pub(super) fn kind_parser() -> impl clap::builder::TypedValueParser<Value = ResourceKind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(ResourceKind::ALL.map(ResourceKind::as_str))
        .map(|text| ResourceKind::parse(&text).expect("a possible value names a kind"))
}

/// What `inspect --json` prints: the `inspect` result, with each holder's lease time left.
#[derive(Serialize)]
struct Inspection {
    kind: ResourceKind,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    /// A barrier's filling round: how many members it needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u32>,
    holders: Vec<Holder>,
    waiters: Vec<Waiter>,
    /// A barrier's members that have sent `barrier.leave` and wait for the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    leaving: Option<u32>,
    /// How many hold it, when `holders` lists only the first ones (the answer had to fit one
    /// MQTT packet).
    #[serde(skip_serializing_if = "Option::is_none")]
    holders_total: Option<u64>,
    /// How many wait, when `waiters` lists only the first ones (`--limit`, or the answer had
    /// to fit one MQTT packet).
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters_total: Option<u64>,
}

/// A holder, how long it has held, and the time its lease has left, when the answering node
/// knows it.
#[derive(Serialize)]
struct Holder {
    #[serde(flatten)]
    info: HolderInfo,
    /// Now (this machine's clock) less `since_ms` (the leader's), at least 0.
    held_for_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining_ms: Option<u64>,
}

/// A waiter and how long it has waited.
#[derive(Serialize)]
struct Waiter {
    #[serde(flatten)]
    info: WaiterInfo,
    /// Now (this machine's clock) less `since_ms` (the leader's), at least 0.
    waited_for_ms: u64,
}

/// Milliseconds since the Unix epoch on this machine's clock.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// `hivekeeper inspect KIND NAME`.
pub fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let agent = connect(target, &target.broker).await?;
        let kind = args.kind;
        let answer: protocol::Inspection = request(
            &agent,
            Op::Inspect {
                kind,
                name: args.name.clone(),
            },
        )
        .await?;
        let holders = answer.holders;
        // The time left is a courtesy: without it (a node that is not the ready leader, or a
        // timeout) the holders are still worth showing.
        let mut wanted: Vec<String> = holders.iter().map(|h| h.lease.clone()).collect();
        let leases = if wanted.is_empty() {
            Vec::new()
        } else {
            all_leases(&agent, |seen| {
                wanted.retain(|lease| !seen.iter().any(|info| info.lease == *lease));
                wanted.is_empty()
            })
            .await
            .unwrap_or_default()
        };
        let now_ms = now_ms();
        let holders = holders
            .into_iter()
            .map(|info| Holder {
                held_for_ms: now_ms.saturating_sub(info.since_ms),
                remaining_ms: leases
                    .iter()
                    .find(|lease| lease.lease == info.lease)
                    .and_then(|lease| lease.remaining_ms),
                info,
            })
            .collect();
        let mut waiters = answer.waiters;
        let mut waiters_total = answer.waiters_total;
        if waiters.len() > args.limit {
            waiters_total = waiters_total.or(Some(waiters.len() as u64));
            waiters.truncate(args.limit);
        }
        let waiters = waiters
            .into_iter()
            .map(|info| Waiter {
                waited_for_ms: now_ms.saturating_sub(info.since_ms),
                info,
            })
            .collect();
        let inspection = Inspection {
            kind,
            name: args.name,
            limit: answer.limit,
            count: answer.count,
            holders,
            waiters,
            leaving: answer.leaving,
            holders_total: answer.holders_total,
            waiters_total,
        };
        if target.json {
            println!("{}", serde_json::to_string_pretty(&inspection)?);
        } else {
            print!("{}", inspection_text(&inspection));
        }
        Ok(())
    })
}

/// The holders and waiters tables of `inspect`, for people.
fn inspection_text(inspection: &Inspection) -> String {
    let mut out = format!("{} {:?}", inspection.kind.as_str(), inspection.name);
    if let Some(limit) = inspection.limit {
        out.push_str(&format!(" (limit {limit})"));
    }
    if let Some(count) = inspection.count {
        out.push_str(&format!(" (filling a round of {count})"));
    }
    if let Some(leaving) = inspection.leaving {
        out.push_str(&format!(" ({leaving} leaving)"));
    }
    out.push('\n');
    let holders = inspection.holders.iter().map(|holder| {
        let info = &holder.info;
        let cells = vec![
            info.agent.clone(),
            info.lease.clone(),
            info.token.to_string(),
            index(info.permits.map(u64::from)),
            human_ms(holder.held_for_ms),
            holder.remaining_ms.map_or_else(|| "?".into(), human_ms),
        ];
        let window = (info.start_ms, info.end_ms);
        let shape = shape_text(info.area.as_ref(), window, &info.volumes)
            + &priority_text(info.priority, info.vacate_by_ms);
        (cells, shape, info.value.as_deref())
    });
    out.push_str(&list_text(
        inspection.kind,
        "holders",
        &[
            "HOLDER",
            "LEASE",
            "TOKEN",
            "PERMITS",
            "HELD_FOR",
            "LEASE_LEFT",
        ],
        holders.collect(),
        inspection.holders_total,
    ));
    let waiters = inspection.waiters.iter().map(|waiter| {
        let info = &waiter.info;
        let cells = vec![
            info.position.to_string(),
            info.agent.clone(),
            index(info.permits.map(u64::from)),
            human_ms(waiter.waited_for_ms),
        ];
        let window = (info.start_ms, info.end_ms);
        let shape = shape_text(info.area.as_ref(), window, &info.volumes)
            + &priority_text(info.priority, None);
        (cells, shape, info.value.as_deref())
    });
    out.push_str(&list_text(
        inspection.kind,
        "waiters",
        &["POSITION", "WAITER", "PERMITS", "WAITED_FOR"],
        waiters.collect(),
        inspection.waiters_total,
    ));
    out
}

/// One row of the holders or waiters table: its own cells, a waypoint's shape
/// ([`shape_text`]) and an election's value.
type ListRow<'a> = (Vec<String>, String, Option<&'a str>);

/// The holders or the waiters of a resource of `kind`, for people: a table of `headers` and
/// each row's own cells, then an AREA column for a waypoint and a VALUE column for an
/// election (`WHAT: none` without rows), and the line under a list cut short.
fn list_text(
    kind: ResourceKind,
    what: &str,
    headers: &[&str],
    rows: Vec<ListRow<'_>>,
    total: Option<u64>,
) -> String {
    let shown = rows.len();
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str(&format!("{what}: none\n"));
    } else {
        let with_area = kind == ResourceKind::Waypoint;
        let with_value = kind == ResourceKind::Election;
        let mut headers = headers.to_vec();
        if with_area {
            headers.push("AREA");
        }
        if with_value {
            headers.push("VALUE");
        }
        let mut table = Table::new(&headers);
        for (mut cells, shape, value) in rows {
            if with_area {
                cells.push(shape);
            }
            if with_value {
                cells.push(value.unwrap_or_default().to_string());
            }
            table.row(cells);
        }
        out.push_str(&table.render());
    }
    out.push_str(&more(shown, total, what));
    out
}

/// The line under a list cut short (by `--limit`, or by the service to fit one packet), or
/// nothing.
fn more(shown: usize, total: Option<u64>, what: &str) -> String {
    match total {
        Some(total) => format!(
            "... and {} more {what} ({total} in all; the first {shown} shown)\n",
            total.saturating_sub(shown as u64)
        ),
        None => String::new(),
    }
}

/// What a waypoint reservation claims, for people: its cylinder ([`area_text`]) and, when it
/// has one, its time window in UTC ms (`[1764503600000, 1764504200000)`); for a route, its
/// volume count and the span of its windows (`route: 12 volumes, [start, end)`).
fn shape_text(
    area: Option<&Area>,
    (start_ms, end_ms): (Option<u64>, Option<u64>),
    volumes: &[Volume],
) -> String {
    if let (Some(first), Some(last_end)) = (
        volumes.iter().map(|v| v.start_ms).min(),
        volumes.iter().map(|v| v.end_ms).max(),
    ) {
        return format!("route: {} volumes, [{first}, {last_end})", volumes.len());
    }
    let cylinder = area_text(area);
    match (start_ms, end_ms) {
        (None, None) => cylinder,
        (start, end) => {
            let side = |ms: Option<u64>| ms.map_or_else(|| "..".to_string(), |ms| ms.to_string());
            format!("{cylinder} [{}, {})", side(start), side(end))
        }
    }
}

/// A reservation's priority when above routine (` priority=3`), and a preempted holder's
/// deadline (` vacate_by=1764503705000`, UTC ms), after its shape; nothing for a routine one
/// that is not preempted.
fn priority_text(priority: Option<Priority>, vacate_by_ms: Option<u64>) -> String {
    let priority = priority.map_or_else(String::new, |p| format!(" priority={p}"));
    let vacate = vacate_by_ms.map_or_else(String::new, |ms| format!(" vacate_by={ms}"));
    priority + &vacate
}

/// A waypoint's cylinder for people: `51.500000,-0.100000 r=3m alt=..120m`, or `-` for a
/// name-only reservation.
fn area_text(area: Option<&Area>) -> String {
    let Some(area) = area else {
        return "-".into();
    };
    let side = |alt: Option<f64>| alt.map_or_else(String::new, |alt| format!("{alt}"));
    let band = match (area.alt_min_m, area.alt_max_m) {
        (None, None) => String::new(),
        (min, max) => format!(" alt={}..{}m", side(min), side(max)),
    };
    format!("{:.6},{:.6} r={}m{band}", area.lat, area.lon, area.radius_m)
}

#[cfg(test)]
mod tests {
    use hivekeeper_agent::protocol::{Area, HolderInfo, ResourceKind, Volume, WaiterInfo};

    use super::{
        Holder, Inspection, Waiter, area_text, inspection_text, priority_text, shape_text,
    };

    /// A priority above routine and a vacate deadline follow the shape.
    #[test]
    fn priorities_and_vacate_deadlines_follow_the_shape() {
        use hivekeeper_agent::protocol::Priority;
        assert_eq!(priority_text(None, None), "");
        assert_eq!(
            priority_text(Some(Priority::EMERGENCY), None),
            " priority=3"
        );
        assert_eq!(
            priority_text(Some(Priority::new(1).expect("a level")), Some(6_000)),
            " priority=1 vacate_by=6000"
        );
    }

    /// A window is shown after the cylinder, a route as its volume count and span.
    #[test]
    fn windows_and_routes_are_shown_in_the_area_column() {
        let pad = Area {
            lat: 51.5,
            lon: -0.1,
            radius_m: 3.0,
            alt_min_m: None,
            alt_max_m: None,
        };
        assert_eq!(
            shape_text(Some(&pad), (Some(1_000), Some(2_000)), &[]),
            "51.500000,-0.100000 r=3m [1000, 2000)"
        );
        assert_eq!(
            shape_text(Some(&pad), (Some(1_000), None), &[]),
            "51.500000,-0.100000 r=3m [1000, ..)"
        );
        let volume = |start_ms, end_ms| Volume {
            lat: 51.5,
            lon: -0.1,
            radius_m: 20.0,
            alt_min_m: 0.0,
            alt_max_m: 120.0,
            start_ms,
            end_ms,
        };
        assert_eq!(
            shape_text(None, (None, None), &[volume(5, 10), volume(10, 30)]),
            "route: 2 volumes, [5, 30)"
        );
    }

    #[test]
    fn a_waypoint_shows_durations_cylinders_and_how_many_more_wait() {
        let pad = Area {
            lat: 51.5,
            lon: -0.1,
            radius_m: 3.0,
            alt_min_m: None,
            alt_max_m: Some(120.0),
        };
        let inspection = Inspection {
            kind: ResourceKind::Waypoint,
            name: "pad-1".into(),
            limit: None,
            count: None,
            holders: vec![Holder {
                info: HolderInfo {
                    agent: "drone-7".into(),
                    lease: "0000000000000011".into(),
                    token: 42,
                    permits: None,
                    since_ms: 1,
                    area: Some(pad),
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    vacate_by_ms: None,
                    mode: hivekeeper_agent::protocol::LockMode::Exclusive,
                    value: None,
                },
                held_for_ms: 65_000,
                remaining_ms: Some(4_200),
            }],
            waiters: vec![Waiter {
                info: WaiterInfo {
                    agent: "drone-9".into(),
                    position: 1,
                    permits: None,
                    since_ms: 1,
                    area: None,
                    start_ms: None,
                    end_ms: None,
                    volumes: Vec::new(),
                    priority: None,
                    mode: hivekeeper_agent::protocol::LockMode::Exclusive,
                    value: None,
                },
                waited_for_ms: 850,
            }],
            leaving: None,
            holders_total: None,
            waiters_total: Some(125),
        };
        assert_eq!(
            inspection_text(&inspection),
            "waypoint \"pad-1\"\n\
             HOLDER   LEASE             TOKEN  PERMITS  HELD_FOR  LEASE_LEFT  AREA\n\
             drone-7  0000000000000011  42     -        1m05s     4.2s        51.500000,-0.100000 r=3m alt=..120m\n\
             POSITION  WAITER   PERMITS  WAITED_FOR  AREA\n\
             1         drone-9  -        850ms       -\n\
             ... and 124 more waiters (125 in all; the first 1 shown)\n"
        );
        assert_eq!(
            area_text(Some(&Area {
                alt_min_m: Some(10.0),
                alt_max_m: Some(50.5),
                ..pad
            })),
            "51.500000,-0.100000 r=3m alt=10..50.5m"
        );
    }
}
