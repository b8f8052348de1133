//! Server configs: the agent endpoint's ([`server_config`], optionally requiring client
//! certificates) and the peer port's ([`peer_server_config`], which also asks a
//! [`PeerPolicy`] whether the verified certificate names a peer it accepts).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme,
};

use crate::{CertKey, PeerIdentity, TlsError, pem, provider};

/// Decides whether a client certificate that verified against the CA belongs to a peer this
/// server accepts. Asked inside the handshake, so a refused peer never gets to send a byte of
/// application data.
pub trait PeerPolicy: fmt::Debug + Send + Sync {
    /// `true` to accept the peer the certificate names.
    fn admits(&self, identity: &PeerIdentity) -> bool;
}

/// A server config presenting `cert_key`. With `client_ca`, every client must present a
/// certificate signed by that CA (mutual TLS); without, none is asked for.
pub fn server_config(
    cert_key: &CertKey,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let verifier = client_ca.map(client_verifier).transpose()?;
    build(cert_key, verifier)
}

/// The peer port's server config: presents `cert_key`, requires a client certificate signed
/// by `ca`, and accepts it only if `policy` admits the identity it names.
pub fn peer_server_config(
    cert_key: &CertKey,
    ca: &Path,
    policy: Arc<dyn PeerPolicy>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let inner = client_verifier(ca)?;
    build(cert_key, Some(Arc::new(PolicyVerifier { inner, policy })))
}

fn build(
    cert_key: &CertKey,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = pem::certificates(&cert_key.cert, "certificate")?;
    let key = pem::private_key(&cert_key.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Config {
            reason: error.to_string(),
        })?;
    let builder = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|error| TlsError::CertKey {
            cert: cert_key.cert.clone(),
            key: cert_key.key.clone(),
            reason: error.to_string(),
        })?;
    Ok(Arc::new(config))
}

/// A verifier that requires a client certificate chaining to a CA of `ca`.
fn client_verifier(ca: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let roots = pem::root_store(ca)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|error| TlsError::Verifier {
            path: ca.to_path_buf(),
            reason: error.to_string(),
        })
}

/// The WebPKI client verifier, then the policy on the verified certificate's names.
#[derive(Debug)]
struct PolicyVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    policy: Arc<dyn PeerPolicy>,
}

impl ClientCertVerifier for PolicyVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let identity = PeerIdentity::from_der(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self.policy.admits(&identity) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
