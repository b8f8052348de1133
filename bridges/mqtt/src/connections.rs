//! How many MQTT clients are connected to the embedded broker, counted from the kernel's
//! socket table.
//!
//! rumqttd 0.20 counts connections only in its router meters, which the router sends when a
//! timer asks (`Event::SendMeters`); that timer exists only inside `Broker::start`, and the
//! event type is private, so the router this crate assembles itself (for TCP_NODELAY and
//! the local link's wake-ups) never reports them. The kernel knows: every accepted client is an
//! ESTABLISHED socket whose local port is a listener's. Linux only (`/proc/net/tcp{,6}`);
//! elsewhere the count is unknown.

/// ESTABLISHED in the `st` column of `/proc/net/tcp`.
const ESTABLISHED: &str = "01";

/// Established TCP connections whose local port is one of `ports`: the clients of listeners
/// on those ports. `None` when the socket tables cannot be read (not Linux).
pub(crate) fn established_on(ports: &[u16]) -> Option<u64> {
    let mut read_any = false;
    let mut total = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            read_any = true;
            total += count(&text, ports);
        }
    }
    read_any.then_some(total)
}

/// Counts the rows of one socket table (the `/proc/net/tcp` format: a header line, then
/// `sl local_address rem_address st ...`, addresses as `HEXIP:HEXPORT`).
fn count(table: &str, ports: &[u16]) -> u64 {
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let mut fields = line.split_whitespace();
            let (Some(_), Some(local), Some(_), Some(state)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return false;
            };
            state == ESTABLISHED
                && local
                    .rsplit_once(':')
                    .and_then(|(_, port)| u16::from_str_radix(port, 16).ok())
                    .is_some_and(|port| ports.contains(&port))
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:075B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1066 1
   1: 0100007F:075B 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 1067 1
   2: 0100007F:075B 0100007F:A1B3 01 00000000:00000000 00:00000000 00000000     0        0 1068 1
   3: 0100007F:A1B2 0100007F:075B 01 00000000:00000000 00:00000000 00000000     0        0 1069 1
   4: 0100007F:075B 0100007F:A1B4 06 00000000:00000000 00:00000000 00000000     0        0 1070 1
";

    #[test]
    fn counts_established_sockets_on_the_listening_port_only() {
        // Port 0x075B = 1883: two established clients; the listener itself (0A), a socket in
        // TIME_WAIT (06) and the clients' own ends (local port A1B2) do not count.
        assert_eq!(count(TABLE, &[1883]), 2);
        assert_eq!(count(TABLE, &[1884]), 0);
        assert_eq!(count("", &[1883]), 0);
    }

    #[test]
    fn this_process_sees_its_own_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let _server = listener.accept().expect("accept");
        if let Some(count) = established_on(&[port]) {
            assert_eq!(count, 1);
        }
    }
}
