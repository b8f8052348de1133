//! Client configs: trust the operator's CA (not the system roots: Hivekeeper's servers carry
//! certificates of the deployment's own CA), optionally presenting a client certificate.

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;

use crate::{CertKey, TlsError, pem, provider};

/// A client config trusting the CAs of `ca`, presenting `cert_key` when given (mutual TLS).
pub fn client_config(ca: &Path, cert_key: Option<&CertKey>) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = pem::root_store(ca)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Config {
            reason: error.to_string(),
        })?
        .with_root_certificates(roots);
    let config = match cert_key {
        None => builder.with_no_client_auth(),
        Some(cert_key) => {
            let chain = pem::certificates(&cert_key.cert, "certificate")?;
            let key = pem::private_key(&cert_key.key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| TlsError::CertKey {
                    cert: cert_key.cert.clone(),
                    key: cert_key.key.clone(),
                    reason: error.to_string(),
                })?
        }
    };
    Ok(Arc::new(config))
}

/// The name a client checks the server's certificate against: a DNS name (a SAN DNS entry must
/// match it) or an IP address (a SAN IP entry must).
pub fn server_name(name: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(name.to_string()).map_err(|error| TlsError::ServerName {
        name: name.to_string(),
        reason: error.to_string(),
    })
}
