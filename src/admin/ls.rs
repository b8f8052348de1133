//! `hivekeeper ls [KIND] [--prefix P] [--limit N]`: the resources in use, with
//! how many hold and wait for each, page after page of `admin.resources`.

use hivekeeper_agent::protocol::{Op, ResourceInfo, ResourceKind, ResourcePage};
use serde::Serialize;

use super::inspect::kind_parser;
use super::table::Table;
use super::{Target, block_on, connect, request};

/// Most resources `admin.resources` answers in one page (`validate::RESOURCE_PAGE_MAX`).
const PAGE_MAX: u32 = 100;

/// `hivekeeper ls`.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Only this kind; all kinds when left out.
    #[arg(value_parser = kind_parser())]
    kind: Option<ResourceKind>,
    /// Only names that start with this.
    #[arg(long, value_name = "P")]
    prefix: Option<String>,
    /// Show at most this many resources (in kind, then name order).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    #[command(flatten)]
    target: Target,
}

/// What `ls --json` prints.
#[derive(Serialize)]
struct Listing {
    resources: Vec<ResourceInfo>,
    /// Present when more resources match than `--limit` shows: `ls` would go on after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<String>,
}

/// `hivekeeper ls`.
pub fn ls(args: LsArgs) -> anyhow::Result<()> {
    block_on(async move {
        let target = &args.target;
        let agent = connect(target, &target.broker).await?;
        let kind = args.kind;
        let mut listing = Listing {
            resources: Vec::new(),
            next_after: None,
        };
        // Bounded: each page brings at least one resource until --limit is reached.
        loop {
            let wanted = args.limit - listing.resources.len() as u32;
            let page: ResourcePage = request(
                &agent,
                Op::AdminResources {
                    kind,
                    prefix: args.prefix.clone(),
                    after: listing.next_after.take(),
                    limit: Some(wanted.min(PAGE_MAX)),
                },
            )
            .await?;
            listing.resources.extend(page.resources);
            listing.next_after = page.next_after;
            if listing.next_after.is_none() || listing.resources.len() as u32 >= args.limit {
                break;
            }
        }
        if target.json {
            println!("{}", serde_json::to_string_pretty(&listing)?);
        } else {
            print!("{}", listing_text(&listing, args.limit));
        }
        Ok(())
    })
}

/// The table of `ls`, for people.
fn listing_text(listing: &Listing, limit: u32) -> String {
    if listing.resources.is_empty() {
        return "no resources in use\n".into();
    }
    let mut table = Table::new(&["KIND", "NAME", "HOLDERS", "WAITERS"]);
    for resource in &listing.resources {
        table.row(vec![
            resource.kind.as_str().into(),
            resource.name.clone(),
            resource.holders.to_string(),
            resource.waiters.to_string(),
        ]);
    }
    let mut out = table.render();
    if listing.next_after.is_some() {
        out.push_str(&format!(
            "... and more (the first {limit} shown; raise --limit or narrow with --prefix)\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use hivekeeper_agent::protocol::{ResourceInfo, ResourceKind};

    use super::{Listing, listing_text};

    #[test]
    fn the_table_lists_each_resource_and_says_when_more_follow() {
        let resource = |kind, name: &str, holders, waiters| ResourceInfo {
            kind,
            name: name.into(),
            holders,
            waiters,
        };
        let listing = Listing {
            resources: vec![
                resource(ResourceKind::Lock, "door/2", 1, 2),
                resource(ResourceKind::Sem, "chargers", 2, 0),
            ],
            next_after: Some("sem/chargers".into()),
        };
        assert_eq!(
            listing_text(&listing, 2),
            "KIND  NAME      HOLDERS  WAITERS\n\
             lock  door/2    1        2\n\
             sem   chargers  2        0\n\
             ... and more (the first 2 shown; raise --limit or narrow with --prefix)\n"
        );
        let empty = Listing {
            resources: vec![],
            next_after: None,
        };
        assert_eq!(listing_text(&empty, 100), "no resources in use\n");
    }
}
