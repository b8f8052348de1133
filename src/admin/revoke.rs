//! `hivekeeper revoke LEASE` and `hivekeeper revoke --agent A`: ends a lease (or every lease
//! of an agent) through the log, as its expiry would.

use hivekeeper_agent::protocol::{Done, Op};
use serde_json::json;

use super::leases::all_leases;
use super::{Target, block_on, connect, request};

/// `hivekeeper revoke LEASE | --agent A`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["lease", "agent"]))]
pub struct RevokeArgs {
    /// The lease to end (as `hivekeeper leases` or `inspect` shows it).
    lease: Option<String>,
    /// End every live lease of this agent instead (each through the log; what each held goes
    /// to the next waiters).
    #[arg(long, value_name = "A", conflicts_with = "lease")]
    agent: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// `hivekeeper revoke`.
pub fn revoke(args: RevokeArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let agent = connect(target, &target.broker).await?;
        let Some(owner) = &args.agent else {
            let lease = args.lease.clone().unwrap_or_default();
            request::<Done>(
                &agent,
                Op::AdminRevoke {
                    lease: lease.clone(),
                },
            )
            .await?;
            if target.json {
                println!("{}", json!({"revoked": lease}));
            } else {
                println!(
                    "revoked lease {lease}: everything it held is released and handed to the \
                     next waiters"
                );
            }
            return Ok(());
        };
        let leases: Vec<String> = all_leases(&agent, |_| false)
            .await?
            .into_iter()
            .filter(|info| info.agent == *owner)
            .map(|info| info.lease)
            .collect();
        let mut revoked = Vec::new();
        for lease in leases {
            match request::<Done>(
                &agent,
                Op::AdminRevoke {
                    lease: lease.clone(),
                },
            )
            .await
            {
                Ok(_) => revoked.push(lease),
                // Ended meanwhile (expired, or revoked by its agent): nothing left to revoke.
                Err(error) if error.to_string().contains("lease_not_found") => {}
                Err(error) => return Err(error),
            }
        }
        if target.json {
            println!("{}", json!({"agent": owner, "revoked": revoked}));
        } else if revoked.is_empty() {
            println!("agent {owner} has no live lease: nothing revoked");
        } else {
            for lease in &revoked {
                println!("revoked lease {lease} of agent {owner}");
            }
            println!(
                "{} lease(s) of agent {owner} revoked: everything they held is released and \
                 handed to the next waiters",
                revoked.len()
            );
        }
        Ok(())
    })
}
