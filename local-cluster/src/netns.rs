//! The members' network: one namespace per member, each joined by a veth pair to a bridge in
//! the caller's namespace, where the clients run. Cutting a link is an iptables DROP rule in
//! the member's own namespace, so packets vanish as they do in a real partition: no reset, no
//! "unreachable", only silence (a proxy that closes sockets would be kinder than the network).
//!
//! Names carry the process id, so two runs on one machine do not collide; a run that is killed
//! before its Drop leaves `hk<pid>n*` namespaces and an `hkb<pid>` bridge behind (`ip netns
//! del`, `ip link del` remove them).

use crate::Error;

/// The namespaces and the bridge of one cluster; removed on drop.
pub struct Network {
    prefix: String,
    bridge: String,
    subnet: String,
    size: usize,
}

/// Runs `ip` with `args` (iptables through `ip netns exec`); an error names the command and
/// what it printed.
fn run(args: &[&str]) -> Result<(), Error> {
    crate::cluster::run("ip", args, " (install iproute2 and iptables)", "")
}

impl Network {
    /// Creates the bridge and `size` namespaces with addresses `10.a.b.11` onwards.
    pub fn create(size: usize) -> Result<Network, Error> {
        let pid = std::process::id();
        // A /24 of its own per process id: 10.(100 + pid / 256 % 100).(pid % 256).0.
        let subnet = format!("10.{}.{}", 100 + (pid / 256) % 100, pid % 256);
        let network = Network {
            prefix: format!("hk{pid}n"),
            bridge: format!("hkb{pid}"),
            subnet,
            size: 0,
        };
        let mut network = network;
        let bridge = network.bridge.clone();
        crate::cluster::run(
            "ip",
            &["link", "add", &bridge, "type", "bridge"],
            " (install iproute2 and iptables)",
            ": creating network namespaces needs root",
        )?;
        let gateway = format!("{}.1/24", network.subnet);
        run(&["addr", "add", &gateway, "dev", &bridge])?;
        run(&["link", "set", &bridge, "up"])?;
        for i in 0..size {
            let namespace = network.namespace(i);
            run(&["netns", "add", &namespace])?;
            network.size = i + 1;
            let veth = format!("hkv{pid}x{i}");
            run(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ])?;
            run(&["link", "set", &veth, "master", &bridge, "up"])?;
            let address = format!("{}/24", network.ip(i));
            run(&["-n", &namespace, "addr", "add", &address, "dev", "eth0"])?;
            run(&["-n", &namespace, "link", "set", "eth0", "up"])?;
            run(&["-n", &namespace, "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }

    /// Member `index`'s namespace name.
    pub fn namespace(&self, index: usize) -> String {
        format!("{}{}", self.prefix, index + 1)
    }

    /// Member `index`'s address.
    pub fn ip(&self, index: usize) -> String {
        format!("{}.{}", self.subnet, 11 + index)
    }

    /// Drops every packet between member `index` and `peer_ip`, in `index`'s namespace.
    pub fn cut(&self, index: usize, peer_ip: &str) -> Result<(), Error> {
        let namespace = self.namespace(index);
        for (chain, flag) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
            run(&[
                "netns", "exec", &namespace, "iptables", "-A", chain, flag, peer_ip, "-j", "DROP",
            ])?;
        }
        Ok(())
    }

    /// Removes every cut of member `index`.
    pub fn heal(&self, index: usize) -> Result<(), Error> {
        let namespace = self.namespace(index);
        for chain in ["INPUT", "OUTPUT"] {
            run(&["netns", "exec", &namespace, "iptables", "-F", chain])?;
        }
        Ok(())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for i in 0..self.size {
            let _ = run(&["netns", "del", &self.namespace(i)]);
        }
        let _ = run(&["link", "del", &self.bridge]);
    }
}
