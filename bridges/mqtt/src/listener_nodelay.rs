//! TCP_NODELAY on a listening socket that rumqttd binds itself.
//!
//! Why: rumqttd 0.20 never sets TCP_NODELAY on accepted sockets. A QoS 1 request then costs
//! about 40 ms every time: the broker writes the PUBACK, and Nagle holds the response behind
//! it until the client's delayed ACK arrives (DESIGN.md §7). On Linux an accepted socket
//! inherits TCP_NODELAY from its listening socket, so setting it once on the listener fixes
//! every connection accepted afterwards.
//!
//! How, without `unsafe` (the workspace forbids it): rumqttd's `Server::start` binds inside
//! its own future and exposes neither the socket nor an option. This module finds the
//! listening socket among this process's file descriptors and duplicates it with
//! `pidfd_getfd(2)` on our own pid, which returns an owned descriptor: rustix wraps both calls
//! safely, and the kernel checks the descriptor exists. A candidate is only touched if it is a
//! listening socket (`SO_ACCEPTCONN`) bound to exactly the expected address; the duplicate
//! shares the socket, so `setsockopt` on it changes the listener, and closing the duplicate
//! leaves the listener open.
//!
//! Needs Linux 5.6+ (pidfd_getfd). Where it is missing or forbidden (a seccomp profile), the
//! caller logs a warning and runs without it; everything still works, QoS 1 is just slower.

use std::io;
use std::net::SocketAddr;

/// Outcome of one attempt to set TCP_NODELAY on the listener at an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodelayOutcome {
    /// Set, and read back as set.
    Set,
    /// No listening socket bound to the address yet (the listener thread has not bound it).
    NotListeningYet,
}

/// Finds this process's listening socket bound to `addr` and sets TCP_NODELAY on it.
#[cfg(target_os = "linux")]
pub(crate) fn set_on_listener(addr: SocketAddr) -> io::Result<NodelayOutcome> {
    use rustix::net::{getsockname, sockopt};
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

    let pidfd = pidfd_open(getpid(), PidfdFlags::empty())?;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        // Descriptors come and go while we scan (other threads accept and close): a vanished
        // entry is skipped, not an error.
        let Ok(entry) = entry else { continue };
        let Some(fd_number) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .map(|target| target.to_string_lossy().starts_with("socket:["))
            .unwrap_or(false);
        if !is_socket {
            continue;
        }
        let fd = match pidfd_getfd(&pidfd, fd_number, PidfdGetfdFlags::empty()) {
            Ok(fd) => fd,
            // Closed since we listed it.
            Err(rustix::io::Errno::BADF) => continue,
            // ENOSYS (kernel < 5.6), EPERM (seccomp): no way to do it here.
            Err(errno) => return Err(errno.into()),
        };
        if !sockopt::socket_acceptconn(&fd).unwrap_or(false) {
            continue;
        }
        let bound = getsockname(&fd)
            .ok()
            .and_then(|name| SocketAddr::try_from(name).ok());
        if bound != Some(addr) {
            continue;
        }
        sockopt::set_tcp_nodelay(&fd, true)?;
        if !sockopt::tcp_nodelay(&fd)? {
            return Err(io::Error::other(
                "TCP_NODELAY did not stick on the listener",
            ));
        }
        return Ok(NodelayOutcome::Set);
    }
    Ok(NodelayOutcome::NotListeningYet)
}

/// Only Linux copies TCP_NODELAY from a listener to accepted sockets and has pidfd_getfd.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_on_listener(_addr: SocketAddr) -> io::Result<NodelayOutcome> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "setting TCP_NODELAY on rumqttd's listener is only implemented on Linux",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn sets_nodelay_on_our_listener_and_inherits_to_accepted_sockets() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        assert!(!rustix::net::sockopt::tcp_nodelay(listener.as_fd()).expect("getsockopt"));

        assert_eq!(
            set_on_listener(addr).expect("pidfd_getfd works on this kernel"),
            NodelayOutcome::Set
        );
        assert!(rustix::net::sockopt::tcp_nodelay(listener.as_fd()).expect("getsockopt"));

        // The reason for all this: Linux copies the flag to every accepted socket.
        let _client = std::net::TcpStream::connect(addr).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        assert!(accepted.nodelay().expect("getsockopt on accepted"));
    }

    #[test]
    fn reports_not_listening_for_an_address_nobody_listens_on() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        drop(listener);
        assert_eq!(
            set_on_listener(addr).expect("scan works"),
            NodelayOutcome::NotListeningYet
        );
    }
}
