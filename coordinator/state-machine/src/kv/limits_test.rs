//! The key space's bounds as replicated state: `KvLimits::validate`'s rules and their words,
//! and a `Configure` entry's `kv` through `apply` (lowered bounds refuse the writes after them
//! and take no key back; a lowered history bound compacts at once, and the snapshot holds the
//! same window).

use hivekeeper_protocol::ErrorCode;
use hivekeeper_protocol::kv::KeySelector;

use super::{
    Compacted, KEY_BYTES_MAX_CEILING, KV_LIMITS_DEFAULT, KvLimits, KvLimitsError,
    VALUE_BYTES_MAX_CEILING,
};
use crate::test_support::*;
use crate::test_support::{kv_delete as delete, kv_put as put, refusal as refused};
use crate::{Command, Limits, Reply, StateMachine};

fn configure(kv: KvLimits) -> Command {
    Command::Configure {
        limits: Limits::DEFAULTS,
        kv: Some(kv),
    }
}

/// Every key of `machine`'s key space, by a prefix read of all of them.
fn keys(machine: &StateMachine) -> Vec<String> {
    machine
        .key_space()
        .range("", None, 1_000)
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect()
}

#[test]
fn the_defaults_are_valid() {
    assert_eq!(KV_LIMITS_DEFAULT.validate(), Ok(()));
    assert_eq!(KV_LIMITS_DEFAULT.key_bytes_max, KEY_BYTES_MAX_CEILING);
    assert_eq!(KV_LIMITS_DEFAULT.value_bytes_max, VALUE_BYTES_MAX_CEILING);
}

#[test]
fn each_rule_names_the_bound_and_its_range() {
    for limit in [
        "keys_max",
        "bytes_max",
        "keys_per_lease_max",
        "key_bytes_max",
        "value_bytes_max",
        "history_events_max",
        "history_bytes_max",
    ] {
        let mut zero = KV_LIMITS_DEFAULT;
        match limit {
            "keys_max" => zero.keys_max = 0,
            "bytes_max" => zero.bytes_max = 0,
            "keys_per_lease_max" => zero.keys_per_lease_max = 0,
            "key_bytes_max" => zero.key_bytes_max = 0,
            "value_bytes_max" => zero.value_bytes_max = 0,
            "history_events_max" => zero.history_events_max = 0,
            _ => zero.history_bytes_max = 0,
        }
        let error = zero.validate().expect_err("a zero bound");
        assert_eq!(error, KvLimitsError::Zero { limit });
        assert_eq!(error.to_string(), format!("kv.{limit} must be at least 1"));
    }
    let long_keys = KvLimits {
        key_bytes_max: 513,
        ..KV_LIMITS_DEFAULT
    };
    assert_eq!(
        long_keys.validate().expect_err("past the wire").to_string(),
        "kv.key_bytes_max = 513 is outside 1..=512 (512: the wire contract's longest key)"
    );
    let long_values = KvLimits {
        value_bytes_max: 8_193,
        ..KV_LIMITS_DEFAULT
    };
    assert_eq!(
        long_values
            .validate()
            .expect_err("past a request")
            .to_string(),
        "kv.value_bytes_max = 8193 is outside 1..=8192 (8192: a value travels inside one \
         request, whose MQTT payload is at most this)"
    );
    let at_the_ceilings = KvLimits {
        key_bytes_max: KEY_BYTES_MAX_CEILING,
        value_bytes_max: VALUE_BYTES_MAX_CEILING,
        keys_max: 1,
        bytes_max: 1,
        keys_per_lease_max: 1,
        history_events_max: 1,
        history_bytes_max: 1,
    };
    assert_eq!(at_the_ceilings.validate(), Ok(()));
}

#[test]
fn configured_key_and_value_bounds_refuse_the_puts_past_them() {
    let mut h = Harness::new();
    let tight = KvLimits {
        key_bytes_max: 8,
        value_bytes_max: 4,
        ..KV_LIMITS_DEFAULT
    };
    assert_eq!(h.apply(configure(tight.clone())), (Reply::Done, Vec::new()));
    assert_eq!(h.sm.kv_limits(), &tight);
    assert_eq!(h.sm.limits(), &Limits::DEFAULTS);

    let long_key = h.reply("a", put("123456789", "v"));
    assert_eq!(
        refused(&long_key),
        (
            ErrorCode::BadRequest,
            "kv.put: key is 9 bytes, it must be 1 to 8"
        )
    );
    let long_value = h.reply("a", put("k", "12345"));
    assert_eq!(
        refused(&long_value),
        (
            ErrorCode::BadRequest,
            "kv.put: value is 5 bytes, it must be at most 4"
        )
    );
    assert_eq!(h.sm.revision(), 0, "a refused put takes no revision");
    assert!(matches!(
        h.reply("a", put("12345678", "1234")),
        Reply::KvPut(_)
    ));
}

#[test]
fn configured_capacity_bounds_answer_resource_exhausted() {
    let mut h = Harness::new();
    h.apply(configure(KvLimits {
        keys_max: 2,
        ..KV_LIMITS_DEFAULT
    }));
    h.reply("a", put("a", "1"));
    h.reply("a", put("b", "1"));
    assert_eq!(
        refused(&h.reply("a", put("c", "1"))),
        (
            ErrorCode::ResourceExhausted,
            "kv.put: 2 keys exist, the limit"
        )
    );
}

#[test]
fn lowered_bounds_take_no_key_back_and_the_keys_stay_readable_and_deletable() {
    let mut h = Harness::new();
    let long = "k".repeat(100);
    h.reply("a", put(&long, "a long value"));
    h.reply("a", put("b", "1"));
    h.reply("a", put("c", "1"));
    h.apply(configure(KvLimits {
        keys_max: 1,
        bytes_max: 10,
        key_bytes_max: 10,
        value_bytes_max: 2,
        ..KV_LIMITS_DEFAULT
    }));
    assert_eq!(keys(&h.sm), vec!["b".to_string(), "c".into(), long.clone()]);
    // Three keys alive past a `keys_max` of 1: the next new key is refused.
    assert_eq!(
        refused(&h.reply("a", put("d", "1"))).0,
        ErrorCode::ResourceExhausted
    );
    // A key longer than the lowered `key_bytes_max` is read and deleted by its name.
    let Reply::KvPage(page) = h.sm.query(
        "a",
        &Op::KvGet {
            key: Some(long.clone()),
            prefix: None,
            after: None,
            limit: None,
            serializable: None,
        },
    ) else {
        panic!("a page")
    };
    assert_eq!(page.kvs.len(), 1);
    assert!(matches!(h.reply("a", delete(&long)), Reply::KvDeleted(_)));
    assert_eq!(keys(&h.sm), vec!["b".to_string(), "c".into()]);
}

#[test]
fn a_lowered_history_bound_compacts_whole_revisions_at_once() {
    let mut h = Harness::new();
    let mut revisions = Vec::new();
    for (index, key) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
        let Reply::KvPut(done) = h.reply("a", put(key, &index.to_string())) else {
            panic!("a put")
        };
        revisions.push(done.revision);
    }
    assert_eq!(h.sm.key_space().history_len(), 5);
    assert_eq!(h.sm.key_space().compact_revision(), 0);

    let (reply, events) = h.apply(configure(KvLimits {
        history_events_max: 2,
        ..KV_LIMITS_DEFAULT
    }));
    assert_eq!((reply, events), (Reply::Done, Vec::new()));
    assert_eq!(h.sm.key_space().history_len(), 2);
    assert_eq!(h.sm.key_space().compact_revision(), revisions[2]);
    assert_eq!(keys(&h.sm).len(), 5, "compaction drops events, never keys");

    // A watch from below the compact revision has missed events: it re-reads.
    let all = KeySelector::Prefix(String::new());
    assert_eq!(
        h.sm.watch(revisions[1], &all, 100),
        Err(Compacted {
            compact_revision: revisions[2]
        })
    );
    let page = h.sm.watch(revisions[2], &all, 100).expect("kept");
    let kept: Vec<u64> = page.events.iter().map(|event| event.revision).collect();
    assert_eq!(kept, revisions[3..].to_vec());

    // Every member restoring the snapshot holds the same window.
    let restored = StateMachine::restore(&h.sm.snapshot()).expect("restores");
    assert_eq!(restored.snapshot(), h.sm.snapshot());
    assert_eq!(restored.kv_limits().history_events_max, 2);
    assert_eq!(restored.key_space().compact_revision(), revisions[2]);
}

#[test]
fn a_lowered_history_byte_bound_compacts_too() {
    let mut h = Harness::new();
    let mut revisions = Vec::new();
    for key in ["a", "b", "c"] {
        let Reply::KvPut(done) = h.reply("a", put(key, "0123456789")) else {
            panic!("a put")
        };
        revisions.push(done.revision);
    }
    // Each event counts 11 bytes: 22 keep the last two revisions.
    h.apply(configure(KvLimits {
        history_bytes_max: 22,
        ..KV_LIMITS_DEFAULT
    }));
    assert_eq!(h.sm.key_space().history_len(), 2);
    assert_eq!(h.sm.key_space().compact_revision(), revisions[0]);
}

#[test]
fn invalid_kv_bounds_are_refused_and_change_nothing() {
    let mut h = Harness::new();
    h.reply("a", put("a", "1"));
    let tighter_leases = Limits {
        leases_max: 5,
        ..Limits::DEFAULTS
    };
    let (reply, events) = h.apply(Command::Configure {
        limits: tighter_leases,
        kv: Some(KvLimits {
            history_events_max: 0,
            ..KV_LIMITS_DEFAULT
        }),
    });
    assert!(events.is_empty());
    assert_eq!(
        refused(&reply),
        (
            ErrorCode::BadRequest,
            "kv.history_events_max must be at least 1"
        )
    );
    assert_eq!(h.sm.limits(), &Limits::DEFAULTS, "neither set is replaced");
    assert_eq!(h.sm.kv_limits(), &KV_LIMITS_DEFAULT);
    assert_eq!(keys(&h.sm), vec!["a".to_string()]);
}

#[test]
fn a_configure_without_kv_keeps_the_key_space_bounds() {
    let mut h = Harness::new();
    let tight = KvLimits {
        keys_max: 3,
        ..KV_LIMITS_DEFAULT
    };
    h.apply(configure(tight.clone()));
    let (reply, _) = h.apply(Command::Configure {
        limits: Limits {
            leases_max: 5,
            ..Limits::DEFAULTS
        },
        kv: None,
    });
    assert_eq!(reply, Reply::Done);
    assert_eq!(h.sm.limits().leases_max, 5);
    assert_eq!(h.sm.kv_limits(), &tight);
}

#[test]
fn configured_bounds_survive_a_snapshot_even_with_keys_past_them() {
    let mut h = Harness::new();
    for key in ["a", "b", "c"] {
        h.reply("a", put(key, "1"));
    }
    let tight = KvLimits {
        keys_max: 1,
        ..KV_LIMITS_DEFAULT
    };
    h.apply(configure(tight.clone()));
    let restored = StateMachine::restore(&h.sm.snapshot()).expect("keys past a lowered bound");
    assert_eq!(restored.kv_limits(), &tight);
    assert_eq!(keys(&restored).len(), 3);
}

#[test]
fn an_unused_key_space_with_configured_bounds_is_in_the_snapshot() {
    let mut h = Harness::new();
    let tight = KvLimits {
        value_bytes_max: 16,
        ..KV_LIMITS_DEFAULT
    };
    h.apply(configure(tight.clone()));
    let restored = StateMachine::restore(&h.sm.snapshot()).expect("restores");
    assert_eq!(restored.kv_limits(), &tight);
    // Back to the defaults: the key space leaves the snapshot again.
    h.apply(configure(KV_LIMITS_DEFAULT));
    let text = String::from_utf8(h.sm.snapshot()).expect("json");
    assert!(!text.contains("\"kv\""), "{text}");
}

/// A `Configure` that leaves the key space alone has the bytes entries had before `kv`
/// existed, and such an entry reads back with `kv: None`.
#[test]
fn a_configure_without_kv_keeps_its_bytes() {
    let command = Command::Configure {
        limits: Limits::DEFAULTS,
        kv: None,
    };
    let bytes = serde_json::to_string(&command).expect("serializes");
    assert!(!bytes.contains("\"kv\""), "{bytes}");
    let back: Command = serde_json::from_str(&bytes).expect("reads back");
    assert_eq!(back, command);
    let with_kv = Command::Configure {
        limits: Limits::DEFAULTS,
        kv: Some(KvLimits {
            history_events_max: 7,
            ..KV_LIMITS_DEFAULT
        }),
    };
    let bytes = serde_json::to_string(&with_kv).expect("serializes");
    let back: Command = serde_json::from_str(&bytes).expect("reads back");
    assert_eq!(back, with_kv);
}
