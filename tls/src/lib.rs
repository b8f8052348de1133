//! # hivekeeper-tls: one place for Hivekeeper's TLS configuration
//!
//! The agent endpoint, the peer port, the SDK and the CLI all speak TLS through rustls with the
//! `ring` provider. This crate turns the operator's PEM files into rustls configs, so that every
//! one of them reads the files the same way and fails with the same, precise error
//! ([`TlsError`] names the file and what is wrong with it), and it reads who a verified peer
//! certificate names ([`PeerIdentity`]: the subject CN and the SAN DNS names).
//!
//! ```text
//!  cert.pem + key.pem [+ client CA] ──▶ server_config ──▶ ServerConfig ──▶ TlsAcceptor (endpoint)
//!  cert.pem + key.pem + peer CA + PeerPolicy ─▶ peer_server_config ──▶ (peer port: strangers
//!                                                      are refused inside the handshake)
//!  CA [+ cert.pem + key.pem] ──▶ client_config ──▶ ClientConfig ──▶ TlsConnector / rumqttc
//!  verified connection ──▶ PeerIdentity::of(&CommonState) ──▶ CN, SAN DNS names
//! ```
//!
//! No certificate is generated here (that is `hivekeeper certs dev`, in the binary), so an agent
//! embedding the SDK compiles no certificate generator.
//!
//! # Layout
//! - `pem.rs`: reading certificates and keys from PEM files.
//! - `server.rs`: [`server_config`] and [`peer_server_config`] with its [`PeerPolicy`].
//! - `client.rs`: [`client_config`] and [`server_name`].
//! - `identity.rs`: [`PeerIdentity`].
//! - `error.rs`: [`TlsError`].
//! - `dev.rs` (feature `dev-certs`, which brings rcgen): `dev::DevCerts`, the development
//!   certificates of `hivekeeper certs dev` and of the tests.

mod client;
#[cfg(feature = "dev-certs")]
pub mod dev;
mod error;
mod identity;
mod pem;
mod server;

use std::path::PathBuf;
use std::sync::Arc;

pub use client::{client_config, server_name};
pub use error::TlsError;
pub use identity::PeerIdentity;
pub use server::{PeerPolicy, peer_server_config, server_config};

/// rustls and its tokio adapter, re-exported so users name the same versions as this crate.
pub use rustls;
pub use tokio_rustls;

/// A certificate chain and its private key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertKey {
    /// The certificate chain, leaf first (a `CERTIFICATE` block each).
    pub cert: PathBuf,
    /// The private key of the leaf (PKCS#8, PKCS#1 or SEC1 PEM).
    pub key: PathBuf,
}

/// The one crypto provider every config is built with: ring (aws-lc-rs, rustls' default,
/// needs cmake and a C build). Explicit per config, so nothing depends on a process-wide
/// default being installed first.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
