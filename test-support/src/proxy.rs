//! A killable TCP proxy in front of a broker: killing it closes every proxied connection and
//! the listening socket, which is what an agent sees when its node or network dies (an
//! embedded rumqttd cannot be stopped, and a killed node takes its state with it).

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The proxy; killed when dropped too.
pub struct Proxy {
    /// Where agents connect.
    pub port: u16,
    /// Owns the listener and, through a `JoinSet`, every connection.
    task: JoinHandle<()>,
}

impl Proxy {
    /// Proxies 127.0.0.1:(new port) to 127.0.0.1:`upstream`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener
            .local_addr()
            .expect("a bound socket has an address")
            .port();
        let task = tokio::spawn(async move {
            // Dropped with the task: aborts every connection and closes its sockets.
            let mut connections = JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                while connections.try_join_next().is_some() {}
                connections.spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        Proxy { port, task }
    }

    /// Closes the listener and every connection.
    pub fn kill(&self) {
        self.task.abort();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
