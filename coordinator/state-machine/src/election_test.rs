//! Elections: campaign, proclaim, resign and leader with their exact replies and events, the
//! handover inside the entry that ends a leadership (resign and every way a lease ends), the
//! `$election/` mirror and the watch events it makes, the bounds, and the two etcd bugs that
//! must stay impossible.

use std::sync::Arc;

use hivekeeper_protocol::kv::{EventKind, KeySelector, KeyValue, KvEvent};
use hivekeeper_protocol::{
    ErrorCode, HolderInfo, KvPutDone, LeaderInfo, LockMode, ResourceInfo, ResourceKind, Role,
    WaiterInfo,
};

use super::kv_test::{delete_event, kv, put_event};
use super::test_support::*;
use super::{
    Command, Event, KV_LIMITS_DEFAULT, KvLimits, LeaseId, Limits, ReleaseReason, Reply,
    ResourceKey, StateMachine,
};

const HASH: &str = "$argon2id$v=19$m=64,t=1,p=1$c2FsdA$aGFzaA";

fn campaign(name: &str, lease: &str, value: &str, wait_ms: Option<u64>) -> Op {
    Op::ElectionCampaign {
        name: name.into(),
        lease: lease.into(),
        value: value.into(),
        wait_ms,
    }
}

fn proclaim(name: &str, token: u64, value: &str) -> Op {
    Op::ElectionProclaim {
        name: name.into(),
        token,
        value: value.into(),
    }
}

fn resign(name: &str, token: u64) -> Op {
    Op::ElectionResign {
        name: name.into(),
        token,
    }
}

fn key(name: &str) -> ResourceKey {
    ResourceKey::new(ResourceKind::Election, &Arc::from(name))
}

fn leader(h: &Harness, name: &str) -> Option<LeaderInfo> {
    let op = Op::ElectionLeader { name: name.into() };
    match h.sm.query("reader", &op) {
        Reply::Leader { leader } => leader,
        other => panic!("election.leader answered {other:?}"),
    }
}

fn leads(agent: &str, value: &str, token: u64) -> Option<LeaderInfo> {
    Some(LeaderInfo {
        agent: agent.into(),
        value: value.into(),
        token,
    })
}

/// `$election/{name}` as the key space has it.
fn mirror(h: &Harness, name: &str) -> Option<KeyValue> {
    h.sm.key_space().get(&format!("$election/{name}"))
}

/// The `$election/` key of `name` with `value`, created at `token`, last put at `modified`.
fn mirrored(name: &str, value: &str, token: u64, modified: u64, version: u64) -> KeyValue {
    kv(
        &format!("$election/{name}"),
        value,
        token,
        modified,
        version,
    )
}

/// What a watch on `$election/` after `after` sees.
fn watched(h: &Harness, after: u64) -> Vec<KvEvent> {
    let prefix = KeySelector::Prefix("$election/".into());
    h.sm.watch(after, &prefix, 100)
        .expect("not compacted")
        .events
}

/// A grant of `name` to `agent`'s lease: at once, or from the queue after `waited_ms`.
fn granted(name: &str, agent: &str, lease: u64, token: u64, waited_ms: Option<u64>) -> Event {
    Event::Granted {
        key: key(name),
        agent: Arc::from(agent),
        lease: LeaseId(lease),
        token,
        waited_ms: waited_ms.unwrap_or(0),
        queued: waited_ms.is_some(),
    }
}

/// The end of `agent`'s leadership of `name`, held `held_ms`.
fn released(
    name: &str,
    (agent, lease): (&str, u64),
    token: u64,
    held_ms: u64,
    reason: ReleaseReason,
) -> Event {
    Event::Released {
        key: key(name),
        agent: Arc::from(agent),
        lease: LeaseId(lease),
        token,
        held_ms,
        reason,
    }
}

fn answered(name: &str, agent: &str, request_id: &str, reply: Reply) -> Event {
    Event::Respond {
        key: key(name),
        agent: Arc::from(agent),
        request_id: request_id.into(),
        reply,
    }
}

fn queued(name: &str, agent: &str, request_id: &str) -> Event {
    Event::Queued {
        key: key(name),
        agent: Arc::from(agent),
        request_id: request_id.into(),
    }
}

/// The events of an entry about election `name`, in order.
fn about(name: &str, events: &[Event]) -> Vec<Event> {
    let key = key(name);
    events
        .iter()
        .filter(|event| match event {
            Event::Granted { key: k, .. }
            | Event::Released { key: k, .. }
            | Event::Queued { key: k, .. }
            | Event::Respond { key: k, .. } => *k == key,
            _ => false,
        })
        .cloned()
        .collect()
}

/// A handover of "hive" from a (value "va") to b (value "vb", its campaign `r5` queued): the
/// entry's events and what the watch sees.
struct Handover {
    /// a's token.
    first: u64,
    /// The entry that hands over: its position makes the revisions.
    entry: u64,
    /// a's lease, then b's.
    leases: (u64, u64),
    /// How long a led.
    held_ms: u64,
    /// How long b waited.
    waited_ms: u64,
    /// Why a's leadership ended.
    reason: ReleaseReason,
}

/// Checks `handover`'s events and watch events: a's leadership ends, the old key goes at the
/// entry's first revision, b leads with the next as its token (its key created at it), and
/// only b is answered. Returns b's token.
fn assert_handover(h: &Harness, events: &[Event], handover: &Handover) -> u64 {
    let Handover {
        first,
        entry,
        leases: (from, to),
        ..
    } = *handover;
    let (deleted_at, second) = (entry << 16, (entry << 16) + 1);
    assert_eq!(
        about("hive", events),
        vec![
            released(
                "hive",
                ("a", from),
                first,
                handover.held_ms,
                handover.reason
            ),
            granted("hive", "b", to, second, Some(handover.waited_ms)),
            answered("hive", "b", "r5", Reply::Granted { token: second }),
        ],
        "no herd: only the new leader is answered"
    );
    assert_eq!(
        watched(h, first),
        vec![
            delete_event(deleted_at, mirrored("hive", "va", first, first, 1)),
            put_event(second, mirrored("hive", "vb", second, second, 1)),
        ]
    );
    assert_eq!(leader(h, "hive"), leads("b", "vb", second));
    second
}

#[test]
fn the_first_campaign_leads_at_once_and_creates_the_key_at_its_token() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let (reply, events) = h.send("a", campaign("hive", &a, "10.0.0.7:7000", None));
    let token = 2 << 16;
    assert_eq!(reply, Reply::Granted { token });
    assert_eq!(events, vec![granted("hive", "a", 1, token, None)]);
    let key = mirrored("hive", "10.0.0.7:7000", token, token, 1);
    assert_eq!(mirror(&h, "hive"), Some(key.clone()));
    assert_eq!(watched(&h, 0), vec![put_event(token, key)]);
    assert_eq!(leader(&h, "hive"), leads("a", "10.0.0.7:7000", token));
    assert_eq!(
        h.sm.revision(),
        token,
        "one revision: the token is the key's"
    );
    assert_eq!(leader(&h, "nobody"), None);
}

#[test]
fn a_resign_hands_over_to_the_head_candidate_in_the_same_entry() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    let first = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
    h.now_ms += 10;
    assert_eq!(
        h.send("b", campaign("hive", &b, "vb", None)),
        (Reply::Queued, vec![queued("hive", "b", "r5")])
    );
    assert_eq!(
        h.send("c", campaign("hive", &c, "vc", None)),
        (Reply::Queued, vec![queued("hive", "c", "r6")])
    );
    h.now_ms += 25;
    let (reply, events) = h.send("a", resign("hive", first));
    assert_eq!(reply, Reply::Done);
    assert_eq!(events.len(), 3, "{events:?}");
    let handover = Handover {
        first,
        entry: 7,
        leases: (1, 2),
        held_ms: 35,
        waited_ms: 25,
        reason: ReleaseReason::Released,
    };
    assert_handover(&h, &events, &handover);
    let (holders, waiters) = h.occupants(ResourceKind::Election, "hive");
    assert_eq!((holders, waiters), (vec!["b".into()], vec!["c".into()]));
}

#[test]
fn the_last_resign_deletes_the_key_and_forgets_the_election() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let token = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
    let (reply, events) = h.send("a", resign("hive", token));
    assert_eq!(reply, Reply::Done);
    assert_eq!(
        events,
        vec![released(
            "hive",
            ("a", 1),
            token,
            0,
            ReleaseReason::Released
        )]
    );
    assert_eq!(mirror(&h, "hive"), None);
    assert_eq!(
        watched(&h, token),
        vec![delete_event(
            3 << 16,
            mirrored("hive", "va", token, token, 1)
        )]
    );
    assert_eq!(leader(&h, "hive"), None);
    assert_eq!(
        h.sm.query("x", &inspect("hive")),
        Reply::Inspect {
            limit: None,
            holders: vec![],
            waiters: vec![],
            count: None,
            leaving: None,
        }
    );
    assert_eq!(h.sm.resource_count(), 0);
    // A second resign with the same token finds nothing to resign.
    let refused = h.reply("a", resign("hive", token));
    assert_eq!(refusal(&refused).0, ErrorCode::NotHolder);
}

fn inspect(name: &str) -> Op {
    Op::Inspect {
        kind: ResourceKind::Election,
        name: name.into(),
    }
}

/// How agent a's leadership ends with its lease.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Revoked,
    Expired,
    AdminRevoked,
    /// Its account removed (the harness must have added it).
    AccountRemoved,
}

/// Ends agent a's `lease` as `ending` says, in one entry of `h`: its events.
fn end(h: &mut Harness, ending: Ending, lease: &str) -> Vec<Event> {
    let lease_op = |op: fn(String) -> Op| op(lease.to_string());
    let (reply, events) = match ending {
        Ending::Revoked => h.send("a", lease_op(|lease| Op::LeaseRevoke { lease })),
        Ending::Expired => {
            h.now_ms += 5_000;
            h.expire(&[lease])
        }
        Ending::AdminRevoked => h.send("admin", lease_op(|lease| Op::AdminRevoke { lease })),
        Ending::AccountRemoved => h.send("admin", Op::AdminAgentRemove { name: "a".into() }),
    };
    let ended = LeaseId::parse(lease).expect("a lease id");
    let expected = match ending {
        Ending::Expired => Reply::Expired {
            leases: vec![ended],
        },
        _ => Reply::Done,
    };
    assert_eq!(reply, expected, "{ending:?}");
    events
}

#[test]
fn every_way_a_leaders_lease_ends_hands_over_and_moves_the_key() {
    let endings = [
        Ending::Revoked,
        Ending::Expired,
        Ending::AdminRevoked,
        Ending::AccountRemoved,
    ];
    for how in endings {
        let mut h = Harness::new();
        let add = Op::AdminAgentAdd {
            name: "a".into(),
            role: Some(Role::Agent),
            kv_read: Vec::new(),
            kv_write: Vec::new(),
        };
        h.send_account("admin", (add, HASH.into()));
        let [a, b] = h.leases(["a", "b"], 5_000);
        let first = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
        assert_eq!(
            h.reply("b", campaign("hive", &b, "vb", None)),
            Reply::Queued
        );
        let ending = h.index + 1;
        let events = end(&mut h, how, &a);
        let held_ms = h.now_ms - 1_000_000;
        let handover = Handover {
            first,
            entry: ending,
            leases: (2, 3),
            held_ms,
            waited_ms: held_ms,
            reason: ReleaseReason::LeaseEnded,
        };
        assert_handover(&h, &events, &handover);
    }
}

#[test]
fn a_leader_whose_lease_ends_alone_leaves_no_key_and_no_leader() {
    for how in [Ending::Revoked, Ending::Expired, Ending::AdminRevoked] {
        let mut h = Harness::new();
        let a = h.lease("a", 5_000);
        let token = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
        let ending = h.index + 1;
        let events = end(&mut h, how, &a);
        assert_eq!(
            about("hive", &events),
            vec![released(
                "hive",
                ("a", 1),
                token,
                h.now_ms - 1_000_000,
                ReleaseReason::LeaseEnded
            )]
        );
        assert_eq!(
            watched(&h, token),
            vec![delete_event(
                ending << 16,
                mirrored("hive", "va", token, token, 1)
            )]
        );
        assert_eq!((leader(&h, "hive"), mirror(&h, "hive")), (None, None));
    }
}

#[test]
fn a_proclaim_puts_the_value_at_a_new_revision_with_the_same_create_revision() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let token = Harness::token(&h.reply("a", campaign("hive", &a, "v1", None)));
    let (reply, events) = h.send("a", proclaim("hive", token, "v2"));
    let revision = 3 << 16;
    assert_eq!(
        reply,
        Reply::KvPut(KvPutDone {
            revision,
            prev_kv: None
        })
    );
    assert_eq!(events, vec![]);
    let key = mirrored("hive", "v2", token, revision, 2);
    assert_eq!(mirror(&h, "hive"), Some(key.clone()));
    assert_eq!(watched(&h, token), vec![put_event(revision, key)]);
    assert_eq!(leader(&h, "hive"), leads("a", "v2", token));
    // The same value again is still a change: a new revision, as a put.
    let again = h.reply("a", proclaim("hive", token, "v2"));
    assert_eq!(
        again,
        Reply::KvPut(KvPutDone {
            revision: 4 << 16,
            prev_kv: None
        })
    );
    assert_eq!(mirror(&h, "hive").map(|kv| kv.version), Some(3));
}

#[test]
fn proclaim_and_resign_need_the_leading_token_and_its_agent() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let token = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
    h.reply("b", campaign("hive", &b, "vb", None));
    let before = (h.sm.revision(), mirror(&h, "hive"));
    // A token read by someone else through election.leader does not let them act.
    let read = leader(&h, "hive").expect("a leader").token;
    let refusals = [
        ("b", proclaim("hive", read, "stolen")),
        ("b", resign("hive", read)),
        ("a", proclaim("hive", token + 1, "v")),
        ("a", resign("hive", token - 1)),
        ("a", proclaim("other", token, "v")),
        ("a", resign("other", token)),
    ];
    for (agent, op) in refusals {
        let (reply, events) = h.send(agent, op.clone());
        assert_eq!(refusal(&reply).0, ErrorCode::NotHolder, "{op:?}");
        assert_eq!(events, vec![], "{op:?}");
    }
    let (reply, _) = h.send("b", proclaim("hive", token, "stolen"));
    assert_eq!(
        refusal(&reply).1,
        format!("token {token} does not lead election \"hive\" for agent b")
    );
    assert_eq!((h.sm.revision(), mirror(&h, "hive")), before);
    assert_eq!(leader(&h, "hive"), leads("a", "va", token));
}

/// etcd: "Proclaim after a lost leadership succeeds". Here the deposed leader's proclaim with
/// its old token is refused and changes nothing, whether it lost by its lease's end or by its
/// own resign, and even when it campaigns again.
#[test]
fn regression_a_proclaim_after_a_lost_leadership_is_refused_and_changes_nothing() {
    for lost in [Ending::Expired, Ending::Revoked, Ending::AdminRevoked] {
        let mut h = Harness::new();
        let [a, b] = h.leases(["a", "b"], 5_000);
        let old = Harness::token(&h.reply("a", campaign("hive", &a, "a-addr", None)));
        h.reply("b", campaign("hive", &b, "b-addr", None));
        end(&mut h, lost, &a);
        let new = leader(&h, "hive").expect("b leads").token;
        assert!(new > old);
        let a2 = h.lease("a", 5_000);
        assert_eq!(
            h.reply("a", campaign("hive", &a2, "a-addr", None)),
            Reply::Queued
        );
        let before = (h.sm.revision(), mirror(&h, "hive"), leader(&h, "hive"));
        let (reply, events) = h.send("a", proclaim("hive", old, "a-is-back"));
        assert_eq!(refusal(&reply).0, ErrorCode::NotHolder);
        assert_eq!(events, vec![]);
        assert_eq!(
            (h.sm.revision(), mirror(&h, "hive"), leader(&h, "hive")),
            before,
            "nothing changed"
        );
        assert_eq!(before.2, leads("b", "b-addr", new));
    }
    // Lost by its own resign: the old token leads no more either.
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let old = Harness::token(&h.reply("a", campaign("hive", &a, "a-addr", None)));
    h.reply("b", campaign("hive", &b, "b-addr", None));
    h.reply("a", resign("hive", old));
    let reply = h.reply("a", proclaim("hive", old, "a-is-back"));
    assert_eq!(refusal(&reply).0, ErrorCode::NotHolder);
    assert_eq!(mirror(&h, "hive").map(|kv| kv.value), Some("b-addr".into()));
}

/// etcd: "Resign with a stale session". Here an old leader's resign with its old token, after
/// a new leader was elected, is refused and does not unseat the new leader.
#[test]
fn regression_a_stale_resign_does_not_unseat_the_new_leader() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    let old = Harness::token(&h.reply("a", campaign("hive", &a, "a-addr", None)));
    h.reply("b", campaign("hive", &b, "b-addr", None));
    h.reply("c", campaign("hive", &c, "c-addr", None));
    end(&mut h, Ending::Expired, &a);
    let new = leader(&h, "hive").expect("b leads").token;
    let a2 = h.lease("a", 5_000);
    h.reply("a", campaign("hive", &a2, "a-addr", None));
    let before = (
        h.sm.revision(),
        mirror(&h, "hive"),
        h.occupants(ResourceKind::Election, "hive"),
    );
    let (reply, events) = h.send("a", resign("hive", old));
    assert_eq!(refusal(&reply).0, ErrorCode::NotHolder);
    assert_eq!(events, vec![]);
    assert_eq!(
        (
            h.sm.revision(),
            mirror(&h, "hive"),
            h.occupants(ResourceKind::Election, "hive")
        ),
        before
    );
    assert_eq!(leader(&h, "hive"), leads("b", "b-addr", new));
    assert_eq!(before.2, (vec!["b".into()], vec!["c".into(), "a".into()]));
}

#[test]
fn campaigning_again_while_leading_answers_the_token_or_refuses_another_value() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let token = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
    let revision = h.sm.revision();
    assert_eq!(
        h.send("a", campaign("hive", &a, "va", Some(0))),
        (Reply::Granted { token }, vec![])
    );
    let other = h.reply("a", campaign("hive", &a, "vb", None));
    assert_eq!(
        refusal(&other),
        (
            ErrorCode::BadRequest,
            "lease 0000000000000001 already leads election \"hive\" with another value: \
             election.proclaim changes it"
        )
    );
    assert_eq!(h.sm.revision(), revision, "no revision taken");
}

#[test]
fn campaigning_again_while_waiting_takes_the_wait_over_as_a_second_acquire_does() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    h.reply("a", campaign("hive", &a, "va", None));
    assert_eq!(
        h.send_as("b", "b1", campaign("hive", &b, "vb", None)).0,
        Reply::Queued
    );
    // A same-id retry finds its slot.
    assert_eq!(
        h.send_as("b", "b1", campaign("hive", &b, "vb", None)),
        (Reply::Queued, vec![])
    );
    // A try while waiting, and another value, leave the wait alone.
    let tried = h.send_as("b", "b2", campaign("hive", &b, "vb", Some(0)));
    assert_eq!(refusal(&tried.0).0, ErrorCode::WouldBlock);
    let other = h.send_as("b", "b3", campaign("hive", &b, "vz", None));
    assert_eq!(
        refusal(&other.0),
        (
            ErrorCode::BadRequest,
            "lease 0000000000000002 already waits for election:hive (request id \"b1\") with \
             another value"
        )
    );
    // A new id with the same value takes the wait over, in place.
    let (reply, events) = h.send_as("b", "b4", campaign("hive", &b, "vb", None));
    assert_eq!(reply, Reply::Queued);
    let superseded = Reply::refused(
        ErrorCode::Timeout,
        "superseded by request id \"b4\": the wait for election:hive goes on under it",
    );
    assert_eq!(
        events,
        vec![
            answered("hive", "b", "b1", superseded),
            queued("hive", "b", "b4")
        ]
    );
    assert_eq!(h.sm.waiter_counts().get(ResourceKind::Election), 1);
}

#[test]
fn try_and_bounded_waits_follow_lock_acquire() {
    let mut h = Harness::new();
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    let token = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
    let tried = h.send("b", campaign("hive", &b, "vb", Some(0)));
    assert_eq!(
        (refusal(&tried.0), tried.1),
        (
            (ErrorCode::WouldBlock, "election \"hive\" has a leader"),
            vec![]
        )
    );
    assert_eq!(
        h.reply("b", campaign("hive", &b, "vb", Some(100))),
        Reply::Queued
    );
    assert_eq!(
        h.reply("c", campaign("hive", &c, "vc", None)),
        Reply::Queued
    );
    h.now_ms += 100;
    let revision = h.sm.revision();
    let (reply, events) = h.apply(Command::ExpireWaits { term: 1 });
    assert_eq!(reply, Reply::WaitsExpired { count: 1 });
    let (code, _) = refusal(match &events[..] {
        [Event::Respond { reply, .. }] => reply,
        other => panic!("one timeout, got {other:?}"),
    });
    assert_eq!(code, ErrorCode::Timeout);
    assert_eq!(h.sm.revision(), revision, "the leader and its key stay");
    assert_eq!(leader(&h, "hive"), leads("a", "va", token));
    // A candidate whose lease ends leaves the queue; the leader stays.
    let (_, events) = h.send("c", Op::LeaseRevoke { lease: c.clone() });
    assert_eq!(
        about("hive", &events),
        vec![answered(
            "hive",
            "c",
            "r7",
            Reply::refused(
                ErrorCode::LeaseNotFound,
                "the lease ended while the request waited"
            )
        )]
    );
    assert_eq!(h.sm.revision(), revision);
    // The queue is empty again: a resign deletes the key.
    h.reply("a", resign("hive", token));
    assert_eq!(mirror(&h, "hive"), None);
}

#[test]
fn candidates_lead_in_arrival_order_with_increasing_tokens() {
    let mut h = Harness::new();
    let agents = ["w0", "w1", "w2", "w3", "w4"];
    let leases: Vec<String> = agents.iter().map(|a| h.lease(a, 5_000)).collect();
    let mut token = Harness::token(&h.reply("w0", campaign("e", &leases[0], "w0", None)));
    for (agent, lease) in agents.iter().zip(&leases).skip(1) {
        let reply = h.reply(agent, campaign("e", lease, agent, None));
        assert_eq!(reply, Reply::Queued);
    }
    for next in &agents[1..] {
        let current = leader(&h, "e").expect("a leader").agent;
        let (_, events) = h.send(&current, resign("e", token));
        let answers = responses(&events);
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].0, *next);
        let next_token = Harness::token(&answers[0].2);
        assert!(next_token > token, "{next_token} after {token}");
        assert_eq!(
            mirror(&h, "e").map(|kv| (kv.value, kv.create_revision)),
            Some((next.to_string(), next_token))
        );
        token = next_token;
    }
}

#[test]
fn one_lease_leading_two_elections_hands_both_over_in_name_order() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let one = Harness::token(&h.reply("a", campaign("e1", &a, "a1", None)));
    let two = Harness::token(&h.reply("a", campaign("e2", &a, "a2", None)));
    h.reply("b", campaign("e2", &b, "b2", None));
    h.reply("b", campaign("e1", &b, "b1", None));
    let (_, _) = h.send("a", Op::LeaseRevoke { lease: a.clone() });
    let base = 7 << 16;
    assert_eq!(
        watched(&h, two),
        vec![
            delete_event(base, mirrored("e1", "a1", one, one, 1)),
            put_event(base + 1, mirrored("e1", "b1", base + 1, base + 1, 1)),
            delete_event(base + 2, mirrored("e2", "a2", two, two, 1)),
            put_event(base + 3, mirrored("e2", "b2", base + 3, base + 3, 1)),
        ]
    );
}

#[test]
fn inspect_fence_check_and_admin_resources_show_elections() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let token = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
    h.reply("b", campaign("hive", &b, "vb", None));
    let reply = h.sm.query("x", &inspect("hive"));
    let Reply::Inspect {
        limit,
        holders,
        waiters,
        ..
    } = reply
    else {
        panic!("an inspection: {reply:?}");
    };
    assert_eq!(limit, None);
    assert_eq!(
        holders,
        vec![HolderInfo {
            agent: "a".into(),
            lease: LeaseId(1).to_string(),
            token,
            permits: None,
            since_ms: 1_000_000,
            area: None,
            start_ms: None,
            end_ms: None,
            volumes: vec![],
            priority: None,
            vacate_by_ms: None,
            value: Some("va".into()),
            mode: LockMode::Exclusive,
        }]
    );
    assert_eq!(
        waiters,
        vec![WaiterInfo {
            agent: "b".into(),
            position: 1,
            permits: None,
            since_ms: 1_000_000,
            area: None,
            start_ms: None,
            end_ms: None,
            volumes: vec![],
            priority: None,
            value: Some("vb".into()),
            mode: LockMode::Exclusive,
        }]
    );
    let fence = |token| Op::FenceCheck {
        name: "hive".into(),
        kind: ResourceKind::Election,
        token,
    };
    assert_eq!(
        h.sm.query("x", &fence(token)),
        Reply::Fence {
            current: token,
            valid: true
        }
    );
    assert_eq!(
        h.sm.query("x", &fence(token - 1)),
        Reply::Fence {
            current: token,
            valid: false
        }
    );
    // A lock of the same name is another resource.
    let lock = Op::FenceCheck {
        name: "hive".into(),
        kind: ResourceKind::Lock,
        token,
    };
    assert_eq!(
        h.sm.query("x", &lock),
        Reply::Fence {
            current: 0,
            valid: false
        }
    );
    let resources = Op::AdminResources {
        kind: Some(ResourceKind::Election),
        prefix: None,
        after: None,
        limit: None,
    };
    assert_eq!(
        h.sm.query("x", &resources),
        Reply::Resources {
            resources: vec![ResourceInfo {
                kind: ResourceKind::Election,
                name: "hive".into(),
                holders: 1,
                waiters: 1,
            }],
            next_after: None
        }
    );
}

#[test]
fn admin_resources_lists_elections_after_the_other_kinds() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    h.reply("a", campaign("hive", &a, "va", None));
    h.reply("a", lock_acquire("hive", &a, None));
    let page = |after: Option<&str>| {
        let op = Op::AdminResources {
            kind: None,
            prefix: None,
            after: after.map(str::to_string),
            limit: Some(1),
        };
        match h.sm.query("x", &op) {
            Reply::Resources {
                resources,
                next_after,
            } => (
                resources
                    .into_iter()
                    .map(|info| (info.kind, info.name))
                    .collect::<Vec<_>>(),
                next_after,
            ),
            other => panic!("a page: {other:?}"),
        }
    };
    assert_eq!(
        page(None),
        (
            vec![(ResourceKind::Lock, "hive".into())],
            Some("lock/hive".into())
        )
    );
    assert_eq!(
        page(Some("lock/hive")),
        (vec![(ResourceKind::Election, "hive".into())], None)
    );
}

#[test]
fn a_txn_fenced_by_the_leadership_runs_only_while_its_token_leads() {
    use hivekeeper_protocol::kv::{Compare, Holder, Put, TxnOp};
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let first = Harness::token(&h.reply("a", campaign("hive", &a, "va", None)));
    h.reply("b", campaign("hive", &b, "vb", None));
    let fenced = |token| Op::KvTxn {
        compare: vec![Compare::Holder {
            holder: Holder {
                kind: ResourceKind::Election,
                name: "hive".into(),
            },
            token,
        }],
        success: vec![TxnOp::Put(Put {
            key: "hive/config".into(),
            value: "by the leader".into(),
            lease: None,
            prev_kv: false,
        })],
        failure: vec![],
    };
    let succeeded = |reply: Reply| match reply {
        Reply::KvTxn(done) => done.succeeded,
        other => panic!("a txn's outcome: {other:?}"),
    };
    assert!(succeeded(h.reply("a", fenced(first))));
    h.reply("a", resign("hive", first));
    assert!(!succeeded(h.reply("a", fenced(first))), "a deposed token");
    let second = leader(&h, "hive").expect("b leads").token;
    assert!(succeeded(h.reply("b", fenced(second))));
}

#[test]
fn a_value_is_bounded_as_a_keys_value_is() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    let long = "x".repeat(KV_LIMITS_DEFAULT.value_bytes_max as usize + 1);
    let reply = h.reply("a", campaign("hive", &a, &long, None));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "election.campaign: value is 8193 bytes, it must be at most 8192"
        )
    );
    // The bound is the key space's, replicated: a lowered one applies to both ops.
    let (reply, _) = h.apply(Command::Configure {
        limits: Limits::DEFAULTS,
        kv: Some(KvLimits {
            value_bytes_max: 4,
            ..KV_LIMITS_DEFAULT
        }),
    });
    assert_eq!(reply, Reply::Done);
    let reply = h.reply("a", campaign("hive", &a, "abcde", None));
    assert_eq!(refusal(&reply).0, ErrorCode::BadRequest);
    let token = Harness::token(&h.reply("a", campaign("hive", &a, "abcd", None)));
    let reply = h.reply("a", proclaim("hive", token, "abcde"));
    assert_eq!(
        refusal(&reply),
        (
            ErrorCode::BadRequest,
            "election.proclaim: value is 5 bytes, it must be at most 4"
        )
    );
}

#[test]
fn elections_count_against_the_resource_waiter_and_per_agent_bounds() {
    let limits = Limits {
        resources_max: 1,
        waiters_per_resource_max: 1,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let [a, b, c] = h.leases(["a", "b", "c"], 5_000);
    h.reply("a", campaign("e1", &a, "va", None));
    let full = h.reply("b", campaign("e2", &b, "vb", None));
    assert_eq!(
        refusal(&full),
        (
            ErrorCode::ResourceExhausted,
            "1 resources are in use, the limit"
        )
    );
    let lock = h.reply("b", lock_acquire("l", &b, None));
    assert_eq!(refusal(&lock).0, ErrorCode::ResourceExhausted);
    assert_eq!(h.reply("b", campaign("e1", &b, "vb", None)), Reply::Queued);
    let queue_full = h.reply("c", campaign("e1", &c, "vc", None));
    assert_eq!(
        refusal(&queue_full),
        (
            ErrorCode::ResourceExhausted,
            "election \"e1\" already has 1 waiters, the limit"
        )
    );
    let limits = Limits {
        holds_per_agent_max: 1,
        ..Limits::DEFAULTS
    };
    let mut h = Harness::with_limits(limits);
    let a = h.lease("a", 5_000);
    h.reply("a", campaign("e1", &a, "va", None));
    let held = h.reply("a", campaign("e2", &a, "va", None));
    assert_eq!(refusal(&held).0, ErrorCode::ResourceExhausted);
}

#[test]
fn elections_survive_a_snapshot_and_are_absent_from_one_without_them() {
    let mut h = Harness::new();
    let [a, b] = h.leases(["a", "b"], 5_000);
    let without = h.sm.snapshot();
    assert!(!String::from_utf8_lossy(&without).contains("elections"));
    h.reply("a", campaign("hive", &a, "va", None));
    h.reply("b", campaign("hive", &b, "vb", Some(60_000)));
    let bytes = h.sm.snapshot();
    let snapshot: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    let election = &snapshot["state"]["elections"]["hive"];
    assert_eq!(election["value"], "va");
    assert_eq!(election["candidate_values"], serde_json::json!({"2": "vb"}));
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert_eq!(restored.snapshot(), bytes);
    // The restored machine hands over as the original does.
    h.sm = restored;
    let token = leader(&h, "hive").expect("a leads").token;
    let (_, events) = h.send("a", resign("hive", token));
    assert_eq!(responses(&events)[0].0, "b");
    assert_eq!(mirror(&h, "hive").map(|kv| kv.value), Some("vb".into()));
}

#[test]
fn a_client_cannot_write_the_mirror_and_a_prefix_delete_leaves_it() {
    let mut h = Harness::new();
    let a = h.lease("a", 5_000);
    h.reply("a", campaign("hive", &a, "va", None));
    let put = h.reply("a", kv_put("$election/hive", "forged"));
    assert_eq!(refusal(&put).0, ErrorCode::BadRequest);
    let (reply, _) = h.send(
        "a",
        Op::KvDelete {
            key: None,
            prefix: Some(String::new()),
        },
    );
    assert!(matches!(reply, Reply::KvDeleted(_)), "{reply:?}");
    assert_eq!(mirror(&h, "hive").map(|kv| kv.value), Some("va".into()));
    assert!(
        watched(&h, 0)
            .iter()
            .all(|event| event.kind == EventKind::Put),
        "the mirror was never deleted"
    );
}
