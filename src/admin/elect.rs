//! `hivekeeper elect NAME [--value V] [--listen]`: lead an election from the shell, or follow
//! who leads it, through the SDK's [`Session::campaign`] and [`Agent::observe`].
//!
//! ```text
//!  elect NAME [--value V]  ─▶ lease.grant, election.campaign (waits in line) ─▶ `leading ...`
//!                              ... held until Ctrl-C ─▶ election.resign, lease.revoke
//!                              ... or the leadership is lost ─▶ error, exit code 1
//!  elect NAME --listen     ─▶ kv.get + watch.poll of $election/NAME ─▶ a line per change
//! ```
//!
//! [`Session::campaign`]: hivekeeper_agent::Session::campaign

use std::time::Duration;

use anyhow::anyhow;
use futures_util::StreamExt;
use hivekeeper_agent::{Agent, Leader, LeadershipEnd, Session};
use serde::Serialize;

use super::{Target, block_on, connect, failure};

/// `hivekeeper elect NAME`.
#[derive(Debug, clap::Args)]
pub struct ElectArgs {
    /// The election's name, 1 to 256 bytes.
    name: String,
    /// What the leader announces (e.g. its address): `$election/NAME` holds it while this
    /// process leads.
    #[arg(long, value_name = "V", default_value = "", conflicts_with = "listen")]
    value: String,
    /// Do not campaign: print the leader now, then one line per change (a new leader, or a
    /// new value), until interrupted.
    #[arg(long)]
    listen: bool,
    /// The TTL of the lease the leadership is bound to, ms: if this process dies without
    /// resigning, the next candidate leads at most this long after.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = super::SESSION_TTL_MS,
        conflicts_with = "listen"
    )]
    ttl_ms: u64,
    #[command(flatten)]
    target: Target,
}

/// What `elect --json` prints per line: the leader (`null`: nobody leads).
#[derive(Serialize)]
struct LeaderLine<'a> {
    leader: Option<LeaderJson<'a>>,
}

#[derive(Serialize)]
struct LeaderJson<'a> {
    token: u64,
    value: &'a str,
    /// Absent when that leadership had ended before the observer could ask who held it.
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a str>,
    revision: u64,
}

/// `hivekeeper elect`.
pub fn elect(args: ElectArgs) -> anyhow::Result<()> {
    block_on(async move {
        let agent = connect(&args.target, &args.target.broker).await?;
        if args.listen {
            listen(&agent, &args.name, args.target.json).await
        } else {
            campaign(&agent, &args).await
        }
    })
}

/// Campaigns, reports the leadership, holds it until Ctrl-C and resigns.
async fn campaign(agent: &Agent, args: &ElectArgs) -> anyhow::Result<()> {
    let session = agent
        .session(args.ttl_ms)
        .await
        .map_err(|e| failure("lease.grant", e))?;
    let campaign = session.campaign(args.name.clone(), args.value.clone());
    let leadership = tokio::select! {
        leadership = campaign => leadership.map_err(|e| failure("election.campaign", e))?,
        _ = tokio::signal::ctrl_c() => {
            // Revoking the lease drops the campaign's place in line at once.
            end_session(&session).await;
            return Err(anyhow!("interrupted before leading {:?}", args.name));
        }
    };
    let token = leadership.token();
    if args.target.json {
        println!(
            "{}",
            serde_json::json!({"name": args.name, "token": token, "value": args.value})
        );
    } else {
        println!("leading {:?} with token {token}", args.name);
    }
    let lost = leadership.lost();
    tokio::select! {
        end = lost => {
            end_session(&session).await;
            Err(anyhow!("lost the leadership of {:?} (token {token}): {}", args.name, end_text(end)))
        }
        _ = tokio::signal::ctrl_c() => {
            let resigned = leadership.resign().await;
            end_session(&session).await;
            resigned.map_err(|e| failure("election.resign", e))?;
            if !args.target.json {
                println!("resigned {:?}", args.name);
            }
            Ok(())
        }
    }
}

/// Why a leadership ended, for people.
fn end_text(end: LeadershipEnd) -> String {
    match end {
        LeadershipEnd::Lost => "the service ended it (the lease ended)".into(),
        LeadershipEnd::Session(state) => {
            format!("the session is {state:?}: no keepalive was acknowledged in time")
        }
        LeadershipEnd::Resigned => "resigned".into(),
    }
}

/// Revokes the session's lease, briefly: the service frees what it holds; if the revoke is
/// not answered, the lease expires after its TTL anyway.
async fn end_session(session: &Session) {
    let _ = tokio::time::timeout(Duration::from_secs(2), session.revoke()).await;
}

/// Prints the leader now, then a line per change, until Ctrl-C.
async fn listen(agent: &Agent, name: &str, json: bool) -> anyhow::Result<()> {
    let mut leaders = agent.observe(name);
    loop {
        let next = tokio::select! {
            next = leaders.next() => next,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(leader) = next else {
            return Ok(());
        };
        let leader = leader.map_err(|e| failure("watch.poll", e))?;
        println!("{}", leader_line(leader.as_ref(), json)?);
    }
}

/// `leader AGENT token T value "V" (revision R)`, `nobody leads`, or the JSON line.
fn leader_line(leader: Option<&Leader>, json: bool) -> anyhow::Result<String> {
    if json {
        let line = LeaderLine {
            leader: leader.map(|leader| LeaderJson {
                token: leader.token,
                value: &leader.value,
                agent: leader.agent.as_deref(),
                revision: leader.revision,
            }),
        };
        return Ok(serde_json::to_string(&line)?);
    }
    Ok(match leader {
        Some(leader) => format!(
            "leader {} token {} value {:?} (revision {})",
            leader.agent.as_deref().unwrap_or("?"),
            leader.token,
            leader.value,
            leader.revision
        ),
        None => "nobody leads".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_line_for_people_and_for_scripts() {
        let leader = Leader {
            token: 42,
            value: "10.0.0.7".into(),
            agent: Some("gw-1".into()),
            revision: 43,
        };
        assert_eq!(
            leader_line(Some(&leader), false).expect("text"),
            "leader gw-1 token 42 value \"10.0.0.7\" (revision 43)"
        );
        assert_eq!(
            leader_line(Some(&leader), true).expect("json"),
            r#"{"leader":{"token":42,"value":"10.0.0.7","agent":"gw-1","revision":43}}"#
        );
        assert_eq!(leader_line(None, false).expect("text"), "nobody leads");
        assert_eq!(leader_line(None, true).expect("json"), r#"{"leader":null}"#);
    }
}
