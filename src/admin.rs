//! The admin CLI: `hivekeeper status | inspect | leases | revoke`, an MQTT client of the wire
//! protocol like any agent, so it works against any deployment an operator can reach.
//!
//! ```text
//!  hivekeeper status  --broker a:1883,b:1883 ─▶ one Agent per broker ─▶ admin.status each
//!                                               (each node answers for itself: a row per node)
//!  hivekeeper inspect lock NAME              ─▶ inspect ─▶ admin.leases pages (time left)
//!  hivekeeper leases                         ─▶ admin.leases, page after page
//!  hivekeeper revoke LEASE                   ─▶ admin.revoke (through the log)
//!  hivekeeper member list | add N=H:P | remove N ─▶ admin.status | admin.member.add | .remove
//! ```
//!
//! Requests go through the agent SDK (`Agent::request`): its same-id resends, backoff and
//! broker failover are reused rather than written again. The CLI's agent id is
//! `hk-admin-{pid}`; it takes no lease, so it holds nothing on the service. Output is a table
//! for people, or JSON (`--json`) for scripts. A failure is one line on stderr and exit code 1.

use anyhow::{anyhow, bail};
use clap::ValueEnum;
use hivekeeper_agent::protocol::{
    HolderInfo, LeaseInfo, NodeStatus, Op, ResourceKind, Success, WaiterInfo,
};
use hivekeeper_agent::{Agent, AgentConfig, AgentError, DEFAULTS};
use serde::Serialize;
use serde_json::json;

/// Most `admin.leases` pages read by one command: the service's default lease bound (100,000)
/// at 256 a page is 391 pages; this leaves room for a raised bound and still ends.
const LEASE_PAGES_MAX: usize = 10_000;

/// Flags every admin subcommand takes.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// Broker(s) to reach the service through, host:port. For `status`, a comma list asks each
    /// node in turn (one row per node); for the other commands, the next broker of the list is
    /// tried when one does not answer.
    #[arg(
        long,
        value_name = "HOST:PORT[,...]",
        default_value = DEFAULTS.broker,
        value_delimiter = ','
    )]
    broker: Vec<String>,
    /// Topic prefix of the service (`{prefix}/req/{agent}`).
    #[arg(long, value_name = "PREFIX", default_value = DEFAULTS.topic_prefix)]
    topic_prefix: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// How long to try in all (connect, resends) before giving up, ms.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    timeout_ms: u64,
}

/// `hivekeeper status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
}

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

/// `hivekeeper leases`.
#[derive(Debug, clap::Args)]
pub struct LeasesArgs {
    #[command(flatten)]
    target: Target,
}

/// `hivekeeper revoke LEASE`.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The lease to end (as `hivekeeper leases` or `inspect` shows it).
    lease: String,
    #[command(flatten)]
    target: Target,
}

/// `hivekeeper member ...`.
#[derive(Debug, clap::Args)]
pub struct MemberArgs {
    #[command(subcommand)]
    action: MemberAction,
}

/// What `hivekeeper member` does.
#[derive(Debug, clap::Subcommand)]
enum MemberAction {
    /// The members as the leader's membership says (ask several brokers: the first leader
    /// among them answers): name, id, address, leader, voter or learner.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Add a member: start it first or after with `--name NAME --initial-cluster NAME=HOST:PORT
    /// --initial-cluster-state existing`; the leader catches it up as a learner, then makes it a
    /// voter. Answers once it votes (give a catching-up node time: --timeout-ms).
    Add {
        /// The new member as NAME=HOST:PORT (its inter-node address).
        #[arg(value_name = "NAME=HOST:PORT")]
        member: String,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a member (a leader that removes itself steps down). Stop its process afterwards.
    Remove {
        /// The member's name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
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

/// Runs `future` on a small runtime of its own: the admin commands are one client each.
fn block_on<T>(future: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| anyhow!("starting the async runtime: {error}"))?
        .block_on(future)
}

/// An SDK agent for `brokers`, as patient as `--timeout-ms` allows.
async fn connect(target: &Target, brokers: &[String]) -> anyhow::Result<Agent> {
    let timeout_ms = target.timeout_ms.max(1);
    let request_timeout_ms = timeout_ms.min(DEFAULTS.request_timeout_ms);
    let config = AgentConfig {
        agent_id: format!("hk-admin-{}", std::process::id()),
        brokers: brokers.to_vec(),
        topic_prefix: target.topic_prefix.clone(),
        request_timeout_ms,
        request_deadline_ms: timeout_ms,
        wait_resend_ms: DEFAULTS.wait_resend_ms.max(request_timeout_ms),
        backoff_first_ms: DEFAULTS.backoff_first_ms.min(request_timeout_ms),
        connect_timeout_s: timeout_ms
            .div_ceil(1_000)
            .clamp(1, DEFAULTS.connect_timeout_s),
        ..AgentConfig::default()
    };
    Agent::connect(config).await.map_err(|error| match error {
        AgentError::Unreachable { brokers, waited_ms } => {
            anyhow!("no node reachable at {brokers} within {waited_ms} ms")
        }
        other => anyhow!("{other}"),
    })
}

/// One request, its failure as one line: a refusal names its code.
async fn request(agent: &Agent, op: Op) -> anyhow::Result<Success> {
    let name = op.name();
    agent.request(op).await.map_err(|error| match error {
        AgentError::Service { code, message } => anyhow!("{name} refused: {code}: {message}"),
        AgentError::Timeout { waited_ms, .. } => anyhow!(
            "{name}: no answer within {waited_ms} ms (is a node serving this topic prefix, and \
             does it have a leader?)"
        ),
        AgentError::Disconnected => anyhow!("{name}: lost the connection to every broker"),
        other => anyhow!("{name}: {other}"),
    })
}

/// Every live lease, page after page (each page a linearizable read; the whole list is not
/// one snapshot when leases come and go meanwhile). Stops early once `enough` says so.
async fn all_leases(
    agent: &Agent,
    mut enough: impl FnMut(&[LeaseInfo]) -> bool,
) -> anyhow::Result<Vec<LeaseInfo>> {
    let mut leases = Vec::new();
    let mut after = None;
    for _ in 0..LEASE_PAGES_MAX {
        let page = request(agent, Op::AdminLeases { after }).await?;
        leases.extend(page.leases.unwrap_or_default());
        match page.next_after {
            Some(next) if !enough(&leases) => after = Some(next),
            _ => return Ok(leases),
        }
    }
    bail!("admin.leases: more than {LEASE_PAGES_MAX} pages; stopped")
}

/// `hivekeeper status`: asks every broker's node for its own view, a row each.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let rows = statuses(target).await;
        if target.json {
            let nodes: Vec<_> = rows
                .iter()
                .map(|(broker, answer)| match answer {
                    Ok(status) => json!({"broker": broker, "status": status}),
                    Err(error) => json!({"broker": broker, "error": error}),
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&nodes)?);
        } else {
            print!("{}", status_table(&rows));
        }
        if rows.iter().all(|(_, answer)| answer.is_err()) {
            // One broker: its own error is the clearest line. Several: each row said why.
            match rows.as_slice() {
                [(_, Err(error))] => bail!("status: {error}"),
                _ => bail!("status: no node answered"),
            }
        }
        Ok(())
    })
}

/// `admin.status` from each broker of the list in turn (each node answers for itself).
async fn statuses(target: &Target) -> Vec<(String, Result<Box<NodeStatus>, String>)> {
    let mut rows = Vec::new();
    for broker in &target.broker {
        let answer = async {
            let agent = connect(target, std::slice::from_ref(broker)).await?;
            let success = request(&agent, Op::AdminStatus {}).await?;
            success
                .status
                .ok_or_else(|| anyhow!("admin.status: the answer has no `status`"))
        };
        rows.push((broker.clone(), answer.await.map_err(|e| e.to_string())));
    }
    rows
}

fn index(index: Option<u64>) -> String {
    index.map_or_else(|| "-".into(), |index| index.to_string())
}

/// A member's name when the membership has one (a cluster), else its numeric id.
fn name_of(status: &NodeStatus, id: u64) -> String {
    status
        .members
        .iter()
        .find(|member| member.id == id && !member.name.is_empty())
        .map_or_else(|| id.to_string(), |member| member.name.clone())
}

fn status_table(rows: &[(String, Result<Box<NodeStatus>, String>)]) -> String {
    let mut table = Table::new(&[
        "BROKER",
        "NODE",
        "ROLE",
        "LEADER",
        "TERM",
        "LAST_LOG",
        "COMMITTED",
        "APPLIED",
        "SNAPSHOT",
        "MEMBERS",
    ]);
    let mut replication = String::new();
    for (broker, answer) in rows {
        match answer {
            Ok(status) => {
                let mut members: Vec<String> = status
                    .members
                    .iter()
                    .map(|member| {
                        let name = name_of(status, member.id);
                        if member.voter {
                            name
                        } else {
                            format!("{name}(learner)")
                        }
                    })
                    .collect();
                members.sort();
                table.row(vec![
                    broker.clone(),
                    name_of(status, status.node_id),
                    if status.is_leader {
                        "leader"
                    } else {
                        "follower"
                    }
                    .into(),
                    status
                        .leader_id
                        .map_or_else(|| "-".into(), |id| name_of(status, id)),
                    status.term.to_string(),
                    index(status.last_log_index),
                    index(status.committed_index),
                    index(status.applied_index),
                    index(status.snapshot_index),
                    members.join(","),
                ]);
                for follower in status.replication.iter().flatten() {
                    replication.push_str(&format!(
                        "  node {} matched index {} (as leader {} sees it)\n",
                        name_of(status, follower.id),
                        index(follower.matched_index),
                        name_of(status, status.node_id)
                    ));
                }
            }
            Err(error) => table.row(vec![broker.clone(), format!("error: {error}")]),
        }
    }
    let mut out = table.render();
    if !replication.is_empty() {
        out.push_str("replication:\n");
        out.push_str(&replication);
    }
    out
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

/// `hivekeeper leases`.
pub fn leases(args: LeasesArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let agent = connect(target, &target.broker).await?;
        let leases = all_leases(&agent, |_| false).await?;
        if target.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"leases": leases}))?
            );
        } else if leases.is_empty() {
            println!("no live leases");
        } else {
            let mut table = Table::new(&["LEASE", "AGENT", "TTL", "LEFT"]);
            for lease in &leases {
                table.row(vec![
                    lease.lease.clone(),
                    lease.agent.clone(),
                    human_ms(lease.ttl_ms),
                    lease.remaining_ms.map_or_else(|| "?".into(), human_ms),
                ]);
            }
            print!("{}", table.render());
        }
        Ok(())
    })
}

/// `hivekeeper revoke LEASE`.
pub fn revoke(args: RevokeArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let agent = connect(target, &target.broker).await?;
        request(
            &agent,
            Op::AdminRevoke {
                lease: args.lease.clone(),
            },
        )
        .await?;
        if target.json {
            println!("{}", json!({"revoked": args.lease}));
        } else {
            println!(
                "revoked lease {}: everything it held is released and handed to the next waiters",
                args.lease
            );
        }
        Ok(())
    })
}

/// Milliseconds for a person: `850ms`, `4.2s`, `3m05s`.
fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1_000.0),
        _ => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000),
    }
}

/// A plain text table: columns padded to their widest cell, two spaces apart.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(headers: &[&str]) -> Table {
        Table {
            rows: vec![headers.iter().map(|header| header.to_string()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The last cell of a short row (an error line) runs on unpadded and widens nothing.
    fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|column| {
                self.rows
                    .iter()
                    .filter(|row| row.len() == columns || column + 1 < row.len())
                    .filter_map(|row| row.get(column))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(column, cell)| format!("{cell:<width$}", width = widths[column]))
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// `hivekeeper member list | add | remove`.
pub fn member(args: MemberArgs) -> anyhow::Result<()> {
    block_on(async move {
        match args.action {
            MemberAction::List { target } => {
                // The leader's membership is the cluster's: a removed member, or one cut off,
                // may still list an old one. Without a leader among the brokers, the first
                // node that answers.
                let rows = statuses(&target).await;
                let mut answers = rows.into_iter().filter_map(|(_, answer)| answer.ok());
                let first = answers
                    .next()
                    .ok_or_else(|| anyhow!("member list: no node answered"))?;
                let status = if first.is_leader {
                    first
                } else {
                    answers.find(|status| status.is_leader).unwrap_or(first)
                };
                if target.json {
                    println!("{}", serde_json::to_string_pretty(&status.members)?);
                } else {
                    let mut table = Table::new(&["NAME", "ID", "ADDR", "ROLE"]);
                    let mut members = status.members.clone();
                    members.sort_by(|a, b| a.name.cmp(&b.name));
                    for member in &members {
                        let role = match (member.voter, status.leader_id == Some(member.id)) {
                            (_, true) => "leader",
                            (true, false) => "voter",
                            (false, false) => "learner",
                        };
                        table.row(vec![
                            member.name.clone(),
                            member.id.to_string(),
                            member.addr.clone(),
                            role.into(),
                        ]);
                    }
                    print!("{}", table.render());
                }
            }
            MemberAction::Add { member, target } => {
                let (name, addr) = member
                    .split_once('=')
                    .ok_or_else(|| anyhow!("{member:?} is not NAME=HOST:PORT"))?;
                let agent = connect(&target, &target.broker).await?;
                let op = Op::AdminMemberAdd {
                    name: name.to_string(),
                    addr: addr.to_string(),
                };
                request(&agent, op).await?;
                if target.json {
                    println!("{}", json!({"added": name, "addr": addr}));
                } else {
                    println!("added {name} at {addr}: it has caught up and votes");
                }
            }
            MemberAction::Remove { name, target } => {
                let agent = connect(&target, &target.broker).await?;
                request(&agent, Op::AdminMemberRemove { name: name.clone() }).await?;
                if target.json {
                    println!("{}", json!({"removed": name}));
                } else {
                    println!("removed {name}: stop its process now");
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::{Table, human_ms};

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(4_210), "4.2s");
        assert_eq!(human_ms(185_000), "3m05s");
    }

    #[test]
    fn a_table_pads_every_column_to_its_widest_full_row_cell() {
        let mut table = Table::new(&["A", "BB"]);
        table.row(vec!["long".into(), "x".into()]);
        table.row(vec!["error: a short row widens nothing".into()]);
        assert_eq!(
            table.render(),
            "A     BB\nlong  x\nerror: a short row widens nothing\n"
        );
    }
}
