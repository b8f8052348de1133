//! `hivekeeper inspect KIND NAME`: holders and waiters of one resource, in queue order, with
//! the time each holder's lease has left.

use clap::ValueEnum;
use hivekeeper_agent::protocol::{HolderInfo, Op, ResourceKind, WaiterInfo};
use serde::Serialize;

use super::leases::all_leases;
use super::table::{Table, human_ms, index};
use super::{Target, block_on, connect, request};

/// `hivekeeper inspect KIND NAME`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// What kind of resource.
    #[arg(value_enum)]
    kind: Kind,
    /// The resource's name.
    name: String,
    #[command(flatten)]
    target: Target,
}

/// A resource kind on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Kind {
    /// A FIFO lock.
    Lock,
    /// A counting semaphore.
    Sem,
    /// A waypoint reservation.
    Waypoint,
}

impl From<Kind> for ResourceKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Lock => ResourceKind::Lock,
            Kind::Sem => ResourceKind::Sem,
            Kind::Waypoint => ResourceKind::Waypoint,
        }
    }
}

/// What `inspect --json` prints: the `inspect` result, with each holder's lease time left.
#[derive(Serialize)]
struct Inspection {
    kind: ResourceKind,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    holders: Vec<Holder>,
    waiters: Vec<WaiterInfo>,
    /// How many hold it, when `holders` lists only the first ones (the answer had to fit one
    /// MQTT packet).
    #[serde(skip_serializing_if = "Option::is_none")]
    holders_total: Option<u64>,
    /// How many wait, when `waiters` lists only the first ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters_total: Option<u64>,
}

/// A holder and the time its lease has left, when the answering node knows it.
#[derive(Serialize)]
struct Holder {
    #[serde(flatten)]
    info: HolderInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining_ms: Option<u64>,
}

/// `hivekeeper inspect KIND NAME`.
pub fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let agent = connect(target, &target.broker).await?;
        let kind = ResourceKind::from(args.kind);
        let success = request(
            &agent,
            Op::Inspect {
                kind,
                name: args.name.clone(),
            },
        )
        .await?;
        let holders = success.holders.unwrap_or_default();
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
        let holders = holders
            .into_iter()
            .map(|info| Holder {
                remaining_ms: leases
                    .iter()
                    .find(|lease| lease.lease == info.lease)
                    .and_then(|lease| lease.remaining_ms),
                info,
            })
            .collect();
        let inspection = Inspection {
            kind,
            name: args.name,
            limit: success.limit,
            holders,
            waiters: success.waiters.unwrap_or_default(),
            holders_total: success.holders_total,
            waiters_total: success.waiters_total,
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
    out.push('\n');
    if inspection.holders.is_empty() {
        out.push_str("holders: none\n");
    } else {
        let mut table = Table::new(&["HOLDER", "LEASE", "TOKEN", "PERMITS", "LEASE_LEFT"]);
        for holder in &inspection.holders {
            table.row(vec![
                holder.info.agent.clone(),
                holder.info.lease.clone(),
                holder.info.token.to_string(),
                index(holder.info.permits.map(u64::from)),
                holder.remaining_ms.map_or_else(|| "?".into(), human_ms),
            ]);
        }
        out.push_str(&table.render());
    }
    out.push_str(&more(
        inspection.holders.len(),
        inspection.holders_total,
        "holders",
    ));
    if inspection.waiters.is_empty() {
        out.push_str("waiters: none\n");
    } else {
        let mut table = Table::new(&["POSITION", "WAITER", "PERMITS"]);
        for waiter in &inspection.waiters {
            table.row(vec![
                waiter.position.to_string(),
                waiter.agent.clone(),
                index(waiter.permits.map(u64::from)),
            ]);
        }
        out.push_str(&table.render());
    }
    out.push_str(&more(
        inspection.waiters.len(),
        inspection.waiters_total,
        "waiters",
    ));
    out
}

/// The line under a list the service cut to fit one packet, or nothing.
fn more(shown: usize, total: Option<u64>, what: &str) -> String {
    match total {
        Some(total) => format!(
            "... and {} more {what} ({total} in all; the answer lists the first ones that fit \
             one MQTT packet)\n",
            total.saturating_sub(shown as u64)
        ),
        None => String::new(),
    }
}
