//! Cluster membership as an operator writes it: etcd-style `--name` and `--initial-cluster`.
//!
//! Every initial member is started with the same `initial_cluster` list
//! (`n1=127.0.0.1:7401,n2=127.0.0.1:7402,n3=127.0.0.1:7403`); each node finds itself in it by
//! `name`, listens for peers at its own address, and the first start of a fresh data directory
//! makes the whole list the first membership (every member does so with the same list, which
//! openraft allows: the election decides). A node joining a running cluster is started with
//! `initial_cluster_state = "existing"`: it initializes nothing and waits for the leader to add
//! it (`hivekeeper member add`). A node's id is derived from its name ([`node_id_for`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ConfigError;
use crate::raft::transport::PeerTlsFiles;
use crate::raft::{Member, NodeId, node_id_for};

/// Whether the initial members form a new cluster or this node joins a running one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClusterState {
    /// Bootstrap: the initial members form a new cluster (ignored once the data dir has a log).
    #[default]
    New,
    /// Join: wait to be added by the running cluster's leader.
    Existing,
}

/// A cluster member's settings. Absent from the node config: a single node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name; must appear in `initial_cluster`.
    pub name: String,
    /// Every initial member as `name=host:port` (the inter-node address), comma-separated; the
    /// same list on every member.
    pub initial_cluster: String,
    /// `new` (default) or `existing`.
    #[serde(default)]
    pub initial_cluster_state: ClusterState,
    /// Where to listen for peers; default: this node's address in `initial_cluster`. Set it to
    /// listen on another interface (0.0.0.0:7401) than the one peers dial. A hostname is
    /// resolved when the file is read.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "hivekeeper_listen::deserialize_option"
    )]
    pub peer_listen: Option<SocketAddr>,
    /// This member's PEM certificate for mutual TLS on the peer port (`--peer-tls-cert`); its
    /// CN or a SAN DNS name must be this member's `name`, and peers dialling it check a SAN
    /// DNS name. With `peer_tls_key` and `peer_ca`: all three or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_tls_cert: Option<PathBuf>,
    /// The PEM private key of `peer_tls_cert` (`--peer-tls-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_tls_key: Option<PathBuf>,
    /// The PEM CA that signs every member's peer certificate (`--peer-ca`). A peer is accepted
    /// only with a certificate of this CA naming a member of the current configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_ca: Option<PathBuf>,
}

impl ClusterConfig {
    /// Member `name` of a new cluster of `initial_cluster` (`name=host:port,...`), with every
    /// other setting at its default: what `--name` and `--initial-cluster` alone say.
    pub fn new(name: String, initial_cluster: String) -> ClusterConfig {
        ClusterConfig {
            name,
            initial_cluster,
            initial_cluster_state: ClusterState::New,
            peer_listen: None,
            peer_tls_cert: None,
            peer_tls_key: None,
            peer_ca: None,
        }
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        node_id_for(&self.name)
    }

    /// The initial members by id. Errors name the offending entry.
    pub fn members(&self) -> Result<BTreeMap<NodeId, Member>, ConfigError> {
        let mut members = BTreeMap::new();
        for entry in self.initial_cluster.split(',').map(str::trim) {
            let not_name_equals_addr = || ConfigError::MemberNotNameEqualsAddr {
                entry: entry.to_string(),
            };
            let (name, addr) = entry.split_once('=').ok_or_else(not_name_equals_addr)?;
            let (name, addr) = (name.trim(), addr.trim());
            if name.is_empty() || addr.is_empty() {
                return Err(not_name_equals_addr());
            }
            if addr
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
            {
                return Err(ConfigError::MemberAddrNotHostPort {
                    entry: entry.to_string(),
                    addr: addr.to_string(),
                });
            }
            let member = Member {
                name: name.to_string(),
                addr: addr.to_string(),
            };
            if let Some(other) = members.insert(node_id_for(name), member) {
                return Err(ConfigError::MemberTwice { name: other.name });
            }
        }
        Ok(members)
    }

    /// This node's own entry.
    pub fn me(&self) -> Result<Member, ConfigError> {
        self.members()?
            .remove(&self.node_id())
            .ok_or_else(|| ConfigError::NameNotInCluster {
                name: self.name.clone(),
                initial_cluster: self.initial_cluster.clone(),
            })
    }

    /// The address to listen on for peers.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        if let Some(addr) = self.peer_listen {
            return Ok(addr);
        }
        let me = self.me()?;
        me.addr
            .parse()
            .map_err(|_| ConfigError::PeerListenNotIp { addr: me.addr })
    }

    /// The peer port's TLS files, when mutual TLS is configured; an error names the missing
    /// setting when only some of the three are set.
    pub fn peer_tls(&self) -> Result<Option<PeerTlsFiles>, ConfigError> {
        match (&self.peer_tls_cert, &self.peer_tls_key, &self.peer_ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(PeerTlsFiles {
                cert_key: hivekeeper_tls::CertKey {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                ca: ca.clone(),
            })),
            (cert, key, _) => Err(ConfigError::PeerTlsIncomplete {
                missing: if cert.is_none() {
                    "peer_tls_cert"
                } else if key.is_none() {
                    "peer_tls_key"
                } else {
                    "peer_ca"
                },
            }),
        }
    }

    /// All the rules at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::ClusterNameEmpty);
        }
        self.peer_tls()?;
        self.listen_addr().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, list: &str) -> ClusterConfig {
        ClusterConfig::new(name.into(), list.into())
    }

    #[test]
    fn a_node_finds_itself_and_its_listen_address() {
        let config = config(
            "n2",
            "n1=127.0.0.1:7401, n2=127.0.0.1:7402,n3=127.0.0.1:7403",
        );
        config.validate().expect("valid");
        assert_eq!(config.members().expect("parses").len(), 3);
        assert_eq!(
            config.listen_addr().expect("an address"),
            "127.0.0.1:7402".parse().expect("literal")
        );
        assert_eq!(config.node_id(), node_id_for("n2"));
    }

    #[test]
    fn mistakes_are_named() {
        let missing = config("n4", "n1=127.0.0.1:7401").validate().unwrap_err();
        assert_eq!(
            missing,
            ConfigError::NameNotInCluster {
                name: "n4".into(),
                initial_cluster: "n1=127.0.0.1:7401".into(),
            }
        );
        let missing = missing.to_string();
        assert!(
            missing.contains("\"n4\" is not in initial_cluster"),
            "{missing}"
        );
        let twice = config("n1", "n1=127.0.0.1:7401,n1=127.0.0.1:7402")
            .validate()
            .unwrap_err();
        assert_eq!(twice, ConfigError::MemberTwice { name: "n1".into() });
        assert!(twice.to_string().contains("twice"), "{twice}");
        let no_port = config("n1", "n1=127.0.0.1").validate().unwrap_err();
        assert!(no_port.to_string().contains("not host:port"), "{no_port}");
        let no_eq = config("n1", "n1@127.0.0.1:7401").validate().unwrap_err();
        assert!(no_eq.to_string().contains("not name=host:port"), "{no_eq}");
        let unnamed = config("", "n1=127.0.0.1:7401").validate().unwrap_err();
        assert_eq!(unnamed, ConfigError::ClusterNameEmpty);
        let host_name = config("n1", "n1=node-1.local:7401").validate().unwrap_err();
        assert_eq!(
            host_name,
            ConfigError::PeerListenNotIp {
                addr: "node-1.local:7401".into()
            }
        );
    }
}
