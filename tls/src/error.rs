//! [`TlsError`], the one error type at this crate's boundary.

use std::path::PathBuf;

/// Why a TLS configuration could not be built; each variant names the file and what is wrong,
/// so an operator can fix it from the message alone.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read (missing, permissions).
    #[error("cannot read {what} file {path}: {reason}")]
    Read {
        /// What the file was meant to hold (`certificate`, `private key`, `CA`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        reason: String,
    },
    /// The file was read but holds no PEM block of the kind wanted.
    #[error("{path} holds no {what} (expected a PEM `-----BEGIN {block}-----` block)")]
    Missing {
        /// What the file was meant to hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM label looked for.
        block: &'static str,
    },
    /// The file's PEM is broken (a section without its end, bad base64).
    #[error("{what} file {path} is not valid PEM: {reason}")]
    BadPem {
        /// What the file was meant to hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A certificate of the CA file cannot be a trust anchor.
    #[error("CA file {path}: certificate {index} is not a usable CA certificate: {reason}")]
    BadCa {
        /// The file.
        path: PathBuf,
        /// Its position in the file, from 0.
        index: usize,
        /// What rustls said.
        reason: String,
    },
    /// rustls refused the certificate and key together (the key does not match the
    /// certificate, or a key type it does not support).
    #[error("certificate {cert} with key {key} refused: {reason}")]
    CertKey {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// The client-certificate verifier could not be built from the CA file.
    #[error("client CA {path} unusable: {reason}")]
    Verifier {
        /// The CA file.
        path: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// The name a client checks the server's certificate against is neither a DNS name nor an
    /// IP address.
    #[error("{name:?} cannot be a TLS server name: {reason}")]
    ServerName {
        /// The name as given.
        name: String,
        /// Why.
        reason: String,
    },
    /// A DER certificate could not be parsed for its names.
    #[error("certificate not parseable: {reason}")]
    Certificate {
        /// What the parser said.
        reason: String,
    },
    /// rustls refused the configuration itself (no protocol version in common with the
    /// provider; not expected with the defaults).
    #[error("TLS configuration refused: {reason}")]
    Config {
        /// What rustls said.
        reason: String,
    },
    /// `certs dev`: a file it would write exists (and `--force` was not given).
    #[error("{path} exists; nothing was written (pass --force to overwrite)")]
    Exists {
        /// The first existing file found.
        path: PathBuf,
    },
    /// `certs dev`: a file or directory could not be written.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        reason: String,
    },
    /// `certs dev`: rcgen failed to make a key or certificate.
    #[error("cannot generate {what}: {reason}")]
    Generate {
        /// Which pair (`ca`, `server`, `client-drone-1`).
        what: String,
        /// What rcgen said.
        reason: String,
    },
    /// `certs dev`: a member or client name unusable in a file name and a certificate.
    #[error(
        "{name:?} cannot name a certificate: use 1 to 64 letters, digits, `-`, `_` or `.`, not \
         starting with `.`"
    )]
    BadName {
        /// The name as given.
        name: String,
    },
}
