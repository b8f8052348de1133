//! `hivekeeper kv get | put | del | txn | watch`: the service's keys from the shell, through
//! the SDK's [`Kv`] handle and its watch stream.
//!
//! ```text
//!  kv get KEY | --prefix P     ─▶ kv.get (page after page for a prefix)
//!  kv put KEY VALUE [--lease]  ─▶ kv.put
//!  kv del KEY | --prefix P     ─▶ kv.delete
//!  kv txn [--file F | stdin]   ─▶ kv.txn {compare, success, failure}
//!  kv watch KEY | --prefix P   ─▶ (kv.get for "now",) watch.poll after watch.poll, until
//!        [--rev R] [--count N]     interrupted or N events
//! ```
//!
//! With `--json` each answer (or each watch event) is printed as one JSON line, the wire's own
//! shape; without, a line per key or event for people.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, anyhow};
use futures_util::StreamExt;
use hivekeeper_agent::protocol::kv::{EventKind, Get, KeySelector, KvEvent, TxnResult};
use hivekeeper_agent::{KeyValue, Kv, KvPage, Txn, kv::put};
use serde::Serialize;

use super::{Target, block_on, connect, failure};

/// `hivekeeper kv ...`.
#[derive(Debug, clap::Args)]
pub struct KvArgs {
    #[command(subcommand)]
    action: KvAction,
}

/// What `hivekeeper kv` does.
#[derive(Debug, clap::Subcommand)]
enum KvAction {
    /// Read one key, or every key with a prefix (--prefix) in byte order. Prints `KEY = VALUE`
    /// and the key's revisions, or with --json the `kv.get` answer ({revision, kvs}).
    Get {
        /// The key (or, with --prefix, the prefix).
        #[arg(value_name = "KEY")]
        key: Option<String>,
        /// Every key starting with this (the empty string: every key).
        #[arg(long, value_name = "P", conflicts_with = "key")]
        prefix: Option<String>,
        /// Answer from the receiving member's replica, without a read-index round: faster,
        /// possibly stale.
        #[arg(long)]
        serializable: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Set KEY to VALUE (creating it). Prints the put's revision, or with --json the `kv.put`
    /// answer ({revision, prev_kv?}).
    Put {
        /// The key, 1 to 512 bytes; keys starting with `$` are the service's.
        key: String,
        /// The value.
        value: String,
        /// Bind the key to this lease: it is deleted when the lease ends. The lease must be a
        /// live one of the CLI's own agent (its --user).
        #[arg(long, value_name = "ID")]
        lease: Option<String>,
        /// Also print the key as it was before.
        #[arg(long)]
        prev_kv: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Delete one key, or every key with a prefix (--prefix), in one revision. Prints how many
    /// were deleted, or with --json the `kv.delete` answer ({revision, deleted}).
    Del {
        /// The key (or, with --prefix, the prefix).
        #[arg(value_name = "KEY")]
        key: Option<String>,
        /// Every key starting with this.
        #[arg(long, value_name = "P", conflicts_with = "key")]
        prefix: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Run a txn read as JSON from --file or stdin: {"compare": [...], "success": [...],
    /// "failure": [...]} (docs/PROTOCOL.md, kv.txn), e.g. {"compare": [{"key": "n",
    /// "target": "version", "op": "==", "value": 0}], "success": [{"put": {"key": "n",
    /// "value": "1"}}]}. Prints which branch ran and its results, or with --json the answer.
    Txn {
        /// The txn's JSON file (absent: stdin).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        #[command(flatten)]
        target: Target,
    },
    /// Print the changes to one key, or to every key with a prefix (--prefix), as they
    /// happen, until interrupted (Ctrl-C) or --count events: `REVISION PUT KEY = VALUE` or
    /// `REVISION DELETE KEY`; with --json each event as a JSON line ({revision, type, kv}).
    /// Resumes by itself across reconnects and failover; a start older than the service's
    /// history (`compacted`) is an error.
    Watch {
        /// The key (or, with --prefix, the prefix).
        #[arg(value_name = "KEY")]
        key: Option<String>,
        /// Every key starting with this.
        #[arg(long, value_name = "P", conflicts_with = "key")]
        prefix: Option<String>,
        /// Start at revision R (its changes included); absent: only changes from now on.
        #[arg(long, value_name = "R", value_parser = clap::value_parser!(u64).range(1..))]
        rev: Option<u64>,
        /// Stop after this many events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        #[command(flatten)]
        target: Target,
    },
}

/// `hivekeeper kv`.
pub fn kv(args: KvArgs) -> anyhow::Result<()> {
    block_on(async move {
        match args.action {
            KvAction::Get {
                key,
                prefix,
                serializable,
                target,
            } => {
                let selector = selector(key, prefix)?;
                let kv = handle(&target).await?;
                let page = read(&kv, selector, serializable).await?;
                if target.json {
                    return print_json(&page);
                }
                for kv in &page.kvs {
                    println!("{}", key_line(kv));
                }
                Ok(())
            }
            KvAction::Put {
                key,
                value,
                lease,
                prev_kv,
                target,
            } => {
                let kv = handle(&target).await?;
                let put = hivekeeper_agent::protocol::kv::Put {
                    lease,
                    prev_kv,
                    ..put(key, value)
                };
                let done = kv.put_with(put).await.map_err(|e| failure("kv.put", e))?;
                if target.json {
                    return print_json(&done);
                }
                println!("OK at revision {}", done.revision);
                if let Some(prev) = &done.prev_kv {
                    println!("was: {}", key_line(prev));
                }
                Ok(())
            }
            KvAction::Del {
                key,
                prefix,
                target,
            } => {
                let kv = handle(&target).await?;
                let deleted = match selector(key, prefix)? {
                    KeySelector::Key(key) => kv.delete(key).await,
                    KeySelector::Prefix(prefix) => kv.delete_prefix(prefix).await,
                }
                .map_err(|e| failure("kv.delete", e))?;
                if target.json {
                    return print_json(&deleted);
                }
                println!(
                    "deleted {} at revision {}",
                    deleted.deleted, deleted.revision
                );
                Ok(())
            }
            KvAction::Txn { file, target } => txn(file, &target).await,
            KvAction::Watch {
                key,
                prefix,
                rev,
                count,
                target,
            } => watch(selector(key, prefix)?, rev, count, &target).await,
        }
    })
}

/// The key or prefix of a `get`, `del` or `watch`: exactly one.
fn selector(key: Option<String>, prefix: Option<String>) -> anyhow::Result<KeySelector> {
    match (key, prefix) {
        (Some(key), None) => Ok(KeySelector::Key(key)),
        (None, Some(prefix)) => Ok(KeySelector::Prefix(prefix)),
        _ => Err(anyhow!("give a KEY or --prefix P")),
    }
}

/// A key handle of the CLI's agent (no lease of its own).
async fn handle(target: &Target) -> anyhow::Result<Kv> {
    Ok(connect(target, &target.broker).await?.kv())
}

/// Reads one key, or every page of a prefix.
async fn read(kv: &Kv, selector: KeySelector, serializable: bool) -> anyhow::Result<KvPage> {
    let answer = match selector {
        KeySelector::Prefix(prefix) if !serializable => kv.get_prefix(prefix).await,
        selector => {
            kv.get_with(Get::new(selector, None, None), serializable)
                .await
        }
    };
    answer.map_err(|e| failure("kv.get", e))
}

/// `kv txn`: the JSON from `file` or stdin, sent as it is.
async fn txn(file: Option<PathBuf>, target: &Target) -> anyhow::Result<()> {
    let text = match &file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the txn from {}", path.display()))?,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the txn from stdin")?;
            text
        }
    };
    let txn: Txn = serde_json::from_str(&text).context(
        "the txn must be JSON: {\"compare\": [...], \"success\": [...], \"failure\": [...]}",
    )?;
    let kv = handle(target).await?;
    let done = kv.txn(txn).await.map_err(|e| failure("kv.txn", e))?;
    if target.json {
        return print_json(&done);
    }
    let branch = if done.succeeded {
        "succeeded"
    } else {
        "failed"
    };
    println!("{branch} at revision {}", done.revision);
    for result in &done.results {
        match result {
            TxnResult::Put(put) => match &put.prev_kv {
                Some(prev) => println!("put (was: {})", key_line(prev)),
                None => println!("put"),
            },
            TxnResult::Delete(deleted) => println!("deleted {}", deleted.deleted),
            TxnResult::Get(page) => {
                for kv in &page.kvs {
                    println!("{}", key_line(kv));
                }
            }
        }
    }
    Ok(())
}

/// `kv watch`: prints each event as it arrives.
async fn watch(
    selector: KeySelector,
    rev: Option<u64>,
    count: Option<u64>,
    target: &Target,
) -> anyhow::Result<()> {
    let kv = handle(target).await?;
    let after = match rev {
        Some(rev) => rev - 1,
        // "From now": the revision a read sees; a watch after it misses nothing later.
        None => {
            let probe = Get::new(selector.clone(), None, Some(1));
            kv.get_with(probe, false)
                .await
                .map_err(|e| failure("kv.get", e))?
                .revision
        }
    };
    let mut events = kv.watch(selector).after(after).events();
    let mut printed = 0u64;
    while count.is_none_or(|count| printed < count) {
        let Some(event) = events.next().await else {
            break;
        };
        let event = event.map_err(|e| failure("watch.poll", e))?;
        if target.json {
            print_json(&event)?;
        } else {
            println!("{}", event_line(&event));
        }
        printed += 1;
    }
    Ok(())
}

fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// `KEY = VALUE (mod R, version V, lease L)`.
fn key_line(kv: &KeyValue) -> String {
    let lease = kv
        .lease
        .as_deref()
        .map_or_else(String::new, |lease| format!(", lease {lease}"));
    format!(
        "{} = {} (mod {}, version {}{lease})",
        kv.key, kv.value, kv.mod_revision, kv.version
    )
}

/// `REVISION PUT KEY = VALUE` or `REVISION DELETE KEY`.
fn event_line(event: &KvEvent) -> String {
    match event.kind {
        EventKind::Put => format!(
            "{} PUT {} = {}",
            event.revision, event.kv.key, event.kv.value
        ),
        EventKind::Delete => format!("{} DELETE {}", event.revision, event.kv.key),
    }
}
