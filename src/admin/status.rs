//! `hivekeeper status`: every broker's node answers for itself, a row each; the leader adds
//! how far each follower has replicated. A node without a quorum says `NO QUORUM` in its row
//! and why under the table.

use anyhow::bail;
use hivekeeper_agent::protocol::{CLUSTER_VERSION_INITIAL, NodeStatus, Op, StatusReport};
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
            let report: StatusReport = request(&agent, Op::AdminStatus {}).await?;
            anyhow::Ok(report.status)
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
    let mut no_quorum = String::new();
    let mut versions = Vec::new();
    for (broker, answer) in rows {
        match answer {
            Ok(status) => {
                versions.push((name_of(status, status.node_id), status.cluster_version));
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
                let name = name_of(status, status.node_id);
                let role = if status.is_leader {
                    "leader"
                } else {
                    "follower"
                };
                let role = if status.has_quorum == Some(false) {
                    no_quorum.push_str(&no_quorum_line(status, &name));
                    format!("{role} NO QUORUM")
                } else {
                    role.to_string()
                };
                table.row(vec![
                    broker.clone(),
                    name,
                    role,
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
    out.push_str(&no_quorum);
    out.push_str(&cluster_version_line(&versions));
    out
}

/// The cluster version each node applied, one line: one number while they agree (the usual
/// case), each node's while a raise is still being applied. Nothing when no node says (all
/// of builds before cluster versions).
fn cluster_version_line(versions: &[(String, Option<u32>)]) -> String {
    if versions.iter().all(|(_, version)| version.is_none()) {
        return String::new();
    }
    let of = |version: &Option<u32>| version.unwrap_or(CLUSTER_VERSION_INITIAL);
    let first = versions.first().map(|(_, version)| of(version));
    if versions
        .iter()
        .all(|(_, version)| Some(of(version)) == first)
    {
        return format!("cluster version: {}\n", of(&versions[0].1));
    }
    let each: Vec<String> = versions
        .iter()
        .map(|(name, version)| format!("{name} {}", of(version)))
        .collect();
    format!(
        "cluster version: {} (a raise not yet applied everywhere)\n",
        each.join(", ")
    )
}

/// Why node `name` has no quorum, one line.
fn no_quorum_line(status: &NodeStatus, name: &str) -> String {
    match (status.is_leader, status.quorum_ack_age_ms) {
        (true, Some(age_ms)) => format!(
            "NO QUORUM: {name} leads, but no majority of its voters has acknowledged it for \
             {age_ms} ms: it answers every request `unavailable`\n"
        ),
        (true, None) => format!(
            "NO QUORUM: {name} leads, but no majority of its voters acknowledges it: it answers \
             every request `unavailable`\n"
        ),
        (false, _) => format!(
            "NO QUORUM: {name} knows no leader (an election is under way, or it is cut off \
             from the majority)\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use hivekeeper_agent::protocol::MemberInfo;

    use super::*;

    /// n1's own view after n2 and n3 stopped: it still leads in its term, without a quorum.
    fn lonely_leader() -> NodeStatus {
        NodeStatus {
            node_id: 1,
            term: 2,
            is_leader: true,
            leader_id: Some(1),
            last_log_index: Some(9),
            committed_index: Some(9),
            applied_index: Some(9),
            snapshot_index: None,
            purged_index: None,
            members: (1..=3)
                .map(|id| MemberInfo {
                    id,
                    name: format!("n{id}"),
                    addr: format!("127.0.0.1:740{id}"),
                    voter: true,
                })
                .collect(),
            replication: None,
            has_quorum: Some(false),
            quorum_ack_age_ms: Some(2_300),
            cluster_version: None,
        }
    }

    #[test]
    fn a_leader_without_a_quorum_is_shown_as_such() {
        let rows = vec![
            ("127.0.0.1:1883".to_string(), Ok(Box::new(lonely_leader()))),
            ("127.0.0.1:1884".to_string(), Err("no answer".to_string())),
        ];
        assert_eq!(
            status_table(&rows),
            "BROKER          NODE  ROLE              LEADER  TERM  LAST_LOG  COMMITTED  APPLIED  \
             SNAPSHOT  MEMBERS\n\
             127.0.0.1:1883  n1    leader NO QUORUM  n1      2     9         9          9        \
             -         n1,n2,n3\n\
             127.0.0.1:1884  error: no answer\n\
             NO QUORUM: n1 leads, but no majority of its voters has acknowledged it for 2300 ms: \
             it answers every request `unavailable`\n"
        );
        let with_quorum = NodeStatus {
            has_quorum: Some(true),
            ..lonely_leader()
        };
        let table = status_table(&[("b".to_string(), Ok(Box::new(with_quorum)))]);
        assert!(!table.contains("NO QUORUM"), "{table}");
    }

    #[test]
    fn the_cluster_version_is_one_line_or_each_nodes_while_they_differ() {
        let at = |node_id: u64, version: Option<u32>| NodeStatus {
            node_id,
            has_quorum: Some(true),
            cluster_version: version,
            ..lonely_leader()
        };
        let rows = |versions: [Option<u32>; 3]| -> Vec<_> {
            (1..=3)
                .zip(versions)
                .map(|(id, version)| (format!("b{id}"), Ok(Box::new(at(id, version)))))
                .collect()
        };
        let same = status_table(&rows([Some(2); 3]));
        assert!(same.ends_with("\ncluster version: 2\n"), "{same}");
        let mixed = status_table(&rows([Some(2), Some(1), None]));
        assert!(
            mixed.ends_with(
                "\ncluster version: n1 2, n2 1, n3 1 (a raise not yet applied everywhere)\n"
            ),
            "{mixed}"
        );
        let old = status_table(&rows([None; 3]));
        assert!(!old.contains("cluster version"), "{old}");
    }
}
