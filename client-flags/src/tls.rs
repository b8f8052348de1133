//! The TLS flags of every command that talks to the service as an MQTT client (`status`,
//! `inspect`, `ls`, `leases`, `revoke`, `member`, `agent`, `snapshot`, `bench`): the CA the service's certificate must
//! chain to, and optionally a client certificate for an endpoint with mutual TLS.

use std::path::PathBuf;

use hivekeeper_agent::AgentConfig;

use crate::FlagsError;

/// `--tls-ca`, `--tls-cert`, `--tls-key` (or `HIVEKEEPER_TLS_CA`, `_CERT`, `_KEY`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// PEM CA certificate the service's certificate must chain to: set, the brokers are
    /// reached over TLS and their certificates must name the host as given in --broker(s).
    #[arg(long, value_name = "FILE", env = "HIVEKEEPER_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate, for an agent endpoint with mutual TLS (`serve
    /// --mqtt-client-ca`). Its CN becomes the client id (the endpoint requires them equal).
    #[arg(
        long,
        value_name = "FILE",
        env = "HIVEKEEPER_TLS_CERT",
        requires = "tls_key",
        requires = "tls_ca"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        env = "HIVEKEEPER_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// `config` with these TLS settings. With a client certificate, the agent id becomes its
    /// CN, which the endpoint requires as the client id.
    pub fn apply(&self, mut config: AgentConfig) -> Result<AgentConfig, FlagsError> {
        config.tls_ca = self.tls_ca.clone();
        config.tls_cert = self.tls_cert.clone();
        config.tls_key = self.tls_key.clone();
        if let Some(cert) = &self.tls_cert {
            let identity = hivekeeper_tls::PeerIdentity::from_pem_file(cert).map_err(|source| {
                FlagsError::Certificate {
                    path: cert.clone(),
                    source,
                }
            })?;
            config.agent_id = identity
                .common_name
                .ok_or_else(|| FlagsError::NoCommonName { path: cert.clone() })?;
        }
        Ok(config)
    }
}
