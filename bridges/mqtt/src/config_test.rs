//! Tests of the transport's configuration (`config.rs`).

use hivekeeper_protocol::validate::REQUEST_BYTES_MAX;

use crate::MqttError;
use crate::config::*;

#[test]
fn defaults_are_valid_and_embedded_on_loopback() {
    let config = Config::default();
    config.validate().expect("the defaults must be valid");
    assert_eq!(config.topic_prefix, "hk/v1");
    assert_eq!(config.packet_bytes_max, 65_536);
    let Mode::Embedded(embedded) = &config.mode else {
        panic!("default mode must be embedded, got {:?}", config.mode);
    };
    assert_eq!(embedded.listen.to_string(), "127.0.0.1:1883");
    assert!(embedded.tcp_nodelay);
}

#[test]
fn packet_limit_leaves_room_for_a_full_request_and_no_less() {
    let mut config = Config {
        packet_bytes_max: REQUEST_BYTES_MAX + REQUEST_OVERHEAD_BYTES_MAX,
        ..Config::default()
    };
    config.validate().expect("exactly the minimum is valid");
    config.packet_bytes_max -= 1;
    let error = config
        .validate()
        .expect_err("one byte less must be refused");
    assert!(
        matches!(
            error,
            MqttError::InvalidConfig {
                field: "packet_bytes_max",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn bad_prefix_segment_and_capacity_are_refused_by_field() {
    let cases: Vec<(Config, &str)> = vec![
        (
            Config {
                topic_prefix: "hk/+".to_string(),
                ..Config::default()
            },
            "topic_prefix",
        ),
        (
            Config {
                inbound_capacity: 0,
                ..Config::default()
            },
            "inbound_capacity",
        ),
        (
            Config {
                mode: Mode::Embedded(EmbeddedConfig {
                    connection_queue_max: 1,
                    ..EmbeddedConfig::default()
                }),
                ..Config::default()
            },
            "mode.connection_queue_max",
        ),
        (
            Config {
                mode: Mode::External(ExternalConfig {
                    password: Some("secret".to_string()),
                    ..ExternalConfig::default()
                }),
                ..Config::default()
            },
            "mode.password",
        ),
    ];
    for (config, expected_field) in cases {
        match config.validate() {
            Err(MqttError::InvalidConfig { field, .. }) => assert_eq!(field, expected_field),
            other => panic!("{expected_field}: expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn broker_urls_parse_host_and_port() {
    assert_eq!(
        parse_broker_url("mqtt://broker.local:1884").expect("valid"),
        ("broker.local".to_string(), 1884)
    );
    assert_eq!(
        parse_broker_url("tcp://10.0.0.5").expect("valid"),
        ("10.0.0.5".to_string(), 1883)
    );
    assert_eq!(
        parse_broker_url("mqtt://[::1]:1885/").expect("valid"),
        ("::1".to_string(), 1885)
    );
    for bad in [
        "mqtts://host:8883",
        "host:1883",
        "mqtt://:1883",
        "mqtt://host:0",
        "mqtt://host:99999",
        "mqtt://user:pw@host:1883",
        "mqtt://host:1883/path",
    ] {
        assert!(parse_broker_url(bad).is_err(), "{bad} must be refused");
    }
}

#[test]
fn config_reads_from_json_with_defaults_filled_in() {
    let config: Config = serde_json::from_str(
        r#"{"mode": {"kind": "external", "url": "mqtt://10.0.0.5:1883",
                     "client_id": "hk-node-1"},
            "topic_prefix": "farm/east/hk"}"#,
    )
    .expect("the documented example parses");
    config.validate().expect("the documented example is valid");
    let Mode::External(external) = &config.mode else {
        panic!("expected external, got {:?}", config.mode);
    };
    assert_eq!(external.client_id, "hk-node-1");
    assert_eq!(external.keepalive_s, DEFAULTS.keepalive_s);
    assert_eq!(config.inbound_capacity, DEFAULTS.inbound_capacity);

    let unknown = serde_json::from_str::<Config>(r#"{"topic_prefx": "x"}"#);
    assert!(unknown.is_err(), "a misspelled field must be refused");
}

#[test]
fn debug_never_prints_the_password() {
    let external = ExternalConfig {
        username: Some("node".to_string()),
        password: Some("hunter2".to_string()),
        ..ExternalConfig::default()
    };
    let printed = format!("{external:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(printed.contains("<redacted>"), "{printed}");
}

#[test]
fn a_member_shares_the_request_subscription_under_its_own_client_id() {
    let topics = Config::default().topics().expect("default prefix");
    let single = ExternalConfig::default();
    assert_eq!(single.request_filter(&topics), "hk/v1/req/+");

    let member = ExternalConfig::default().as_member("n2");
    assert_eq!(member.client_id, "hivekeeper-n2");
    assert_eq!(member.share_group.as_deref(), Some(DEFAULTS.share_group));
    assert_eq!(
        member.request_filter(&topics),
        "$share/hivekeeper/hk/v1/req/+"
    );

    let chosen = ExternalConfig {
        client_id: "hk-east-2".to_string(),
        share_group: Some("east".to_string()),
        ..ExternalConfig::default()
    }
    .as_member("n2");
    assert_eq!(chosen.client_id, "hk-east-2", "a chosen client id is kept");
    assert_eq!(chosen.request_filter(&topics), "$share/east/hk/v1/req/+");
}

#[test]
fn a_share_group_is_one_topic_level() {
    for bad in ["", "a/b", "a+", "#", "a\u{0}b"] {
        let config = Config {
            mode: Mode::External(ExternalConfig {
                share_group: Some(bad.to_string()),
                ..ExternalConfig::default()
            }),
            ..Config::default()
        };
        match config.validate() {
            Err(MqttError::InvalidConfig { field, .. }) => {
                assert_eq!(field, "mode.share_group", "{bad:?}")
            }
            other => panic!("{bad:?}: expected InvalidConfig, got {other:?}"),
        }
    }
}
