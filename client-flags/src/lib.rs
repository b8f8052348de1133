//! # hivekeeper-client-flags: the flags of the service's command-line clients
//!
//! Every `hivekeeper` command that talks to the service as an MQTT client (`status`,
//! `inspect`, `ls`, `leases`, `revoke`, `member`, `agent`, `snapshot` and `bench`) takes the
//! same credential and TLS flags and applies them to its SDK configuration the same way. A
//! crate of its own because two crates take them: the root binary's admin commands and
//! `hivekeeper-bench`.
//!
//! # Layout
//! - [`Login`]: `--user`, `--password-file` (or `HIVEKEEPER_USER`, `HIVEKEEPER_PASSWORD`).
//! - [`TlsArgs`]: `--tls-ca`, `--tls-cert`, `--tls-key` (or `HIVEKEEPER_TLS_CA`, `_CERT`,
//!   `_KEY`).
//! - [`FlagsError`]: why the flags could not be applied, in words a user can act on.
//!
//! ```text
//!  AgentConfig ─▶ Login::apply (client id = user, the secret) ─▶ TlsArgs::apply (CA,
//!  client certificate; client id = its CN) ─▶ Agent::connect
//! ```

mod login;
mod tls;

use std::path::PathBuf;

pub use login::Login;
pub use tls::TlsArgs;

/// Why the credential or TLS flags could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    /// A password came without a user to go with it.
    #[error("a password was given without --user (or HIVEKEEPER_USER)")]
    PasswordWithoutUser,
    /// A user came without a password.
    #[error("--user {user} needs --password-file FILE (or HIVEKEEPER_PASSWORD)")]
    NoPassword {
        /// The user.
        user: String,
    },
    /// The password (from the file or the environment) is empty once trimmed.
    #[error("the password for --user {user} is empty")]
    EmptyPassword {
        /// The user.
        user: String,
    },
    /// The password file could not be read.
    #[error("reading the password file {}", path.display())]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// The OS's reason.
        #[source]
        source: std::io::Error,
    },
    /// The client certificate could not be read or parsed.
    #[error("--tls-cert {}", path.display())]
    Certificate {
        /// The certificate file.
        path: PathBuf,
        /// Why it was refused.
        #[source]
        source: hivekeeper_tls::TlsError,
    },
    /// The client certificate names no CN, which the agent endpoint takes as the client id.
    #[error(
        "--tls-cert {}: the certificate has no CN, and the agent endpoint takes the CN as the \
         client id",
        path.display()
    )]
    NoCommonName {
        /// The certificate file.
        path: PathBuf,
    },
}
