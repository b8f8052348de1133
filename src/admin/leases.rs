//! `hivekeeper leases [--agent A]`: every live lease (or one agent's), its agent, TTL and time
//! left.

use hivekeeper_agent::Agent;
use hivekeeper_agent::protocol::{LeaseInfo, LeasePage, Op};
use serde_json::json;

use super::table::{Table, human_ms};
use super::{Target, all_pages, block_on, connect, request};

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

/// Every live lease ([`all_pages`]); stops early once `enough` says so.
pub(super) async fn all_leases(
    agent: &Agent,
    enough: impl FnMut(&[LeaseInfo]) -> bool,
) -> anyhow::Result<Vec<LeaseInfo>> {
    let page = |after| async move {
        let page: LeasePage = request(agent, Op::AdminLeases { after }).await?;
        Ok((page.leases, page.next_after))
    };
    all_pages("admin.leases", LEASE_PAGES_MAX, page, enough).await
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
