//! `hivekeeper agent add | list | remove | rotate`: the service's accounts (authentication
//! on). `add` and `rotate` print the new secret once: the service keeps only its hash.

use anyhow::bail;
use hivekeeper_agent::protocol::{
    AccountInfo, AccountIssued, AccountPage, Done, Op, Role, Success, UnexpectedReply,
};
use serde_json::json;

use super::table::Table;
use super::{Target, all_pages, block_on, connect, request};

/// Most `admin.agent.list` pages read by one command: the service's account bound (100,000)
/// at 256 a page is 391 pages.
const ACCOUNT_PAGES_MAX: usize = 1_000;

/// `hivekeeper agent ...`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    action: AgentAction,
}

/// What `hivekeeper agent` does.
#[derive(Debug, clap::Subcommand)]
enum AgentAction {
    /// Create an account and print its secret, once (`--json`: {"agent", "role", "secret"}).
    /// The agent connects with username = NAME = its client id, and the secret as password.
    Add {
        /// The agent id.
        name: String,
        // What it may do; the help lists each role's ops from the protocol's one list.
        #[arg(long, default_value = "agent", help = role_help())]
        role: Role,
        /// A key prefix the agent may read under (kv.get, watch.poll, a txn's compares and
        /// gets); repeat for more, at most 32. Without it: every key.
        #[arg(long = "kv-read", value_name = "PREFIX")]
        kv_read: Vec<String>,
        /// A key prefix the agent may write under (kv.put, kv.delete, a txn's puts and
        /// deletes); repeat for more, at most 32. Without it: every key for the agent role;
        /// an observer writes no key and admin every key, so neither takes prefixes.
        #[arg(long = "kv-write", value_name = "PREFIX")]
        kv_write: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Every account: name, role and key prefixes (never a secret).
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Delete an account: its connections are closed and its leases revoked.
    Remove(Account),
    /// Give an account a new secret and print it, once; the old one stops working and its
    /// connections are closed.
    Rotate(Account),
}

/// The arguments of the actions on one existing account (`remove`, `rotate`): which account,
/// and the service to ask.
#[derive(Debug, clap::Args)]
struct Account {
    /// The agent id.
    name: String,
    #[command(flatten)]
    target: Target,
}

/// The help of `agent add --role`: each role with the ops it adds to the roles below it
/// (agents also act only on their own leases), from [`Role::ops_added`].
fn role_help() -> String {
    let ops = |role: Role| role.ops_added().collect::<Vec<_>>().join(", ");
    format!(
        "What it may do: agent (on its own leases: {}; inspect shows other holders by agent \
         id only), observer (also {}: watching the service, changing nothing; it reads keys \
         and never writes them) or admin (also {})",
        ops(Role::Agent),
        ops(Role::Observer),
        ops(Role::Admin)
    )
}

/// `hivekeeper agent add | list | remove | rotate`.
pub fn agent(args: AgentArgs) -> anyhow::Result<()> {
    block_on(async move {
        match args.action {
            AgentAction::Add {
                name,
                role,
                kv_read,
                kv_write,
                target,
            } => {
                let op = Op::AdminAgentAdd {
                    name,
                    role: Some(role),
                    kv_read,
                    kv_write,
                };
                print_secret(&target, request_on(&target, op).await?)
            }
            AgentAction::Rotate(Account { name, target }) => {
                let op = Op::AdminAgentRotate { name };
                print_secret(&target, request_on(&target, op).await?)
            }
            AgentAction::Remove(Account { name, target }) => {
                request_on::<Done>(&target, Op::AdminAgentRemove { name: name.clone() }).await?;
                if target.json {
                    println!("{}", json!({ "removed": name }));
                } else {
                    println!(
                        "removed agent {name}: its connections are closed, its leases revoked"
                    );
                }
                Ok(())
            }
            AgentAction::List { target } => list(&target).await,
        }
    })
}

/// One request through a fresh connection to `target`.
async fn request_on<T>(target: &Target, op: Op) -> anyhow::Result<T>
where
    T: TryFrom<Success, Error = UnexpectedReply>,
{
    let agent = connect(target, &target.broker).await?;
    request(&agent, op).await
}

/// Prints an add's or rotate's answer: the secret once, or why there is none.
fn print_secret(target: &Target, account: AccountIssued) -> anyhow::Result<()> {
    let AccountIssued {
        agent,
        role,
        secret,
    } = account;
    let Some(secret) = secret else {
        // A same-id resend after a lost answer: the account changed, but its secret was only
        // in the lost answer.
        bail!(
            "the service changed agent {agent}'s account but its answer with the secret was \
             lost; run `hivekeeper agent rotate {agent}` for a new secret"
        );
    };
    if target.json {
        println!(
            "{}",
            json!({ "agent": agent, "role": role, "secret": secret })
        );
    } else {
        println!("agent {agent} (role {role}): secret {secret}");
        println!("it is shown once: the service keeps only its hash");
    }
    Ok(())
}

/// `hivekeeper agent list`: every page ([`all_pages`]).
async fn list(target: &Target) -> anyhow::Result<()> {
    let agent = connect(target, &target.broker).await?;
    let page = |after| {
        let agent = &agent;
        async move {
            let page: AccountPage = request(agent, Op::AdminAgentList { after }).await?;
            Ok((page.accounts, page.next_after))
        }
    };
    let accounts: Vec<AccountInfo> =
        all_pages("admin.agent.list", ACCOUNT_PAGES_MAX, page, |_| false).await?;
    if target.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "accounts": accounts }))?
        );
    } else if accounts.is_empty() {
        println!("no accounts");
    } else {
        let mut table = Table::new(&["AGENT", "ROLE", "KV READ", "KV WRITE"]);
        for account in &accounts {
            let writes_default = match account.role {
                Role::Observer => "(none)",
                Role::Agent | Role::Admin => "(all)",
            };
            table.row(vec![
                account.agent.clone(),
                account.role.to_string(),
                prefixes(&account.kv_read, "(all)"),
                prefixes(&account.kv_write, writes_default),
            ]);
        }
        print!("{}", table.render());
    }
    Ok(())
}

/// An account's key prefixes for the list's table: comma-separated, or the role's default.
fn prefixes(list: &[String], default: &str) -> String {
    if list.is_empty() {
        default.to_string()
    } else {
        list.join(",")
    }
}
