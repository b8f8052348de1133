//! `hivekeeper leases [--agent A]`: every live lease (or one agent's), its agent, TTL and time
//! left.

use anyhow::bail;
use hivekeeper_agent::Agent;
use hivekeeper_agent::protocol::{LeaseInfo, LeasePage, Op};
use serde_json::json;

use super::table::{Table, human_ms};
use super::{Target, block_on, connect, request};

/// Most `admin.leases` pages read by one command: the service's default lease bound (100,000)
/// at 256 a page is 391 pages; this leaves room for a raised bound and still ends.
const LEASE_PAGES_MAX: usize = 10_000;

/// `hivekeeper leases`.
#[derive(Debug, clap::Args)]
pub struct LeasesArgs {
    /// Only the leases of this agent.
    #[arg(long, value_name = "A")]
    agent: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// Every live lease, page after page (each page a linearizable read; the whole list is not
/// one snapshot when leases come and go meanwhile). Stops early once `enough` says so.
pub(super) async fn all_leases(
    agent: &Agent,
    mut enough: impl FnMut(&[LeaseInfo]) -> bool,
) -> anyhow::Result<Vec<LeaseInfo>> {
    let mut leases = Vec::new();
    let mut after = None;
    for _ in 0..LEASE_PAGES_MAX {
        let page: LeasePage = request(agent, Op::AdminLeases { after }).await?;
        leases.extend(page.leases);
        match page.next_after {
            Some(next) if !enough(&leases) => after = Some(next),
            _ => return Ok(leases),
        }
    }
    bail!("admin.leases: more than {LEASE_PAGES_MAX} pages; stopped")
}

/// `hivekeeper leases`.
pub fn leases(args: LeasesArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let agent = connect(target, &target.broker).await?;
        let mut leases = all_leases(&agent, |_| false).await?;
        if let Some(wanted) = &args.agent {
            leases.retain(|lease| lease.agent == *wanted);
        }
        if target.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"leases": leases}))?
            );
        } else if leases.is_empty() {
            match &args.agent {
                Some(wanted) => println!("agent {wanted} has no live lease"),
                None => println!("no live leases"),
            }
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
