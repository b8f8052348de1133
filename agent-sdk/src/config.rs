//! Agent configuration: one [`AgentConfig`], its defaults in its `Default` (as a value,
//! [`DEFAULTS`]), cross-field rules in [`AgentConfig::validate`].
//!
//! Every duration carries its unit in its name. The MQTT-level settings are in seconds because
//! that is rumqttc's resolution for them (its keepalive refuses anything below one second).

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

use hivekeeper_protocol::{Topics, validate};

use crate::error::AgentError;

/// The default broker: the embedded broker of `hivekeeper serve` with no flags. Also the
/// default of every client command's `--brokers`.
pub const DEFAULT_BROKER: &str = "127.0.0.1:1883";

/// Every default of [`AgentConfig`], as one value: the same as `AgentConfig::default()`, where
/// each default is written.
pub static DEFAULTS: LazyLock<AgentConfig> = LazyLock::new(AgentConfig::default);

/// How an agent reaches the service and how patient it is.
///
/// Deserializes from any serde format; absent fields take their [`DEFAULTS`], unknown fields
/// are refused (a misspelled setting would otherwise be silently ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent's id, `[A-Za-z0-9_.-]{1,64}`: the last segment of its topics, the MQTT client
    /// id, and the owner the service binds every lease to. Must be unique among live agents.
    pub agent_id: String,
    /// Brokers, `host:port` or `mqtt://host:port`; at least one, tried as
    /// [`AgentConfig::broker_order`] says. On every connection error the agent moves to another
    /// one (every node of a replicated service serves every agent, so any of them will do), and
    /// also when a broker's node has answered nothing but `unavailable` for 250 ms after its
    /// first (a node cut off from the majority keeps its broker up; a node answers
    /// `unavailable` only after waiting for a leader).
    pub brokers: Vec<String>,
    /// Which broker comes first and which next: [`BrokerOrder::Spread`] (the default) or
    /// [`BrokerOrder::InOrder`].
    #[serde(skip_serializing_if = "BrokerOrder::is_default")]
    pub broker_order: BrokerOrder,
    /// Topic prefix shared with the service, `hk/v1` by default.
    pub topic_prefix: String,
    /// How long one attempt of a request waits for its response before the SAME request id is
    /// sent again. The service answers a retry with the first outcome, so a resend never does
    /// the work twice. Keep it above one second: a member drops a write that waited there
    /// longer than that without reaching the log, which is what keeps an earlier copy from
    /// being applied after the resend's answer (docs/PROTOCOL.md §2, "A copy never comes
    /// late"); below it, a copy and its resend can both be pending.
    pub request_timeout_ms: u64,
    /// How long a request is retried in all before it fails with [`AgentError::Timeout`]. A
    /// waiting acquire adds its `wait_ms` to this; one without `wait_ms` has no deadline (it
    /// waits while its lease lives).
    pub request_deadline_ms: u64,
    /// While an acquire waits in the service's queue, its id is resent this often: the service
    /// answers a resend of a queued id only when it is granted (no second queue slot), so the
    /// resend costs one lookup and recovers a grant whose response was lost.
    pub wait_resend_ms: u64,
    /// Upper bound of the first backoff delay; each later bound doubles up to
    /// [`AgentConfig::backoff_cap_ms`]. Each delay is drawn uniformly below its bound (full
    /// jitter), so a swarm that lost its broker does not come back in lockstep.
    pub backoff_first_ms: u64,
    /// Largest backoff delay.
    pub backoff_cap_ms: u64,
    /// How much earlier than the lease's TTL the SDK gives up (DESIGN.md §5.3): a session is in
    /// jeopardy once `send time of the last acknowledged keepalive + TTL − margin` has passed on
    /// the local monotonic clock. The margin covers clock-rate drift between agent and service
    /// and the time the application needs to stop using what it holds.
    pub keepalive_margin_ms: u64,
    /// How often a session sends a lease keepalive, ms; absent: every third of its TTL. A
    /// session whose TTL is not more than twice this is refused (one lost keepalive must not
    /// cost the lease).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_every_ms: Option<u64>,
    /// MQTT keepalive (PINGREQ interval), seconds. A silent broker is detected after about 1.5×
    /// this and the agent fails over.
    pub mqtt_keepalive_s: u64,
    /// How long one TCP connect plus MQTT CONNECT may take, seconds, before the next broker is
    /// tried.
    pub connect_timeout_s: u64,
    /// The agent's secret, for a service with authentication on (`hivekeeper agent add`
    /// prints it): sent as the MQTT password, with the agent id as the username. Absent: an
    /// anonymous CONNECT, which such a service refuses. Set it with
    /// [`AgentConfig::credentials`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<Secret>,
    /// PEM CA certificate(s) the brokers' certificates must chain to; set, every broker is
    /// reached over TLS (the same `host:port` forms), and its certificate must name the host
    /// as written in [`AgentConfig::brokers`] (a SAN DNS name or IP address). Absent: plain TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with [`AgentConfig::tls_key`] and
    /// [`AgentConfig::tls_ca`]); the agent endpoint takes its CN as the agent's identity, so it
    /// must equal [`AgentConfig::agent_id`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of [`AgentConfig::tls_cert`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
}

/// How an agent picks among [`AgentConfig::brokers`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrokerOrder {
    /// A random broker first, and after a failure a random one of the others. A fleet given
    /// one list spreads evenly over the members, the agents of a failed member spread over the
    /// survivors instead of herding onto the next in the list, and agents that connect or
    /// reconnect after a member came back spread over it too. ZooKeeper's clients shuffle
    /// their server list for the same reason.
    #[default]
    Spread,
    /// The first broker first, then the next in the list after each failure, round the list:
    /// for a preferred member (the nearest one), or a test that needs to know where an agent is.
    InOrder,
}

impl BrokerOrder {
    /// Whether this is the default ([`BrokerOrder::Spread`]), left out of a serialized config.
    pub fn is_default(&self) -> bool {
        *self == BrokerOrder::default()
    }

    /// The index of the broker to try first, of `count`.
    pub(crate) fn first(self, count: usize, rng: &mut fastrand::Rng) -> usize {
        match self {
            BrokerOrder::Spread => rng.usize(..count),
            BrokerOrder::InOrder => 0,
        }
    }

    /// The index of the broker to try after `failed` failed, of `count`: another one whenever
    /// there is another.
    pub(crate) fn after(self, failed: usize, count: usize, rng: &mut fastrand::Rng) -> usize {
        match self {
            BrokerOrder::Spread if count > 1 => (failed + 1 + rng.usize(..count - 1)) % count,
            BrokerOrder::Spread | BrokerOrder::InOrder => (failed + 1) % count,
        }
    }
}

/// An agent's secret: shown as `***` by `Debug`, so a logged config never gives it away.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    /// The secret itself, for the MQTT CONNECT.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The defaults. `agent_id` has none: two agents sharing an id would take each other's MQTT
/// connection (the id is also the MQTT client id), so it must be chosen.
impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            agent_id: String::new(),
            brokers: vec![DEFAULT_BROKER.to_string()],
            broker_order: BrokerOrder::Spread,
            topic_prefix: hivekeeper_protocol::topic::DEFAULT_PREFIX.to_string(),
            request_timeout_ms: 2_000,
            request_deadline_ms: 30_000,
            wait_resend_ms: 10_000,
            backoff_first_ms: 30,
            backoff_cap_ms: 2_000,
            keepalive_margin_ms: 200,
            keepalive_every_ms: None,
            mqtt_keepalive_s: 5,
            connect_timeout_s: 5,
            secret: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl AgentConfig {
    /// The defaults with an agent id and a broker list: the two settings every agent sets.
    pub fn new(agent_id: impl Into<String>, brokers: &[&str]) -> AgentConfig {
        AgentConfig {
            agent_id: agent_id.into(),
            brokers: brokers.iter().map(|b| b.to_string()).collect(),
            ..AgentConfig::default()
        }
    }

    /// Authenticates with `secret` (username = the agent id, password = `secret`), for a
    /// service with authentication on.
    pub fn credentials(mut self, secret: impl Into<String>) -> AgentConfig {
        self.secret = Some(Secret::new(secret));
        self
    }

    /// The same config, reaching its brokers over TLS: their certificates must chain to the CA
    /// in the PEM file `ca`.
    pub fn tls(mut self, ca: impl Into<PathBuf>) -> AgentConfig {
        self.tls_ca = Some(ca.into());
        self
    }

    /// The same config, presenting a client certificate (mutual TLS; its CN must be the agent
    /// id). Needs [`AgentConfig::tls`] too.
    pub fn client_certificate(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> AgentConfig {
        self.tls_cert = Some(cert.into());
        self.tls_key = Some(key.into());
        self
    }

    /// Checks every field and the rules between them. [`crate::Agent::connect`] calls it, so a
    /// bad configuration fails at once rather than as a strange timeout later.
    pub fn validate(&self) -> Result<(), AgentError> {
        let fail = |message: String| Err(AgentError::Config(message));
        if let Err(message) = validate::agent_id(&self.agent_id) {
            return fail(format!("agent_id: {message}"));
        }
        if self.brokers.is_empty() {
            return fail("brokers: at least one broker is needed".into());
        }
        for broker in &self.brokers {
            BrokerAddr::parse(broker).map_err(|error| AgentError::Config(error.to_string()))?;
        }
        if let Err(e) = Topics::new(&self.topic_prefix) {
            return fail(format!("topic_prefix: {}", e.message));
        }
        if self.request_timeout_ms == 0 {
            return fail("request_timeout_ms must be positive".into());
        }
        if self.request_deadline_ms < self.request_timeout_ms {
            return fail(format!(
                "request_deadline_ms ({}) must be at least request_timeout_ms ({}): a request \
                 must get at least one full attempt",
                self.request_deadline_ms, self.request_timeout_ms
            ));
        }
        if self.wait_resend_ms < self.request_timeout_ms {
            return fail(format!(
                "wait_resend_ms ({}) must be at least request_timeout_ms ({}): a waiting acquire \
                 is never resent more often than an ordinary request",
                self.wait_resend_ms, self.request_timeout_ms
            ));
        }
        if self.backoff_first_ms == 0 || self.backoff_first_ms > self.backoff_cap_ms {
            return fail(format!(
                "backoff_first_ms ({}) must be in [1, backoff_cap_ms = {}]",
                self.backoff_first_ms, self.backoff_cap_ms
            ));
        }
        if self.keepalive_every_ms == Some(0) {
            return fail("keepalive_every_ms must be positive (or absent: TTL / 3)".into());
        }
        if self.keepalive_margin_ms == 0 {
            return fail("keepalive_margin_ms must be positive".into());
        }
        if self.mqtt_keepalive_s == 0 {
            return fail(
                "mqtt_keepalive_s must be positive: without pings a dead broker is never noticed"
                    .into(),
            );
        }
        if self.connect_timeout_s == 0 {
            return fail("connect_timeout_s must be positive".into());
        }
        if self
            .secret
            .as_ref()
            .is_some_and(|secret| secret.0.is_empty())
        {
            return fail(
                "secret: empty (leave it out for a service without authentication)".into(),
            );
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return fail(
                "tls_cert and tls_key go together: a client certificate needs its key".into(),
            );
        }
        if self.tls_cert.is_some() && self.tls_ca.is_none() {
            return fail(
                "tls_cert needs tls_ca: a client certificate is only sent over TLS".into(),
            );
        }
        Ok(())
    }

    /// The rustls client config of [`AgentConfig::tls_ca`] (and the client certificate), read
    /// from the files now; `None` without TLS. Call after [`AgentConfig::validate`].
    pub(crate) fn tls_client_config(
        &self,
    ) -> Result<Option<Arc<hivekeeper_tls::rustls::ClientConfig>>, AgentError> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let cert_key = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(hivekeeper_tls::CertKey {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        hivekeeper_tls::client_config(ca, cert_key.as_ref())
            .map(Some)
            .map_err(|error| AgentError::Config(format!("tls: {error}")))
    }

    /// The brokers, parsed. Call after [`AgentConfig::validate`].
    pub(crate) fn broker_addrs(&self) -> Result<Vec<BrokerAddr>, AgentError> {
        self.brokers
            .iter()
            .map(|b| BrokerAddr::parse(b).map_err(|error| AgentError::Config(error.to_string())))
            .collect()
    }
}

/// A broker address [`BrokerAddr::parse`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("broker {broker:?}: {reason}")]
pub struct BadBrokerAddr {
    /// The address as given.
    pub broker: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A broker's host and port, parsed from `host:port`, `mqtt://host:port` or `[v6::addr]:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl BrokerAddr {
    /// Parses one entry of [`AgentConfig::brokers`]. URL schemes other than `mqtt://` and
    /// `tcp://` are refused: TLS is chosen by [`AgentConfig::tls_ca`], not by the address.
    pub fn parse(text: &str) -> Result<BrokerAddr, BadBrokerAddr> {
        let bad = |reason: &str| {
            Err(BadBrokerAddr {
                broker: text.to_string(),
                reason: reason.to_string(),
            })
        };
        let rest = match text.split_once("://") {
            None => text,
            Some(("mqtt" | "tcp", rest)) => rest,
            Some((scheme, _)) => {
                return bad(&format!(
                    "scheme {scheme:?} is not supported; use host:port or mqtt://host:port"
                ));
            }
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let Some((host, port)) = rest.rsplit_once(':') else {
            return bad("expected host:port");
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() || host.contains(['/', ' ']) {
            return bad("the host is empty or contains '/' or a space");
        }
        match port.parse::<u16>() {
            Ok(port) if port > 0 => Ok(BrokerAddr {
                host: host.to_string(),
                port,
            }),
            _ => bad("the port must be a number from 1 to 65535"),
        }
    }
}

impl std::fmt::Display for BrokerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_starts_anywhere_and_leaves_a_failed_broker_for_any_other() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut firsts = [0usize; 3];
        let mut afters = [0usize; 3];
        for _ in 0..3_000 {
            firsts[BrokerOrder::Spread.first(3, &mut rng)] += 1;
            afters[BrokerOrder::Spread.after(1, 3, &mut rng)] += 1;
        }
        assert!(firsts.iter().all(|n| *n > 800), "{firsts:?}");
        assert_eq!(afters[1], 0, "never the broker that failed: {afters:?}");
        assert!(afters[0] > 1_200 && afters[2] > 1_200, "{afters:?}");
        // One broker: it is the only choice.
        assert_eq!(BrokerOrder::Spread.first(1, &mut rng), 0);
        assert_eq!(BrokerOrder::Spread.after(0, 1, &mut rng), 0);
    }

    #[test]
    fn in_order_starts_at_the_first_and_goes_round_the_list() {
        let mut rng = fastrand::Rng::with_seed(7);
        assert_eq!(BrokerOrder::InOrder.first(3, &mut rng), 0);
        let next: Vec<usize> = (0..3)
            .map(|failed| BrokerOrder::InOrder.after(failed, 3, &mut rng))
            .collect();
        assert_eq!(next, [1, 2, 0]);
    }

    #[test]
    fn the_default_order_is_left_out_of_a_serialized_config() {
        let spread = serde_json::to_value(valid()).expect("serializes");
        assert!(spread.get("broker_order").is_none(), "{spread}");
        let in_order = AgentConfig {
            broker_order: BrokerOrder::InOrder,
            ..valid()
        };
        let in_order = serde_json::to_value(in_order).expect("serializes");
        assert_eq!(in_order["broker_order"], "in_order");
    }

    fn valid() -> AgentConfig {
        AgentConfig::new("drone-7", &["127.0.0.1:1883"])
    }

    #[test]
    fn credentials_set_the_secret_and_debug_hides_it() {
        let config = valid().credentials("s3cret");
        assert_eq!(config.secret.as_ref().map(Secret::expose), Some("s3cret"));
        assert!(config.validate().is_ok());
        let debug = format!("{config:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("Secret(***)"), "{debug}");
        assert!(matches!(
            valid().credentials("").validate(),
            Err(AgentError::Config(m)) if m.starts_with("secret")
        ));
    }

    #[test]
    fn defaults_are_valid_once_an_agent_id_is_set() {
        assert!(valid().validate().is_ok());
        let no_id = AgentConfig::default();
        assert!(matches!(no_id.validate(), Err(AgentError::Config(m)) if m.contains("agent_id")));
    }

    #[test]
    fn broker_forms() {
        let plain = BrokerAddr::parse("10.0.0.1:1883").expect("plain host:port");
        assert_eq!((plain.host.as_str(), plain.port), ("10.0.0.1", 1883));
        let url = BrokerAddr::parse("mqtt://node-2.local:1884").expect("mqtt:// url");
        assert_eq!((url.host.as_str(), url.port), ("node-2.local", 1884));
        let v6 = BrokerAddr::parse("[::1]:1883").expect("bracketed IPv6");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 1883));
        assert_eq!(v6.to_string(), "[::1]:1883");
        for bad in [
            "",
            "host",
            "host:",
            "host:0",
            "host:65536",
            ":1883",
            "mqtts://h:8883",
        ] {
            assert!(BrokerAddr::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn validate_refuses_each_bad_field() {
        type Spoil = Box<dyn Fn(&mut AgentConfig)>;
        let cases: Vec<(&str, Spoil)> = vec![
            ("agent_id", Box::new(|c| c.agent_id = "a/b".into())),
            ("brokers", Box::new(|c| c.brokers.clear())),
            ("broker", Box::new(|c| c.brokers.push("nope".into()))),
            ("topic_prefix", Box::new(|c| c.topic_prefix = "hk/+".into())),
            ("request_timeout_ms", Box::new(|c| c.request_timeout_ms = 0)),
            (
                "request_deadline_ms",
                Box::new(|c| c.request_deadline_ms = 1),
            ),
            ("wait_resend_ms", Box::new(|c| c.wait_resend_ms = 1)),
            ("backoff_first_ms", Box::new(|c| c.backoff_first_ms = 0)),
            ("backoff_first_ms", Box::new(|c| c.backoff_cap_ms = 1)),
            (
                "keepalive_every_ms",
                Box::new(|c| c.keepalive_every_ms = Some(0)),
            ),
            (
                "keepalive_margin_ms",
                Box::new(|c| c.keepalive_margin_ms = 0),
            ),
            ("mqtt_keepalive_s", Box::new(|c| c.mqtt_keepalive_s = 0)),
            ("connect_timeout_s", Box::new(|c| c.connect_timeout_s = 0)),
            ("tls_key", Box::new(|c| c.tls_cert = Some("c.crt".into()))),
            (
                "tls_ca",
                Box::new(|c| *c = valid().client_certificate("c.crt", "c.key")),
            ),
        ];
        for (field, spoil) in cases {
            let mut config = valid();
            spoil(&mut config);
            match config.validate() {
                Err(AgentError::Config(message)) => {
                    assert!(message.contains(field), "{field}: {message}")
                }
                other => panic!("{field}: expected a config error, got {other:?}"),
            }
        }
    }

    #[test]
    fn serde_fills_defaults_and_refuses_unknown_fields() {
        let config: AgentConfig =
            serde_json::from_str(r#"{"agent_id":"d1","brokers":["mqtt://h:1"]}"#)
                .expect("a minimal config parses");
        assert_eq!(config.request_timeout_ms, DEFAULTS.request_timeout_ms);
        assert_eq!(config.topic_prefix, "hk/v1");
        assert!(config.validate().is_ok());
        let typo =
            serde_json::from_str::<AgentConfig>(r#"{"agent_id":"d1","request_timout_ms":5}"#);
        assert!(typo.is_err());
    }
}
