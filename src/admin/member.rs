//! `hivekeeper member list | add | remove`: the cluster's membership, as its leader sees it,
//! and changes to it.

use anyhow::anyhow;
use hivekeeper_agent::protocol::Op;
use serde_json::json;

use super::status::statuses;
use super::table::Table;
use super::{Target, block_on, connect, request};

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
                    catch_up_timeout_ms: None,
                    catch_up_lag_entries_max: None,
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
