//! [`PeerIdentity`]: who a verified certificate names.

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::TlsError;

/// The names a (verified) peer certificate carries. Read only after rustls verified the chain:
/// a name here is as trustworthy as the CA that signed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The subject's common name (the first CN), if it has one: an agent's id on the agent
    /// endpoint.
    pub common_name: Option<String>,
    /// The subject alternative names of DNS type, in order: a member's name on the peer port.
    pub dns_names: Vec<String>,
}

impl PeerIdentity {
    /// The names of one DER certificate.
    pub fn from_der(der: &CertificateDer<'_>) -> Result<PeerIdentity, TlsError> {
        let (_, certificate) =
            X509Certificate::from_der(der.as_ref()).map_err(|error| TlsError::Certificate {
                reason: error.to_string(),
            })?;
        let common_name = certificate
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_string);
        let dns_names = certificate
            .subject_alternative_name()
            .map_err(|error| TlsError::Certificate {
                reason: error.to_string(),
            })?
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|name| match name {
                        GeneralName::DNSName(dns) => Some((*dns).to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(PeerIdentity {
            common_name,
            dns_names,
        })
    }

    /// The names of the first (leaf) certificate of the PEM file `path`: what a client's own
    /// certificate will tell the server (the CLI takes its CN as its client id).
    pub fn from_pem_file(path: &std::path::Path) -> Result<PeerIdentity, TlsError> {
        let certificates = crate::pem::certificates(path, "certificate")?;
        PeerIdentity::from_der(&certificates[0])
    }

    /// The identity of a connection's verified peer (its leaf certificate), or `None` when the
    /// peer presented no certificate.
    pub fn of(connection: &rustls::CommonState) -> Option<PeerIdentity> {
        let leaf = connection.peer_certificates()?.first()?;
        PeerIdentity::from_der(leaf).ok()
    }

    /// Whether the certificate names `name`, as its CN or one of its SAN DNS names.
    pub fn names(&self, name: &str) -> bool {
        self.common_name.as_deref() == Some(name) || self.dns_names.iter().any(|dns| dns == name)
    }
}
