//! Free loopback ports, from the one picker `hivekeeper bench` uses too
//! ([`hivekeeper_loopback::free_ports`]).
//!
//! A port is free only until someone binds it: a node started on it may still find it taken
//! by another test's node (the ports come from below the kernel's ephemeral range, so an
//! outgoing connection's source port no longer can), so callers that start processes retry on
//! "Address already in use". Ports a test needs together must come from one
//! [`free_ports`] call: picked one at a time, the same port can come back twice.

/// `count` distinct ports on 127.0.0.1 that were free a moment ago, every listener held until
/// all are picked. Fails the test if the machine cannot bind loopback ports.
pub fn free_ports(count: usize) -> Vec<u16> {
    hivekeeper_loopback::free_ports(count)
        .unwrap_or_else(|error| panic!("bind {count} free loopback ports: {error}"))
}

/// One port on 127.0.0.1 that was free a moment ago. For two or more ports at once, use
/// [`free_ports`].
pub fn free_port() -> u16 {
    free_ports(1)[0]
}
