//! Listen addresses as operators write them: an IP address and port (`0.0.0.0:1883`,
//! `[::1]:1883`) or a hostname and port (`localhost:1883`), in flags and config files alike.
//!
//! A hostname is resolved once, when the setting is read, to its first IPv4 address (its
//! first address if it has none): a listener binds one address, and `localhost` resolving to
//! `::1` first on some systems would otherwise surprise an operator who meant 127.0.0.1.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer};

/// The address `text` names, resolving a hostname; the error says what is wrong in words an
/// operator can act on.
pub fn resolve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let not_an_address = || {
        format!("{text:?} is not HOST:PORT (an IP address or a hostname that resolves, and a port)")
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(not_an_address)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(not_an_address());
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|error| format!("{text:?}: cannot resolve {host:?}: {error}"))?
        .collect();
    addrs
        .iter()
        .find(|addr| addr.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("{text:?}: {host:?} resolves to no address"))
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
    use super::resolve;

    #[test]
    fn addresses_and_hostnames_resolve_and_anything_else_says_why() {
        let ok = |text: &str| resolve(text).map(|addr| addr.to_string());
        assert_eq!(ok("0.0.0.0:1883"), Ok("0.0.0.0:1883".into()));
        assert_eq!(ok("[::1]:1883"), Ok("[::1]:1883".into()));
        assert_eq!(ok("localhost:1883"), Ok("127.0.0.1:1883".into()));
        for bad in ["localhost", "localhost:http", ":1883", "host:99999"] {
            let error = resolve(bad).expect_err(bad);
            assert!(error.contains("is not HOST:PORT"), "{bad}: {error}");
        }
    }
}
