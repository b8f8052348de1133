//! Data format 1 stays readable: a log entry written by the build at commit 4e87a8e (when the
//! log stored the wire `Request`; the state machine now has request types of its own with the
//! same serde shape) decodes, re-encodes to the same bytes and applies.
//!
//! `tests/data/log-entry-format1.json` is one row of the `log` table as that build wrote it
//! (`serde_json` of an openraft `Entry` whose payload is a `Proposal` of 14 commands: every
//! command kind, writes of every resource kind, optional fields present and absent). It is
//! never regenerated: a failure here means the on-disk format changed, which needs a new
//! [`DATA_FORMAT`] and a migration. The state machine crate's `tests/format.rs` checks a longer
//! log and a snapshot the same way.

use hivekeeper_coordinator::raft::{DATA_FORMAT, Entry, Proposal};
use hivekeeper_coordinator::{Command, StateMachine};

const LOG_ENTRY: &[u8] = include_bytes!("data/log-entry-format1.json");

fn proposal(entry: &Entry) -> &Proposal {
    match &entry.payload {
        openraft::EntryPayload::Normal(proposal) => proposal,
        other => panic!("the golden entry is a normal one, got {other:?}"),
    }
}

#[test]
fn a_format1_log_entry_decodes_and_encodes_to_the_same_bytes() {
    assert_eq!(
        DATA_FORMAT, 1,
        "the golden entry is format 1: add a migration test"
    );
    let entry: Entry = serde_json::from_slice(LOG_ENTRY).expect("a format 1 log entry decodes");
    assert_eq!(entry.log_id.index, 42);
    assert_eq!(proposal(&entry).commands.len(), 14);
    let encoded = serde_json::to_vec(&entry).expect("entries encode");
    assert!(
        encoded == LOG_ENTRY,
        "the log entry JSON changed shape:\n{}",
        String::from_utf8_lossy(&encoded)
    );
}

#[test]
fn a_format1_log_entry_applies() {
    let entry: Entry = serde_json::from_slice(LOG_ENTRY).expect("a format 1 log entry decodes");
    let proposal = proposal(&entry);
    let mut machine = StateMachine::default();
    let mut granted = 0;
    for command in &proposal.commands {
        let meta = proposal.meta(&entry.log_id, machine.applied_index());
        let (reply, _) = machine
            .apply(meta, command.clone())
            .expect("positions increase");
        if let Err(broken) = machine.check_invariants() {
            panic!("invariant broken after {command:?}: {broken}");
        }
        if let (Command::Request { .. }, hivekeeper_coordinator::Reply::Lease { .. }) =
            (command, &reply)
        {
            granted += 1;
        }
    }
    assert_eq!(granted, 1, "the entry's one lease.grant is granted");
    assert_eq!(machine.applied_index(), 42 + 13);
}
