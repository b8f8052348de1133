//! Fuzzing the wire decoders: whatever bytes or JSON an agent publishes, the service's request
//! decoder answers a value or a protocol error, never a panic; and whatever the service
//! publishes, the SDK's response and event decoders do the same. A request that decodes is
//! valid (`validate` passes) and survives `encode` then `decode` unchanged.
//!
//! ```text
//! cargo test -p hivekeeper-protocol --test fuzz                       # 256 cases each
//! PROPTEST_CASES=1000000 cargo test --release -p hivekeeper-protocol --test fuzz
//! ```

use hivekeeper_protocol::{Event, Op, Request, Response};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Field names of every op, and some that no op has.
const FIELDS: [&str; 23] = [
    "id",
    "name",
    "lease",
    "ttl_ms",
    "wait_ms",
    "limit",
    "permits",
    "count",
    "lat",
    "lon",
    "alt_min_m",
    "alt_max_m",
    "radius_m",
    "role",
    "resource",
    "kind",
    "token",
    "after",
    "member",
    "addr",
    "agent",
    "secret",
    "extra",
];

/// Numbers at and around every bound the decoder checks, and any at all.
fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => (0..10_000u64).prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => prop::sample::select(vec![
            0u64, 1, 499, 500, 65_535, 65_536, 86_400_000, 86_400_001, u64::from(u32::MAX),
            u64::from(u32::MAX) + 1, u64::MAX,
        ])
        .prop_map(Value::from),
        2 => any::<f64>().prop_map(Value::from),
        1 => (-400.0..400.0f64).prop_map(Value::from),
    ]
    .boxed()
}

/// Any JSON value, nested a few levels.
fn json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        any::<String>().prop_map(Value::String),
        "[0-9a-f]{16}".prop_map(Value::String),
        "[a-z]{1,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
    .boxed()
}

/// An object shaped like a request: a known op (or not) and known fields with any values.
fn request_like() -> BoxedStrategy<Value> {
    let op = prop_oneof![
        8 => prop::sample::select(Op::NAMES.to_vec()).prop_map(Value::from),
        1 => json(),
    ];
    let fields = prop::collection::btree_map(prop::sample::select(FIELDS.to_vec()), json(), 0..8);
    (op, fields, prop::option::of(json()))
        .prop_map(|(op, fields, id)| {
            let mut object: Map<String, Value> = fields
                .into_iter()
                .map(|(key, value)| (key.to_string(), value))
                .collect();
            object.insert("op".into(), op);
            if let Some(id) = id {
                object.insert("id".into(), id);
            }
            Value::Object(object)
        })
        .boxed()
}

/// A request that decodes is valid and round-trips.
fn decoded_is_sound(request: &Request) -> Result<(), TestCaseError> {
    prop_assert!(
        request.op.validate().is_ok(),
        "decoded but invalid: {request:?}"
    );
    let again = Request::decode(&request.encode());
    prop_assert_eq!(
        again.as_ref().ok(),
        Some(request),
        "re-decoding gave {:?}",
        again
    );
    Ok(())
}

proptest! {
    #[test]
    fn fuzz_request_decode_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..1_024)) {
        if let Ok(request) = Request::decode(&bytes) {
            decoded_is_sound(&request)?;
        }
    }

    #[test]
    fn fuzz_request_decode_arbitrary_json(value in json()) {
        if let Ok(request) = Request::from_value(value.clone()) {
            decoded_is_sound(&request)?;
        }
        let bytes = serde_json::to_vec(&value).expect("a value encodes");
        let _ = Request::decode(&bytes);
    }

    #[test]
    fn fuzz_request_decode_json_shaped_like_requests(value in request_like()) {
        let bytes = serde_json::to_vec(&value).expect("a value encodes");
        match Request::decode(&bytes) {
            Ok(request) => decoded_is_sound(&request)?,
            // A refusal carries the request's id when the payload had a usable one.
            Err(error) => prop_assert!(!error.message.is_empty()),
        }
    }

    #[test]
    fn fuzz_response_and_event_decode_arbitrary_input(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        value in json(),
    ) {
        let _ = Response::decode(&bytes);
        let _ = Event::decode(&bytes);
        let encoded = serde_json::to_vec(&value).expect("a value encodes");
        if let Ok(response) = Response::decode(&encoded) {
            let _ = response.encode();
        }
        if let Ok(event) = Event::decode(&encoded) {
            let _ = event.encode();
        }
    }
}
