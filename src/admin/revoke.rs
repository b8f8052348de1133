//! `hivekeeper revoke LEASE`: ends a lease through the log, as its expiry would.

use hivekeeper_agent::protocol::Op;
use serde_json::json;

use super::{Target, block_on, connect, request};

/// `hivekeeper revoke LEASE`.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The lease to end (as `hivekeeper leases` or `inspect` shows it).
    lease: String,
    #[command(flatten)]
    target: Target,
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
