//! Membership changes as an operator makes them, `hivekeeper member` against real
//! `hivekeeper serve` processes: a phantom address is refused and changes nothing, a real
//! fourth member is caught up and promoted, a dead member is removed and the rest keep taking
//! writes, and `member list --json` shows the quorum arithmetic at every step.
//!
//! ```text
//! cargo test --test e2e_membership
//! ```

mod common;

use common::cluster::ProcessCluster;
use common::node::this_build;
use common::{Raw, free_port, run_cli};
use serde_json::{Value, json};

/// `--broker` for the members at `indexes`.
fn brokers(cluster: &ProcessCluster, indexes: &[usize]) -> String {
    indexes
        .iter()
        .map(|i| format!("127.0.0.1:{}", cluster.nodes[*i].mqtt_port()))
        .collect::<Vec<_>>()
        .join(",")
}

/// `member list --json` through `brokers`.
async fn list(brokers: &str) -> Value {
    run_cli(&["member", "list", "--json", "--broker", brokers])
        .await
        .json()
}

/// The members of a listing as (name, voter, leader), and its quorum figures as
/// (voters, learners, quorum, failures tolerated).
fn summary(listing: &Value) -> (Vec<(String, bool, bool)>, [u64; 4]) {
    let members = listing["members"]
        .as_array()
        .unwrap_or_else(|| panic!("no members in {listing}"))
        .iter()
        .map(|member| {
            (
                member["name"].as_str().expect("a name").to_string(),
                member["voter"].as_bool().expect("a voter flag"),
                member["leader"].as_bool().expect("a leader flag"),
            )
        })
        .collect();
    let figure = |key: &str| {
        listing[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {listing}"))
    };
    let figures = ["voters", "learners", "quorum", "failures_tolerated"].map(figure);
    (members, figures)
}

/// (name, voter, leader) for members `n1..` named in `voters`, `leader` marking one.
fn voters(names: &[&str], leader: &str) -> Vec<(String, bool, bool)> {
    names
        .iter()
        .map(|name| (name.to_string(), true, *name == leader))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phantom_is_refused_a_fourth_is_promoted_and_a_dead_member_is_removed() {
    let mut cluster = ProcessCluster::start(3, &[]).await;
    let all = brokers(&cluster, &[0, 1, 2]);
    let leader = format!("n{}", cluster.leader(10).await + 1);
    let listing = list(&all).await;
    assert_eq!(
        summary(&listing),
        (voters(&["n1", "n2", "n3"], &leader), [3, 0, 2, 1])
    );
    assert_eq!(listing["leader"], json!(leader));

    // A phantom: nothing listens at that address. Refused before anything is proposed.
    let phantom = format!("127.0.0.1:{}", free_port());
    let n4 = format!("n4={phantom}");
    let refused = run_cli(&["member", "add", &n4, "--broker", &all]).await;
    assert!(!refused.success, "a phantom was added: {}", refused.stdout);
    assert_eq!(
        refused.stderr,
        format!(
            "hivekeeper: admin.member.add refused: bad_request: nothing answers as member n4 at \
             {phantom} (its peer port): Connection refused (os error 111). Nothing was changed: \
             start n4 first (hivekeeper serve --name n4 --initial-cluster {n4} \
             --initial-cluster-state existing), then add it\n"
        )
    );
    assert_eq!(
        summary(&list(&all).await),
        (voters(&["n1", "n2", "n3"], &leader), [3, 0, 2, 1]),
        "the phantom changed the membership"
    );
    // A typo never leaves the CLI.
    let typo = run_cli(&["member", "add", "n4=127.0.0.1", "--broker", &all]).await;
    assert!(!typo.success);
    assert_eq!(
        typo.stderr,
        "hivekeeper: member add \"n4=127.0.0.1\": `addr` \"127.0.0.1\" is not host:port\n"
    );

    // A real fourth member: started to join, caught up as a learner, promoted.
    let (fourth, n4) = cluster.start_joining(&this_build(), "n4").await;
    let peer = n4.split_once('=').expect("NAME=ADDR").1;
    let added = run_cli(&["member", "add", &n4, "--broker", &all]).await;
    assert!(added.success, "member add failed: {}", added.stderr);
    assert_eq!(
        added.stdout,
        format!("added n4 at {peer}: it has caught up and votes\n")
    );
    assert_eq!(
        summary(&list(&all).await),
        (voters(&["n1", "n2", "n3", "n4"], &leader), [4, 0, 3, 1])
    );
    // It serves: a lease through its own broker.
    let mut raw = Raw::connect(fourth.mqtt_port(), "via-n4").await;
    raw.grant("g1", 5_000).await;

    // A member dies and is removed while down; the other three keep taking writes.
    let leader_index = cluster.leader(10).await;
    let dead = (0..3).find(|i| *i != leader_index).expect("a follower");
    cluster.nodes[dead].kill9();
    let dead_name = format!("n{}", dead + 1);
    let live = brokers(&cluster, &[leader_index]);
    let removed = run_cli(&["member", "remove", &dead_name, "--broker", &live]).await;
    assert!(removed.success, "member remove failed: {}", removed.stderr);
    assert_eq!(
        removed.stdout,
        format!("removed {dead_name}: stop its process now\n")
    );
    let left: Vec<&str> = ["n1", "n2", "n3", "n4"]
        .into_iter()
        .filter(|name| *name != dead_name)
        .collect();
    assert_eq!(
        summary(&list(&live).await),
        (voters(&left, &leader), [3, 0, 2, 1])
    );
    let mut writer = Raw::connect(cluster.nodes[leader_index].mqtt_port(), "after-removal").await;
    let lease = writer.grant("g2", 5_000).await;
    let answer = writer
        .call(
            json!({"id": "a1", "op": "lock.acquire", "name": "pad", "lease": lease, "wait_ms": 0}),
        )
        .await;
    assert!(
        answer["token"].as_u64().is_some(),
        "acquire after the removal: {answer}"
    );
}
