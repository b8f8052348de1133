//! Accounts: add, rotate, remove (with its leases), list pages, and the refusals.

use std::sync::Arc;

use hivekeeper_protocol::{AccountInfo, ErrorCode, Role};

use super::test_support::*;
use super::{AccountChange, Event, LeaseEnd, LeaseId, Reply, StateMachine};

const HASH_1: &str = "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";
const HASH_2: &str = "$argon2id$v=19$m=64,t=1,p=1$c2FsdDI$aGFzaDI";

fn add(name: &str, role: Role, hash: &str) -> (Op, String) {
    let op = Op::AdminAgentAdd {
        name: name.into(),
        role: Some(role),
        kv_read: Vec::new(),
        kv_write: Vec::new(),
    };
    (op, hash.into())
}

fn rotate(name: &str, hash: &str) -> (Op, String) {
    (Op::AdminAgentRotate { name: name.into() }, hash.into())
}

fn changed(agent: &str, change: AccountChange) -> Event {
    Event::AccountChanged {
        agent: Arc::from(agent),
        change,
    }
}

#[test]
fn an_added_account_is_answered_with_its_hash_and_a_second_add_is_refused() {
    let mut h = Harness::new();
    let (reply, events) = h.send_account("admin", add("drone-1", Role::Agent, HASH_1));
    assert_eq!(
        reply,
        Reply::Account {
            agent: Arc::from("drone-1"),
            role: Role::Agent,
            secret_hash: HASH_1.into()
        }
    );
    assert_eq!(events, vec![changed("drone-1", AccountChange::Added)]);
    let account = h.sm.account("drone-1").expect("added");
    assert_eq!(
        (account.role, account.secret_hash.as_str()),
        (Role::Agent, HASH_1)
    );

    let (reply, events) = h.send_account("admin", add("drone-1", Role::Admin, HASH_2));
    assert_eq!(
        reply,
        Reply::refused(
            ErrorCode::BadRequest,
            "admin.agent.add: agent \"drone-1\" already has an account (admin.agent.rotate gives \
             it a new secret)"
        )
    );
    assert!(events.is_empty());
    assert_eq!(h.sm.account("drone-1").expect("kept").secret_hash, HASH_1);
}

#[test]
fn a_same_id_retry_of_an_add_gets_the_first_reply_with_the_first_hash() {
    let mut h = Harness::new();
    let first = h.send_account_as("admin", "a1", add("drone-1", Role::Observer, HASH_1));
    let (reply, events) = h.send_account_as("admin", "a1", add("drone-1", Role::Observer, HASH_2));
    assert_eq!(reply, first.0);
    assert!(events.is_empty(), "a retry changes nothing");
    assert_eq!(h.sm.account("drone-1").expect("kept").secret_hash, HASH_1);
}

#[test]
fn a_secret_in_place_of_a_hash_is_refused() {
    let mut h = Harness::new();
    let (reply, events) = h.send_account("admin", add("drone-1", Role::Agent, "plain-secret"));
    assert_eq!(
        reply,
        Reply::refused(ErrorCode::BadRequest, "`secret_hash` is not a PHC string")
    );
    assert!(events.is_empty());
    assert_eq!(h.sm.account_count(), 0);
}

#[test]
fn rotate_replaces_the_hash_and_keeps_the_role() {
    let mut h = Harness::new();
    h.send_account("admin", add("obs", Role::Observer, HASH_1));
    let (reply, events) = h.send_account("admin", rotate("obs", HASH_2));
    assert_eq!(
        reply,
        Reply::Account {
            agent: Arc::from("obs"),
            role: Role::Observer,
            secret_hash: HASH_2.into()
        }
    );
    assert_eq!(events, vec![changed("obs", AccountChange::Rotated)]);
    assert_eq!(h.sm.account("obs").expect("kept").secret_hash, HASH_2);

    assert_eq!(
        h.send_account("admin", rotate("ghost", HASH_2)).0,
        Reply::refused(
            ErrorCode::BadRequest,
            "admin.agent.rotate: agent \"ghost\" has no account"
        )
    );
}

#[test]
fn remove_revokes_the_agents_leases_and_hands_its_lock_over_in_the_same_entry() {
    let mut h = Harness::new();
    h.send_account("admin", add("drone-1", Role::Agent, HASH_1));
    let mine = h.lease("drone-1", 5_000);
    let other = h.lease("drone-2", 5_000);
    h.reply("drone-1", lock_acquire("gw", &mine, None));
    assert_eq!(
        h.reply("drone-2", lock_acquire("gw", &other, None)),
        Reply::Queued
    );

    let (reply, events) = h.send(
        "admin",
        Op::AdminAgentRemove {
            name: "drone-1".into(),
        },
    );
    assert_eq!(reply, Reply::Done);
    assert_eq!(
        events.last(),
        Some(&changed("drone-1", AccountChange::Removed)),
        "the removal comes after the lease ends: {events:?}"
    );
    assert_eq!(
        events[0],
        Event::LeaseEnded {
            agent: Arc::from("drone-1"),
            lease: LeaseId::parse(&mine).expect("a lease id"),
            reason: LeaseEnd::AdminRevoked,
        }
    );
    assert!(
        events.iter().any(|event| matches!(
            event,
            Event::Granted { agent, .. } if &**agent == "drone-2"
        )),
        "drone-2 is granted the lock in the removal's entry: {events:?}"
    );
    assert!(h.sm.account("drone-1").is_none());
    assert_eq!(h.sm.leases().count(), 1, "drone-2's lease lives on");

    assert_eq!(
        h.reply(
            "admin",
            Op::AdminAgentRemove {
                name: "drone-1".into()
            }
        ),
        Reply::refused(
            ErrorCode::BadRequest,
            "admin.agent.remove: agent \"drone-1\" has no account"
        )
    );
}

#[test]
fn the_list_is_paged_in_name_order_without_hashes() {
    let mut h = Harness::new();
    for index in 0..=super::ACCOUNT_PAGE_MAX {
        h.send_account("admin", add(&format!("a{index:04}"), Role::Agent, HASH_1));
    }
    let Reply::Accounts {
        accounts,
        next_after,
    } = h.sm.query("admin", &Op::AdminAgentList { after: None })
    else {
        panic!("a page of accounts");
    };
    assert_eq!(accounts.len(), super::ACCOUNT_PAGE_MAX);
    assert_eq!(
        accounts[0],
        AccountInfo {
            agent: "a0000".into(),
            role: Role::Agent,
            kv_read: Vec::new(),
            kv_write: Vec::new(),
        }
    );
    assert_eq!(next_after.as_deref(), Some("a0255"));
    assert_eq!(
        h.sm.query(
            "admin",
            &Op::AdminAgentList {
                after: next_after.clone()
            }
        ),
        Reply::Accounts {
            accounts: vec![AccountInfo {
                agent: "a0256".into(),
                role: Role::Agent,
                kv_read: Vec::new(),
                kv_write: Vec::new(),
            }],
            next_after: None,
        }
    );
}

#[test]
fn accounts_survive_a_snapshot_and_a_machine_without_accounts_writes_none() {
    let mut h = Harness::new();
    let empty = String::from_utf8(h.sm.snapshot()).expect("JSON");
    assert!(!empty.contains("accounts"), "no accounts key while empty");
    h.send_account("admin", add("drone-1", Role::Admin, HASH_1));
    let bytes = h.sm.snapshot();
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert_eq!(restored.snapshot(), bytes);
    assert_eq!(
        restored.account("drone-1").expect("restored").role,
        Role::Admin
    );
}

fn add_with_prefixes(name: &str, role: Role, kv_read: &[&str], kv_write: &[&str]) -> (Op, String) {
    let strings = |prefixes: &[&str]| prefixes.iter().map(|p| p.to_string()).collect();
    let op = Op::AdminAgentAdd {
        name: name.into(),
        role: Some(role),
        kv_read: strings(kv_read),
        kv_write: strings(kv_write),
    };
    (op, HASH_1.into())
}

#[test]
fn an_add_with_key_prefixes_keeps_them_lists_them_and_restores_them() {
    let mut h = Harness::new();
    let add = add_with_prefixes(
        "drone-1",
        Role::Agent,
        &["presence/", "cfg/"],
        &["presence/"],
    );
    let (_, events) = h.send_account("admin", add);
    assert_eq!(events, vec![changed("drone-1", AccountChange::Added)]);
    let account = h.sm.account("drone-1").expect("added").clone();
    assert_eq!(account.kv_read, ["presence/", "cfg/"]);
    assert_eq!(account.kv_write, ["presence/"]);
    assert_eq!(
        h.sm.query("admin", &Op::AdminAgentList { after: None }),
        Reply::Accounts {
            accounts: vec![AccountInfo {
                agent: "drone-1".into(),
                role: Role::Agent,
                kv_read: vec!["presence/".into(), "cfg/".into()],
                kv_write: vec!["presence/".into()],
            }],
            next_after: None,
        }
    );
    // A rotation replaces the secret only: the prefixes stay.
    h.send_account("admin", rotate("drone-1", HASH_2));
    let rotated = h.sm.account("drone-1").expect("kept");
    assert_eq!(
        (&rotated.kv_read, &rotated.kv_write),
        (&account.kv_read, &account.kv_write)
    );
    let bytes = h.sm.snapshot();
    let restored = StateMachine::restore(&bytes).expect("restores");
    assert_eq!(restored.snapshot(), bytes);
    assert_eq!(restored.account("drone-1"), h.sm.account("drone-1"));
}

#[test]
fn an_account_without_prefixes_keeps_the_shape_it_had_before_them() {
    let mut h = Harness::new();
    h.send_account("admin", add("drone-1", Role::Observer, HASH_1));
    let account = h.sm.account("drone-1").expect("added");
    assert_eq!(
        serde_json::to_string(account).expect("encodes"),
        format!(r#"{{"role":"observer","secret_hash":"{HASH_1}"}}"#)
    );
    let back: super::Account = serde_json::from_str(&format!(
        r#"{{"role":"observer","secret_hash":"{HASH_1}"}}"#
    ))
    .expect("an account written before prefixes decodes");
    assert_eq!(&back, account);
}

#[test]
fn an_add_with_prefixes_its_role_may_not_have_is_refused_when_applied() {
    let mut h = Harness::new();
    let add = add_with_prefixes("ops", Role::Observer, &[], &["cfg/"]);
    let (reply, events) = h.send_account("admin", add);
    assert_eq!(
        reply,
        Reply::refused(
            ErrorCode::BadRequest,
            "admin.agent.add: an observer writes no key: `kv_write` is for the agent role"
        )
    );
    assert!(events.is_empty());
    assert!(h.sm.account("ops").is_none());
}
