//! `hivekeeper status`: every broker's node answers for itself, a row each; the leader adds
//! how far each follower has replicated.

use anyhow::{anyhow, bail};
use hivekeeper_agent::protocol::{NodeStatus, Op};
use serde_json::json;

use super::table::{Table, index};
use super::{Target, block_on, connect, request};

/// `hivekeeper status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
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
pub(super) async fn statuses(target: &Target) -> Vec<(String, Result<Box<NodeStatus>, String>)> {
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

/// A member's name when the membership has one (a cluster), else its numeric id.
fn name_of(status: &NodeStatus, id: u64) -> String {
    status
        .members
        .iter()
        .find(|member| member.id == id && !member.name.is_empty())
        .map_or_else(|| id.to_string(), |member| member.name.clone())
}

/// The `status` table, then the replication lines of a leader.
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
