//! Secure by default: which of a node's listeners would face the network unprotected.
//!
//! `serve` refuses to start when one does, unless `--insecure` is given; then it logs one WARN
//! line naming them at every start (docs/SECURITY.md, "Secure by default"). A listener on a
//! loopback address is only reachable from this machine, so it needs nothing: the two-command
//! quickstart stays as it is. Any other address (`0.0.0.0` included) needs:
//! - the agent endpoint: `--auth` and TLS (`--mqtt-tls-cert`/`--mqtt-tls-key`);
//! - the peer port: mutual TLS (`--peer-tls-cert`, `--peer-tls-key`, `--peer-ca`);
//! - `/metrics`: it is plain, unauthenticated HTTP, so only `--insecure` opens it to the
//!   network (or scrape it through a TLS proxy on this machine).
//!
//! An external broker is not a listener of this node: its own settings protect it
//! (deploy/mosquitto/).

use std::fmt;
use std::net::SocketAddr;

use hivekeeper_mqtt::Mode;

use crate::serve::ServeConfig;

/// One listener on a non-loopback address without the protection it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposed {
    /// Which listener (`agent endpoint`, `peer port`, `metrics`).
    pub listener: &'static str,
    /// The address it would bind.
    pub addr: SocketAddr,
    /// What it lacks, as the flags that would give it.
    pub missing: &'static str,
}

impl fmt::Display for Exposed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} without {}",
            self.listener, self.addr, self.missing
        )
    }
}

/// The listeners of `config` that would face the network unprotected, in the order agent
/// endpoint, peer port, metrics.
pub fn exposed(config: &ServeConfig) -> Vec<Exposed> {
    let mut found = Vec::new();
    let public = |addr: &SocketAddr| !addr.ip().is_loopback();
    if let Mode::Embedded(embedded) = &config.mqtt.mode {
        let tls = embedded.tls_cert.is_some() && embedded.tls_key.is_some();
        let missing = match (config.auth.enabled, tls) {
            (true, true) => None,
            (true, false) => Some("TLS (--mqtt-tls-cert, --mqtt-tls-key)"),
            (false, true) => Some("authentication (--auth)"),
            (false, false) => {
                Some("authentication and TLS (--auth, --mqtt-tls-cert, --mqtt-tls-key)")
            }
        };
        if let Some(missing) = missing {
            let listeners = std::iter::once(embedded.listen).chain(embedded.listen_v5);
            for addr in listeners.filter(public) {
                found.push(Exposed {
                    listener: "the agent endpoint",
                    addr,
                    missing,
                });
            }
        }
    }
    if let Some(cluster) = &config.node.cluster
        // A config whose peer settings are wrong fails validation with its own message.
        && let (Ok(addr), Ok(None)) = (cluster.listen_addr(), cluster.peer_tls())
        && public(&addr)
    {
        found.push(Exposed {
            listener: "the peer port",
            addr,
            missing: "mutual TLS (--peer-tls-cert, --peer-tls-key, --peer-ca)",
        });
    }
    if public(&config.metrics.listen) {
        found.push(Exposed {
            listener: "/metrics",
            addr: config.metrics.listen,
            missing: "authentication and TLS (it has neither: keep it on loopback)",
        });
    }
    found
}

/// The refusal (without `--insecure`) or the warning (with it), naming every exposed listener.
pub fn describe(exposed: &[Exposed]) -> String {
    let list = exposed
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "{list}: anyone who reaches it can act as any agent, or read and change the cluster's \
         state (docs/SECURITY.md)"
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use hivekeeper_coordinator::node::{ClusterConfig, ClusterState};

    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    /// The default config with the agent endpoint on `mqtt`.
    fn config(mqtt: &str) -> ServeConfig {
        let mut config = ServeConfig::default();
        match &mut config.mqtt.mode {
            Mode::Embedded(embedded) => embedded.listen = addr(mqtt),
            Mode::External(_) => unreachable!("the default is the agent endpoint"),
        }
        config
    }

    fn with_endpoint_tls(mut config: ServeConfig) -> ServeConfig {
        if let Mode::Embedded(embedded) = &mut config.mqtt.mode {
            embedded.tls_cert = Some(PathBuf::from("server.crt"));
            embedded.tls_key = Some(PathBuf::from("server.key"));
        }
        config
    }

    fn member(peer_tls: bool) -> ClusterConfig {
        let file = |name: &str| peer_tls.then(|| PathBuf::from(name));
        ClusterConfig {
            name: "n1".into(),
            initial_cluster: "n1=10.0.0.1:7401,n2=10.0.0.2:7401,n3=10.0.0.3:7401".into(),
            initial_cluster_state: ClusterState::New,
            peer_listen: None,
            peer_tls_cert: file("peer-n1.crt"),
            peer_tls_key: file("peer-n1.key"),
            peer_ca: file("ca.crt"),
        }
    }

    #[test]
    fn the_loopback_quickstart_exposes_nothing() {
        assert_eq!(exposed(&ServeConfig::default()), vec![]);
        assert_eq!(exposed(&config("[::1]:1883")), vec![]);
    }

    #[test]
    fn a_public_endpoint_needs_auth_and_tls() {
        let open = config("0.0.0.0:1883");
        assert_eq!(
            exposed(&open),
            vec![Exposed {
                listener: "the agent endpoint",
                addr: addr("0.0.0.0:1883"),
                missing: "authentication and TLS (--auth, --mqtt-tls-cert, --mqtt-tls-key)",
            }]
        );
        let mut auth_only = config("10.0.0.1:1883");
        auth_only.auth.enabled = true;
        assert_eq!(
            exposed(&auth_only)[0].missing,
            "TLS (--mqtt-tls-cert, --mqtt-tls-key)"
        );
        let tls_only = with_endpoint_tls(config("10.0.0.1:1883"));
        assert_eq!(exposed(&tls_only)[0].missing, "authentication (--auth)");
        let mut both = with_endpoint_tls(config("10.0.0.1:1883"));
        both.auth.enabled = true;
        assert_eq!(exposed(&both), vec![]);
    }

    #[test]
    fn a_public_peer_port_needs_mutual_tls_and_metrics_stay_on_loopback() {
        let mut open = config("127.0.0.1:1883");
        open.node.cluster = Some(member(false));
        open.metrics.listen = addr("0.0.0.0:9090");
        assert_eq!(
            exposed(&open),
            vec![
                Exposed {
                    listener: "the peer port",
                    addr: addr("10.0.0.1:7401"),
                    missing: "mutual TLS (--peer-tls-cert, --peer-tls-key, --peer-ca)",
                },
                Exposed {
                    listener: "/metrics",
                    addr: addr("0.0.0.0:9090"),
                    missing: "authentication and TLS (it has neither: keep it on loopback)",
                },
            ]
        );
        assert_eq!(
            describe(&exposed(&open)),
            "the peer port on 10.0.0.1:7401 without mutual TLS (--peer-tls-cert, \
             --peer-tls-key, --peer-ca); /metrics on 0.0.0.0:9090 without authentication and \
             TLS (it has neither: keep it on loopback): anyone who reaches it can act as any \
             agent, or read and change the cluster's state (docs/SECURITY.md)"
        );
        let mut protected = config("127.0.0.1:1883");
        protected.node.cluster = Some(member(true));
        assert_eq!(exposed(&protected), vec![]);
    }
}
