//! The agent endpoint against MQTT clients it did not come with: Debian's `mosquitto_pub`,
//! `mosquitto_sub` and `mosquitto_rr` (MQTT 5 request/response), and Python's paho-mqtt at
//! 3.1.1 and 5.0 (`python3-paho-mqtt`). `.ci/run` installs them; a missing tool fails the test
//! with the package to install. Loopback only; every process is killed after a time bound.

mod common;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{TestMetrics, WAIT_S, eventually, within};
use hivekeeper_mqtt::{Config, EmbeddedConfig, Flow, Inbound, InboundHandler, Mode, Transport};

/// Time bound handed to each client tool (`-W`) and applied to each process.
const TOOL_TIMEOUT_S: u64 = 10;

/// Answers every request with `echo:<payload>` along its reply route, on the task that
/// received it.
struct Echo;

impl InboundHandler for Echo {
    fn handle(&self, transport: &Transport, inbound: Inbound) -> Flow {
        let mut answer = b"echo:".to_vec();
        answer.extend_from_slice(&inbound.payload);
        let _ = transport.publish_response(&inbound.route, &inbound.agent, answer);
        Flow::Continue
    }
}

/// Starts the endpoint on a free port with [`Echo`] as its handler. Returns the transport and
/// its port.
async fn start_echo() -> (Transport, u16) {
    let config = Config {
        mode: Mode::Embedded(EmbeddedConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            ..EmbeddedConfig::default()
        }),
        ..Config::default()
    };
    let transport = within(
        WAIT_S,
        "the transport starts",
        Transport::start(config, Arc::new(Echo)),
    )
    .await
    .expect("the endpoint starts");
    let port = transport.listeners()[0].addr.port();
    (transport, port)
}

/// Runs `program` with `args`, killed after [`TOOL_TIMEOUT_S`] + 5 s, on a blocking thread.
async fn run(program: &'static str, args: Vec<String>, package: &'static str) -> Output {
    let path = ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("{program} not found: apt-get install {package}"));
    let child = Command::new(path)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("spawn {program}: {error}"));
    let pid = child.id();
    let waited = tokio::time::timeout(
        Duration::from_secs(TOOL_TIMEOUT_S + 5),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    match waited {
        Ok(Ok(Ok(output))) => output,
        _ => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{program} {args:?} did not finish in time");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

#[test]
fn mosquitto_sub_receives_its_events_and_mosquitto_pub_reaches_the_node() {
    let metrics = TestMetrics::install();
    metrics
        .multi_thread_runtime()
        .block_on(mosquitto_sub_and_pub(&metrics));
}

async fn mosquitto_sub_and_pub(metrics: &TestMetrics) {
    let (transport, port) = start_echo().await;
    let sub_args = vec![
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-V".into(),
        "mqttv311".into(),
        "-i".into(),
        "drone-sub".into(),
        "-t".into(),
        "hk/v1/evt/drone-sub".into(),
        "-C".into(),
        "1".into(),
        "-W".into(),
        TOOL_TIMEOUT_S.to_string(),
    ];
    let sub = tokio::spawn(run("mosquitto_sub", sub_args, "mosquitto-clients"));
    eventually(WAIT_S, "mosquitto_sub connected", async || {
        metrics.value("hivekeeper_mqtt_clients_connected") == Some(1.0)
    })
    .await;
    // Subscribed right after its CONNACK; an event published before the SUBACK is dropped
    // (as a broker would), so publish until it lands.
    let event = Bytes::from_static(br#"{"event":"lease.expired","lease":"L1"}"#);
    eventually(WAIT_S, "mosquitto_sub got the event", async || {
        let _ = transport.publish_event("hk/v1/evt/drone-sub", event.clone());
        sub.is_finished()
    })
    .await;
    let output = within(WAIT_S, "mosquitto_sub exits", sub)
        .await
        .expect("mosquitto_sub ran");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        r#"{"event":"lease.expired","lease":"L1"}"#
    );

    let before = metrics.counter("hivekeeper_mqtt_messages_in_total");
    let pub_args = vec![
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-V".into(),
        "mqttv311".into(),
        "-q".into(),
        "1".into(),
        "-i".into(),
        "drone-pub".into(),
        "-t".into(),
        "hk/v1/req/drone-pub".into(),
        "-m".into(),
        r#"{"id":"1","op":"lease.grant","ttl_ms":5000}"#.into(),
    ];
    let output = run("mosquitto_pub", pub_args, "mosquitto-clients").await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    eventually(WAIT_S, "the request arrived", async || {
        metrics.counter("hivekeeper_mqtt_messages_in_total") == before + 1
    })
    .await;
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

/// `mosquitto_rr` is a generic MQTT 5 request/response client: it subscribes to the
/// response topic it names (`-e`), sends the request with that Response Topic and
/// Correlation Data, and prints the first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_rr_gets_its_answer_by_response_topic() {
    let (transport, port) = start_echo().await;
    let args = vec![
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-i".into(),
        "drone-rr".into(),
        "-t".into(),
        "hk/v1/req/drone-rr".into(),
        "-e".into(),
        "hk/v1/rsp/drone-rr".into(),
        "-m".into(),
        "question".into(),
        "-W".into(),
        TOOL_TIMEOUT_S.to_string(),
    ];
    let output = run("mosquitto_rr", args, "mosquitto-clients").await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "echo:question");
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}

/// A paho-mqtt agent at 3.1.1 and at 5.0 (with a Response Topic and Correlation Data): connect
/// as its agent id, subscribe to its response topic, send a request, print the answer and,
/// for 5.0, the correlation data it came back with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paho_mqtt_311_and_5_round_trip() {
    let (transport, port) = start_echo().await;
    let script = r#"
import sys, threading
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
port, version = int(sys.argv[1]), sys.argv[2]
agent = "paho-" + version
v5 = version == "5"
done = threading.Event()
def on_connect(client, userdata, flags, rc, properties=None):
    client.subscribe("hk/v1/rsp/" + agent, qos=1)
def on_subscribe(client, userdata, mid, granted, properties=None):
    props = None
    if v5:
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = "hk/v1/rsp/" + agent
        props.CorrelationData = b"corr-7"
    client.publish("hk/v1/req/" + agent, "hello", qos=1, properties=props)
def on_message(client, userdata, message):
    corr = getattr(message.properties, "CorrelationData", b"") if v5 else b""
    print(message.topic, message.payload.decode(), corr.decode())
    done.set()
client = mqtt.Client(client_id=agent, protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311)
client.on_connect, client.on_subscribe, client.on_message = on_connect, on_subscribe, on_message
client.connect("127.0.0.1", port, keepalive=10)
client.loop_start()
ok = done.wait(10)
client.disconnect()
client.loop_stop()
sys.exit(0 if ok else 1)
"#;
    for (version, expected) in [
        ("311", "hk/v1/rsp/paho-311 echo:hello"),
        ("5", "hk/v1/rsp/paho-5 echo:hello corr-7"),
    ] {
        let args = vec![
            "-c".into(),
            script.to_string(),
            port.to_string(),
            version.to_string(),
        ];
        let output = run("python3", args, "python3-paho-mqtt").await;
        assert!(
            output.status.success(),
            "paho {version}: {}",
            text(&output.stderr)
        );
        assert_eq!(text(&output.stdout), expected, "paho {version}");
    }
    within(WAIT_S, "the transport shuts down", transport.shutdown())
        .await
        .expect("clean shutdown");
}
