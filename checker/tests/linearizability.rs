//! Hand-written key-value histories, each linearizable or not for a reason named in its test.

use hivekeeper_checker::linearizability::{
    Budget, Expected, Input, Operation, Outcome, Reply, Verdict, check,
};

fn op(client_id: u64, call_ns: u64, return_ns: u64, input: Input, outcome: Outcome) -> Operation {
    Operation {
        client_id,
        call_ns,
        return_ns,
        input,
        outcome,
    }
}

fn put(client: u64, span: (u64, u64), key: &str, value: &str, revision: Option<u64>) -> Operation {
    op(
        client,
        span.0,
        span.1,
        Input::Put {
            key: key.into(),
            value: value.into(),
        },
        Outcome::Ok(Reply::Put { revision }),
    )
}

fn put_unknown(client: u64, call_ns: u64, key: &str, value: &str) -> Operation {
    op(
        client,
        call_ns,
        call_ns,
        Input::Put {
            key: key.into(),
            value: value.into(),
        },
        Outcome::Unknown,
    )
}

fn get(client: u64, span: (u64, u64), key: &str, value: Option<&str>) -> Operation {
    get_rev(client, span, key, value, None)
}

fn get_rev(
    client: u64,
    span: (u64, u64),
    key: &str,
    value: Option<&str>,
    mod_revision: Option<u64>,
) -> Operation {
    op(
        client,
        span.0,
        span.1,
        Input::Get { key: key.into() },
        Outcome::Ok(Reply::Get {
            value: value.map(Into::into),
            mod_revision,
        }),
    )
}

fn delete(client: u64, span: (u64, u64), key: &str, deleted: Option<bool>) -> Operation {
    op(
        client,
        span.0,
        span.1,
        Input::Delete { key: key.into() },
        Outcome::Ok(Reply::Delete {
            deleted,
            revision: None,
        }),
    )
}

fn cas(
    client: u64,
    span: (u64, u64),
    key: &str,
    expected: Expected,
    value: &str,
    outcome: Option<bool>,
) -> Operation {
    op(
        client,
        span.0,
        span.1,
        Input::CompareAndSet {
            key: key.into(),
            expected,
            value: value.into(),
        },
        match outcome {
            Some(succeeded) => Outcome::Ok(Reply::CompareAndSet {
                succeeded,
                revision: None,
            }),
            None => Outcome::Unknown,
        },
    )
}

fn verdict(history: &[Operation]) -> Verdict {
    check(history, &Budget::default()).expect("well-formed history")
}

fn assert_linearizable(history: &[Operation]) {
    let verdict = verdict(history);
    assert!(verdict.is_linearizable(), "{verdict}");
}

fn assert_not_linearizable(history: &[Operation]) -> String {
    match verdict(history) {
        Verdict::NotLinearizable(counterexample) => counterexample.to_string(),
        other => panic!("expected a counterexample, got {other}"),
    }
}

#[test]
fn empty_history_is_linearizable() {
    assert_linearizable(&[]);
}

#[test]
fn concurrent_put_and_get_may_see_either_value() {
    for seen in [None, Some("a")] {
        assert_linearizable(&[put(1, (0, 10), "k", "a", None), get(2, (5, 15), "k", seen)]);
    }
}

#[test]
fn stale_read_after_a_completed_write_is_rejected() {
    let report = assert_not_linearizable(&[
        put(1, (0, 10), "k", "a", None),
        put(1, (20, 30), "k", "b", None),
        get(2, (40, 50), "k", Some("a")),
    ]);
    assert!(report.contains("key \"k\""), "{report}");
    assert!(report.contains("get(\"k\") -> \"a\""), "{report}");
}

#[test]
fn two_sequential_puts_read_back_in_the_wrong_order_are_rejected() {
    // Both reads follow both puts, yet the first sees the newer value and the second the older.
    assert_not_linearizable(&[
        put(1, (0, 10), "k", "a", None),
        put(1, (20, 30), "k", "b", None),
        get(2, (40, 50), "k", Some("b")),
        get(3, (60, 70), "k", Some("a")),
    ]);
}

#[test]
fn reads_that_disagree_while_a_write_is_pending_must_not_go_back() {
    // During a long put, one reader sees the new value; a reader that starts after it returned
    // must not see the old one again.
    assert_not_linearizable(&[
        put(1, (0, 100), "k", "a", None),
        get(2, (10, 20), "k", Some("a")),
        get(3, (30, 40), "k", None),
    ]);
    assert_linearizable(&[
        put(1, (0, 100), "k", "a", None),
        get(2, (10, 20), "k", None),
        get(3, (30, 40), "k", Some("a")),
    ]);
}

#[test]
fn an_unknown_put_may_or_may_not_apply() {
    let applied = [
        put_unknown(1, 0, "k", "a"),
        get(2, (100, 110), "k", Some("a")),
    ];
    let lost = [put_unknown(1, 0, "k", "a"), get(2, (100, 110), "k", None)];
    assert_linearizable(&applied);
    assert_linearizable(&lost);
}

#[test]
fn an_unknown_put_applies_once_and_only_after_its_call() {
    // Seen, then overwritten: it cannot reappear.
    assert_not_linearizable(&[
        put_unknown(1, 0, "k", "a"),
        get(2, (10, 20), "k", Some("a")),
        put(3, (30, 40), "k", "b", None),
        get(2, (50, 60), "k", Some("a")),
    ]);
    // Read before it was even called.
    assert_not_linearizable(&[
        get(2, (0, 10), "k", Some("a")),
        put_unknown(1, 20, "k", "a"),
    ]);
}

#[test]
fn an_unknown_get_is_ignored() {
    assert_linearizable(&[
        put(1, (0, 10), "k", "a", None),
        op(2, 20, 20, Input::Get { key: "k".into() }, Outcome::Unknown),
    ]);
}

#[test]
fn delete_then_read_absent() {
    assert_linearizable(&[
        put(1, (0, 10), "k", "a", None),
        delete(1, (20, 30), "k", Some(true)),
        get(2, (40, 50), "k", None),
        delete(2, (60, 70), "k", Some(false)),
    ]);
    assert_not_linearizable(&[
        put(1, (0, 10), "k", "a", None),
        delete(1, (20, 30), "k", Some(true)),
        get(2, (40, 50), "k", Some("a")),
    ]);
    // Nothing to delete, yet it says it deleted something.
    assert_not_linearizable(&[delete(1, (0, 10), "k", Some(true))]);
}

#[test]
fn compare_and_set_by_value_lets_one_of_two_racers_win() {
    let racers = |first: bool, second: bool| {
        [
            put(1, (0, 10), "k", "0", None),
            cas(
                2,
                (20, 40),
                "k",
                Expected::Value(Some("0".into())),
                "a",
                Some(first),
            ),
            cas(
                3,
                (25, 45),
                "k",
                Expected::Value(Some("0".into())),
                "b",
                Some(second),
            ),
        ]
    };
    assert_linearizable(&racers(true, false));
    assert_linearizable(&racers(false, true));
    assert_not_linearizable(&racers(true, true));
    assert_not_linearizable(&racers(false, false));
}

#[test]
fn compare_and_set_on_an_absent_key() {
    assert_linearizable(&[
        cas(1, (0, 10), "k", Expected::Value(None), "a", Some(true)),
        cas(2, (20, 30), "k", Expected::ModRevision(0), "b", Some(false)),
        get(2, (40, 50), "k", Some("a")),
    ]);
}

#[test]
fn an_unknown_compare_and_set_on_an_unrecorded_revision_may_go_either_way() {
    // The put's revision was never recorded, so whether the compare on revision 7 held is
    // unknown; both later reads are possible.
    for seen in ["a", "b"] {
        assert_linearizable(&[
            put(1, (0, 10), "k", "a", None),
            cas(2, (20, 20), "k", Expected::ModRevision(7), "b", None),
            get(3, (100, 110), "k", Some(seen)),
        ]);
    }
}

#[test]
fn revisions_must_increase_with_real_time() {
    assert_linearizable(&[
        put(1, (0, 10), "k", "a", Some(3)),
        get_rev(2, (20, 30), "k", Some("a"), Some(3)),
        put(1, (40, 50), "k", "b", Some(5)),
    ]);
    // The later put got a smaller revision.
    assert_not_linearizable(&[
        put(1, (0, 10), "k", "a", Some(5)),
        put(1, (20, 30), "k", "b", Some(3)),
    ]);
    // A read reports a revision the value was not written at.
    assert_not_linearizable(&[
        put(1, (0, 10), "k", "a", Some(3)),
        get_rev(2, (20, 30), "k", Some("a"), Some(4)),
    ]);
    // Concurrent puts: the revisions decide the order, and the read must agree with it.
    assert_linearizable(&[
        put(1, (0, 30), "k", "a", Some(4)),
        put(2, (0, 30), "k", "b", Some(3)),
        get_rev(3, (40, 50), "k", Some("a"), Some(4)),
    ]);
    assert_not_linearizable(&[
        put(1, (0, 30), "k", "a", Some(4)),
        put(2, (0, 30), "k", "b", Some(3)),
        get_rev(3, (40, 50), "k", Some("b"), Some(3)),
    ]);
}

#[test]
fn keys_are_checked_independently_and_the_report_names_the_bad_key() {
    let report = assert_not_linearizable(&[
        put(1, (0, 10), "good", "a", None),
        get(2, (20, 30), "good", Some("a")),
        put(1, (0, 10), "bad", "a", None),
        get(2, (20, 30), "bad", None),
    ]);
    assert!(report.contains("key \"bad\""), "{report}");
    assert!(report.contains("could not be placed"), "{report}");
}

#[test]
fn a_tiny_budget_gives_unknown_rather_than_a_verdict() {
    let history: Vec<Operation> = (0..50)
        .map(|i| put(i, (0, 1000), "k", &i.to_string(), None))
        .collect();
    let budget = Budget {
        steps_max: 10,
        time_max: None,
    };
    let verdict = check(&history, &budget).expect("well-formed history");
    assert!(matches!(verdict, Verdict::Unknown { .. }), "{verdict}");
    assert!(
        verdict.to_string().contains("ran out of budget"),
        "{verdict}"
    );
}

#[test]
fn many_concurrent_writers_are_checked_quickly() {
    // 1100 operations in waves of 10 concurrent puts, each wave read back once after it: the
    // search is exponential in the concurrency only (2^10 subsets per wave), linear in length.
    let mut history = Vec::new();
    for wave in 0..100u64 {
        let base = wave * 100;
        for writer in 0..10u64 {
            history.push(put(
                writer,
                (base, base + 50),
                "k",
                &format!("{wave}-{writer}"),
                None,
            ));
        }
        history.push(get(
            99,
            (base + 60, base + 70),
            "k",
            Some(&format!("{wave}-7")),
        ));
    }
    assert_linearizable(&history);
}

#[test]
fn malformed_histories_are_typed_errors() {
    let backwards = put(1, (10, 5), "k", "a", None);
    assert!(check(&[backwards], &Budget::default()).is_err());
    let mismatched = op(
        1,
        0,
        1,
        Input::Get { key: "k".into() },
        Outcome::Ok(Reply::Put { revision: None }),
    );
    let error = check(&[mismatched], &Budget::default()).expect_err("mismatched reply");
    assert_eq!(
        error.to_string(),
        "operation #0 is a get answered by a put reply"
    );
}

#[test]
fn a_history_round_trips_through_json() {
    let history = vec![
        put(1, (0, 10), "k", "a", Some(2)),
        cas(2, (5, 15), "k", Expected::ModRevision(2), "b", None),
    ];
    let json = serde_json::to_string(&history).expect("serializable");
    let back: Vec<Operation> = serde_json::from_str(&json).expect("deserializable");
    assert_eq!(back, history);
}
