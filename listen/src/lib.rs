//! # hivekeeper-listen: listen addresses as operators write them
//!
//! An IP address and port (`0.0.0.0:1883`, `[::1]:1883`) or a hostname and port
//! (`localhost:1883`), in flags and config files alike. The node's peer port, the MQTT
//! transport's listeners and the metrics port all read theirs here, so one setting means the
//! same everywhere. A crate of its own, with serde as its only dependency, so that the MQTT
//! transport reads its listeners without depending on the node.
//!
//! A hostname is resolved once, when the setting is read, to its first IPv4 address (its
//! first address if it has none): a listener binds one address, and `localhost` resolving to
//! `::1` first on some systems would otherwise surprise an operator who meant 127.0.0.1.
//!
//! # Layout
//! - [`resolve`]: text to address, or a [`ListenAddrError`] an operator can act on.
//! - [`deserialize`], [`deserialize_option`]: the same for serde's `deserialize_with`.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer};

/// Why a listen address was refused, in words an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenAddrError {
    /// Not `HOST:PORT` at all (no port, an empty host, a port that is not a number up to
    /// 65535).
    #[error("{text:?} is not HOST:PORT (an IP address or a hostname that resolves, and a port)")]
    NotHostPort {
        /// The text as given.
        text: String,
    },
    /// The hostname did not resolve.
    #[error("{text:?}: cannot resolve {host:?}: {reason}")]
    Unresolved {
        /// The text as given.
        text: String,
        /// Its host part.
        host: String,
        /// What the resolver said.
        reason: String,
    },
    /// The hostname resolved to no address.
    #[error("{text:?}: {host:?} resolves to no address")]
    NoAddress {
        /// The text as given.
        text: String,
        /// Its host part.
        host: String,
    },
}

/// The address `text` names, resolving a hostname.
pub fn resolve(text: &str) -> Result<SocketAddr, ListenAddrError> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let not_host_port = || ListenAddrError::NotHostPort {
        text: text.to_string(),
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(not_host_port)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(not_host_port());
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|error| ListenAddrError::Unresolved {
            text: text.to_string(),
            host: host.to_string(),
            reason: error.to_string(),
        })?
        .collect();
    addrs
        .iter()
        .find(|addr| addr.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| ListenAddrError::NoAddress {
            text: text.to_string(),
            host: host.to_string(),
        })
}

/// Serde `deserialize_with` for a listen address in a config file.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    resolve(&text).map_err(serde::de::Error::custom)
}

/// Serde `deserialize_with` for an optional listen address in a config file.
pub fn deserialize_option<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    Option::<String>::deserialize(deserializer)?
        .map(|text| resolve(&text).map_err(serde::de::Error::custom))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::{ListenAddrError, resolve};

    #[test]
    fn addresses_and_hostnames_resolve_and_anything_else_says_why() {
        let ok = |text: &str| resolve(text).map(|addr| addr.to_string());
        assert_eq!(ok("0.0.0.0:1883"), Ok("0.0.0.0:1883".into()));
        assert_eq!(ok("[::1]:1883"), Ok("[::1]:1883".into()));
        assert_eq!(ok("localhost:1883"), Ok("127.0.0.1:1883".into()));
        for bad in ["localhost", "localhost:http", ":1883", "host:99999"] {
            let error = resolve(bad).expect_err(bad);
            assert_eq!(
                error,
                ListenAddrError::NotHostPort { text: bad.into() },
                "{bad}"
            );
            assert_eq!(
                error.to_string(),
                format!(
                    "{bad:?} is not HOST:PORT (an IP address or a hostname that resolves, and a port)"
                )
            );
        }
    }
}
