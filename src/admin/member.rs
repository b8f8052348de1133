//! `hivekeeper member list | add | remove`: the cluster's membership, as its leader sees it,
//! with its quorum arithmetic, and changes to it.
//!
//! ```text
//!  member list    ─▶ admin.status of each broker's node ─▶ the leader's membership:
//!                    roles, leader flag, voters / quorum / failures tolerated
//!  member add N=H:P ─ checked here (name, host:port) ─▶ admin.member.add: the leader dials it,
//!                    adds it as a learner, makes it a voter once caught up, or refuses
//!  member remove N ─▶ admin.member.remove (works while N is down)
//! ```

use anyhow::{anyhow, bail};
use hivekeeper_agent::protocol::{Done, MemberInfo, NodeStatus, Op, validate};
use serde::Serialize;
use serde_json::json;

use super::status::statuses;
use super::table::Table;
use super::{Target, block_on, connect, request};

/// How much longer than the catch-up bound `member add` waits for its answer: the dial, the
/// learner's entry, the promotion, and a forward through a follower.
const ADD_ANSWER_MARGIN_MS: u64 = 5_000;

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
    /// among them answers): name, id, address, voter or learner, the leader; then how many
    /// votes make a quorum and how many members may fail.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Add a member. Start it first with `--name NAME --initial-cluster NAME=HOST:PORT
    /// --initial-cluster-state existing`. The leader dials it (nothing answers there: refused,
    /// nothing changed), adds it as a learner, and makes it a voter once it has caught up
    /// (not in time: refused, and it is left a learner to `member remove`).
    Add {
        /// The new member as NAME=HOST:PORT (its inter-node address; a host name, an IPv4
        /// address or a bracketed IPv6 address).
        #[arg(value_name = "NAME=HOST:PORT")]
        member: String,
        /// How long the leader waits for the new member to catch up before it refuses to
        /// make it a voter, ms.
        #[arg(long, value_name = "MS", default_value_t = 10_000)]
        catch_up_timeout_ms: u64,
        /// How many entries behind the leader's log the new member may be and count as
        /// caught up.
        #[arg(long, value_name = "ENTRIES", default_value_t = 100)]
        catch_up_lag_entries_max: u64,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a member, running or not (a leader that removes itself steps down). Stop its
    /// process afterwards.
    Remove {
        /// The member's name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

/// One member in `member list --json`.
#[derive(Debug, Serialize)]
struct ListedMember {
    /// Its Raft id.
    id: u64,
    /// Its name.
    name: String,
    /// Its inter-node address.
    addr: String,
    /// Whether it votes (a learner is being caught up, or did not catch up).
    voter: bool,
    /// Whether it is the leader the answering node knows of.
    leader: bool,
}

/// `member list --json`: the members and the quorum arithmetic of their voters.
#[derive(Debug, Serialize)]
struct Listing {
    /// The members, by name.
    members: Vec<ListedMember>,
    /// The leader's name, if the answering node knows one.
    leader: Option<String>,
    /// Members that vote.
    voters: usize,
    /// Members that do not vote (yet).
    learners: usize,
    /// Votes needed to elect a leader or commit an entry: a majority of the voters.
    quorum: usize,
    /// Voters that may be down while the cluster still commits.
    failures_tolerated: usize,
}

impl Listing {
    /// The listing of `status`'s membership.
    fn of(status: &NodeStatus) -> Listing {
        let mut members: Vec<ListedMember> = status
            .members
            .iter()
            .map(|member: &MemberInfo| ListedMember {
                id: member.id,
                name: member.name.clone(),
                addr: member.addr.clone(),
                voter: member.voter,
                leader: status.leader_id == Some(member.id),
            })
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let voters = members.iter().filter(|member| member.voter).count();
        let quorum = voters / 2 + 1;
        Listing {
            leader: members
                .iter()
                .find(|member| member.leader)
                .map(|member| member.name.clone()),
            learners: members.len() - voters,
            voters,
            quorum,
            failures_tolerated: voters.saturating_sub(quorum),
            members,
        }
    }

    /// The table and the quorum line under it.
    fn render(&self) -> String {
        let mut table = Table::new(&["NAME", "ID", "ADDR", "ROLE", "LEADER"]);
        for member in &self.members {
            table.row(vec![
                member.name.clone(),
                member.id.to_string(),
                member.addr.clone(),
                if member.voter { "voter" } else { "learner" }.into(),
                if member.leader { "yes" } else { "" }.into(),
            ]);
        }
        let mut out = table.render();
        out.push_str(&format!(
            "{} voters: a quorum is {}, so {} may fail{}\n",
            self.voters,
            self.quorum,
            self.failures_tolerated,
            match self.learners {
                0 => String::new(),
                1 => " (1 learner does not vote)".into(),
                n => format!(" ({n} learners do not vote)"),
            }
        ));
        out
    }
}

/// `NAME=HOST:PORT` checked before anything is sent: the name as `--name` takes it, the
/// address as the protocol takes it (so a typo never reaches the leader).
fn parse_member(member: &str) -> anyhow::Result<(&str, &str)> {
    let (name, addr) = member
        .split_once('=')
        .ok_or_else(|| anyhow!("{member:?} is not NAME=HOST:PORT"))?;
    validate::member_name(name).map_err(|reason| anyhow!("member add {member:?}: {reason}"))?;
    validate::member_addr(addr).map_err(|reason| anyhow!("member add {member:?}: {reason}"))?;
    Ok((name, addr))
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
                let listing = Listing::of(&status);
                if target.json {
                    println!("{}", serde_json::to_string_pretty(&listing)?);
                } else {
                    print!("{}", listing.render());
                }
            }
            MemberAction::Add {
                member,
                catch_up_timeout_ms,
                catch_up_lag_entries_max,
                mut target,
            } => {
                let (name, addr) = parse_member(&member)?;
                validate::catch_up_timeout_ms(catch_up_timeout_ms)
                    .map_err(|reason| anyhow!("--catch-up-timeout-ms: {reason}"))?;
                // The answer comes after the catch-up: wait for it (resends of the same id
                // get the first answer, never a second change).
                target.timeout_ms = target
                    .timeout_ms
                    .max(catch_up_timeout_ms.saturating_add(ADD_ANSWER_MARGIN_MS));
                let agent = connect(&target, &target.broker).await?;
                let op = Op::AdminMemberAdd {
                    name: name.to_string(),
                    addr: addr.to_string(),
                    catch_up_timeout_ms: Some(catch_up_timeout_ms),
                    catch_up_lag_entries_max: Some(catch_up_lag_entries_max),
                };
                request::<Done>(&agent, op).await?;
                if target.json {
                    println!("{}", json!({"added": name, "addr": addr}));
                } else {
                    println!("added {name} at {addr}: it has caught up and votes");
                }
            }
            MemberAction::Remove { name, target } => {
                if let Err(reason) = validate::member_name(&name) {
                    bail!("member remove: {reason}");
                }
                let agent = connect(&target, &target.broker).await?;
                request::<Done>(&agent, Op::AdminMemberRemove { name: name.clone() }).await?;
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
    use super::*;

    fn member(id: u64, name: &str, voter: bool) -> MemberInfo {
        MemberInfo {
            id,
            name: name.into(),
            addr: format!("127.0.0.1:740{id}"),
            voter,
        }
    }

    fn status(members: Vec<MemberInfo>, leader: Option<u64>) -> NodeStatus {
        NodeStatus {
            node_id: 1,
            term: 2,
            is_leader: leader == Some(1),
            leader_id: leader,
            last_log_index: None,
            committed_index: None,
            applied_index: None,
            snapshot_index: None,
            purged_index: None,
            members,
            replication: None,
            has_quorum: Some(true),
            quorum_ack_age_ms: None,
            cluster_version: None,
        }
    }

    #[test]
    fn the_listing_shows_roles_the_leader_and_the_quorum_arithmetic() {
        let listing = Listing::of(&status(
            vec![
                member(2, "n2", true),
                member(1, "n1", true),
                member(3, "n3", true),
                member(4, "n4", false),
            ],
            Some(1),
        ));
        assert_eq!(
            listing.render(),
            "NAME  ID  ADDR            ROLE     LEADER\n\
             n1    1   127.0.0.1:7401  voter    yes\n\
             n2    2   127.0.0.1:7402  voter\n\
             n3    3   127.0.0.1:7403  voter\n\
             n4    4   127.0.0.1:7404  learner\n\
             3 voters: a quorum is 2, so 1 may fail (1 learner does not vote)\n"
        );
        assert_eq!(
            serde_json::to_value(&listing).expect("serializes"),
            json!({
                "members": [
                    {"id": 1, "name": "n1", "addr": "127.0.0.1:7401", "voter": true, "leader": true},
                    {"id": 2, "name": "n2", "addr": "127.0.0.1:7402", "voter": true, "leader": false},
                    {"id": 3, "name": "n3", "addr": "127.0.0.1:7403", "voter": true, "leader": false},
                    {"id": 4, "name": "n4", "addr": "127.0.0.1:7404", "voter": false, "leader": false},
                ],
                "leader": "n1", "voters": 3, "learners": 1, "quorum": 2, "failures_tolerated": 1,
            })
        );
        // Four voters tolerate no more failures than three; two tolerate none.
        let four = Listing::of(&status(
            (1..=4)
                .map(|id| member(id, &format!("n{id}"), true))
                .collect(),
            None,
        ));
        assert_eq!(
            (four.quorum, four.failures_tolerated, four.leader),
            (3, 1, None)
        );
        let two = Listing::of(&status(
            vec![member(1, "n1", true), member(2, "n2", true)],
            None,
        ));
        assert_eq!((two.quorum, two.failures_tolerated), (2, 0));
    }

    #[test]
    fn member_addresses_are_checked_before_anything_is_sent() {
        assert_eq!(
            parse_member("n4=node-4.local:7404").expect("a host name"),
            ("n4", "node-4.local:7404")
        );
        assert_eq!(
            parse_member("n4=[fd00::4]:7404").expect("IPv6"),
            ("n4", "[fd00::4]:7404")
        );
        let error = |member: &str| parse_member(member).expect_err(member).to_string();
        assert_eq!(
            error("n4@127.0.0.1:7404"),
            "\"n4@127.0.0.1:7404\" is not NAME=HOST:PORT"
        );
        assert_eq!(
            error("n4=127.0.0.1"),
            "member add \"n4=127.0.0.1\": `addr` \"127.0.0.1\" is not host:port"
        );
        assert_eq!(
            error("n4=127.0.0.1:74040"),
            "member add \"n4=127.0.0.1:74040\": `addr` \"127.0.0.1:74040\" is not host:port"
        );
        assert_eq!(
            error("n4=node_4:7404"),
            "member add \"n4=node_4:7404\": `addr` \"node_4:7404\": \"node_4\" is not a host \
             name, an IPv4 address or a bracketed IPv6 address"
        );
        assert_eq!(
            error("n 4=127.0.0.1:7404"),
            "member add \"n 4=127.0.0.1:7404\": member name \"n 4\" contains ' '; allowed are \
             A-Z a-z 0-9 _ . -"
        );
    }
}
