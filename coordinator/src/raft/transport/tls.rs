//! Mutual TLS on the peer port: both ends present a certificate of the cluster's peer CA.
//!
//! ```text
//!  dialler: TCP ─▶ TLS as client, server name = the member it means to reach (n2): the
//!           server's certificate must carry that name (SAN DNS) ─▶ Hello ...
//!  server:  TCP ─▶ TLS as server: the client's certificate must chain to the peer CA AND
//!           name (CN or SAN DNS) a member of the CURRENT configuration, checked inside the
//!           handshake (a stranger never gets to send a frame) ─▶ Hello, whose `from` must be
//!           the node the certificate names ─▶ frames
//! ```
//!
//! The current configuration is the membership this node's Raft knows now (a removed member
//! is refused from the next connection on). A node that has no membership yet (started with
//! `initial_cluster_state = existing`, waiting to be added) accepts any certificate of the
//! peer CA: it has no state to protect yet, the leader adding it must reach it, and the
//! operator's `initial_cluster` on a joiner need not list the members (only the joiner).
//! The peer CA must therefore sign member certificates only.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use hivekeeper_tls::tokio_rustls::{TlsAcceptor, TlsConnector};
use hivekeeper_tls::{CertKey, PeerIdentity, PeerPolicy, TlsError};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::raft::{NodeId, RaftHandle, node_id_for};

/// How long a peer's TLS handshake may take on the listening side (the dialler's whole dial,
/// handshake and hello included, is bounded by its own connect timeout).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// A byte stream to a peer: plain TCP, or TLS over it.
pub(crate) trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerIo for T {}

/// A peer stream of either kind.
pub(crate) type PeerStream = Box<dyn PeerIo>;

/// The peer port's certificate, key and CA (`serve --peer-tls-cert --peer-tls-key
/// --peer-ca`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTlsFiles {
    /// This member's certificate (CN and SAN DNS: its member name) and key.
    pub cert_key: CertKey,
    /// The CA every member's certificate is signed by.
    pub ca: std::path::PathBuf,
}

/// The dialling side: presents this member's certificate, checks the server's names the
/// member dialled.
#[derive(Clone)]
pub(crate) struct PeerConnector {
    connector: TlsConnector,
}

impl fmt::Debug for PeerConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerConnector")
    }
}

impl PeerConnector {
    /// Reads the files (errors name the file).
    pub(crate) fn new(files: &PeerTlsFiles) -> Result<PeerConnector, TlsError> {
        let config = hivekeeper_tls::client_config(&files.ca, Some(&files.cert_key))?;
        Ok(PeerConnector {
            connector: TlsConnector::from(config),
        })
    }

    /// The client side of the handshake with member `name`.
    pub(crate) async fn connect(
        &self,
        name: &str,
        stream: TcpStream,
    ) -> Result<PeerStream, PeerHandshakeError> {
        let server_name = hivekeeper_tls::server_name(name)?;
        let stream = self
            .connector
            .connect(server_name, stream)
            .await
            .map_err(|source| PeerHandshakeError::Handshake {
                member: name.to_string(),
                source,
            })?;
        Ok(Box::new(stream))
    }
}

/// Why a TLS handshake between members failed, for the log and the dialler's error.
#[derive(Debug, thiserror::Error)]
pub enum PeerHandshakeError {
    /// The member's name is not a valid TLS server name.
    #[error(transparent)]
    ServerName(#[from] TlsError),
    /// Dialling: the member refused the handshake, or its certificate was refused.
    #[error("TLS handshake with member {member:?}: {source}")]
    Handshake {
        /// The member dialled.
        member: String,
        /// The handshake's error.
        source: std::io::Error,
    },
    /// Listening: the peer sent no handshake in time (a plaintext or silent client).
    #[error("no TLS handshake within {0:?}")]
    Silent(Duration),
    /// Listening: the handshake failed (a stranger's certificate, a plaintext client).
    #[error("TLS handshake refused: {0}")]
    Refused(std::io::Error),
    /// Listening: the peer presented no certificate.
    #[error("no client certificate")]
    NoClientCertificate,
}

/// The listening side: presents this member's certificate, admits only current members.
#[derive(Clone)]
pub struct PeerAcceptor {
    acceptor: TlsAcceptor,
}

impl PeerAcceptor {
    /// Reads the files (errors name the file); peers are checked against `raft`'s membership.
    pub fn new(files: &PeerTlsFiles, raft: Arc<RaftHandle>) -> Result<PeerAcceptor, TlsError> {
        let policy = Arc::new(CurrentMembers { raft });
        let config = hivekeeper_tls::peer_server_config(&files.cert_key, &files.ca, policy)?;
        Ok(PeerAcceptor {
            acceptor: TlsAcceptor::from(config),
        })
    }

    /// The server side of the handshake: the stream and who the verified certificate names.
    /// `Err` (with the reason, for the log) for a stranger, a plaintext or silent client.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
    ) -> Result<(PeerStream, PeerIdentity), PeerHandshakeError> {
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream))
            .await
            .map_err(|_| PeerHandshakeError::Silent(HANDSHAKE_TIMEOUT))?
            .map_err(PeerHandshakeError::Refused)?;
        let identity =
            PeerIdentity::of(stream.get_ref().1).ok_or(PeerHandshakeError::NoClientCertificate)?;
        Ok((Box::new(stream), identity))
    }
}

/// Whether a verified peer certificate names node `id` (its CN or a SAN DNS name is the name
/// the id derives from): the dialler's hello must come from the member its certificate names.
pub(crate) fn names_node(identity: &PeerIdentity, id: NodeId) -> bool {
    identity
        .common_name
        .iter()
        .chain(&identity.dns_names)
        .any(|name| node_id_for(name) == id)
}

/// The policy: a certificate must name a member of the current configuration (any
/// certificate of the CA while this node has none yet: module doc).
struct CurrentMembers {
    raft: Arc<RaftHandle>,
}

impl fmt::Debug for CurrentMembers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CurrentMembers").finish_non_exhaustive()
    }
}

impl PeerPolicy for CurrentMembers {
    fn admits(&self, identity: &PeerIdentity) -> bool {
        let current: Vec<String> = self
            .raft
            .members()
            .into_iter()
            .map(|info| info.member.name)
            .collect();
        if current.is_empty() {
            return true;
        }
        let admitted = current.iter().any(|name| identity.names(name));
        if !admitted {
            tracing::warn!(
                common_name = ?identity.common_name,
                dns_names = ?identity.dns_names,
                members = ?current,
                "refused a peer: its certificate names no member of the current configuration"
            );
        }
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_names_the_node_of_its_cn_or_of_a_san_dns_name() {
        let identity = PeerIdentity {
            common_name: Some("n1".into()),
            dns_names: vec!["n2".into(), "localhost".into()],
        };
        assert!(names_node(&identity, node_id_for("n1")));
        assert!(names_node(&identity, node_id_for("n2")));
        assert!(!names_node(&identity, node_id_for("n3")));
        assert!(!names_node(&PeerIdentity::default(), node_id_for("n1")));
    }
}
