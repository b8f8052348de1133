//! Development certificates (`hivekeeper certs dev`): a CA, a server certificate for the agent
//! endpoint, client certificates for agents and operators, and peer certificates for members,
//! so TLS can be tried in a minute. Not for production: the CA key sits next to the
//! certificates and nothing expires before the year 4096 (rcgen's default validity).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use crate::TlsError;

/// File mode of a private key: the owner reads and writes it, nobody else.
pub const KEY_MODE: u32 = 0o600;
/// File mode of a certificate: public.
pub const CERT_MODE: u32 = 0o644;

/// What to generate and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevCerts {
    /// The directory written into (created if missing).
    pub out: PathBuf,
    /// Member names (`n1`, `n2`, ...): one `peer-<name>` pair each, CN and SAN DNS the name.
    pub members: Vec<String>,
    /// Client names (agent ids, `admin`): one `client-<name>` pair each, CN the name.
    pub clients: Vec<String>,
    /// Overwrite files that exist; without it, any existing file refuses the whole run before
    /// anything is written.
    pub force: bool,
}

/// One file written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Its path.
    pub path: PathBuf,
    /// Whether it holds a private key (mode [`KEY_MODE`]) rather than a certificate.
    pub private: bool,
}

/// One certificate and key to write.
struct Pair {
    stem: String,
    cert_pem: String,
    key_pem: String,
}

impl DevCerts {
    /// Generates everything, checks no file exists (unless `force`), then writes: `ca.crt`,
    /// `ca.key`, `server.crt`/`.key` (SANs localhost, 127.0.0.1, ::1), `client-<name>` and
    /// `peer-<member>` pairs. Returns the files in the order written.
    pub fn write(&self) -> Result<Vec<Written>, TlsError> {
        for name in self.members.iter().chain(&self.clients) {
            check_name(name)?;
        }
        let ca_key = generate_key("ca")?;
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Hivekeeper development CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(|error| generate_error("ca", &error))?;
        let mut pairs = vec![Pair {
            stem: "ca".into(),
            cert_pem: ca_cert.pem(),
            key_pem: ca_key.serialize_pem(),
        }];
        let issuer = Issuer::new(ca_params, ca_key);
        let server_sans = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
        pairs.push(leaf("server", "localhost", server_sans, &issuer)?);
        for client in &self.clients {
            pairs.push(leaf(
                &format!("client-{client}"),
                client,
                Vec::new(),
                &issuer,
            )?);
        }
        for member in &self.members {
            let sans = vec![member.clone(), "localhost".into(), "127.0.0.1".into()];
            pairs.push(leaf(&format!("peer-{member}"), member, sans, &issuer)?);
        }
        std::fs::create_dir_all(&self.out).map_err(|error| TlsError::Write {
            path: self.out.clone(),
            reason: error.to_string(),
        })?;
        let files: Vec<(PathBuf, &str, bool)> = pairs
            .iter()
            .flat_map(|pair| {
                [
                    (
                        self.out.join(format!("{}.crt", pair.stem)),
                        pair.cert_pem.as_str(),
                        false,
                    ),
                    (
                        self.out.join(format!("{}.key", pair.stem)),
                        pair.key_pem.as_str(),
                        true,
                    ),
                ]
            })
            .collect();
        if !self.force
            && let Some((path, _, _)) = files.iter().find(|(path, _, _)| path.exists())
        {
            return Err(TlsError::Exists { path: path.clone() });
        }
        let mut written = Vec::with_capacity(files.len());
        for (path, pem, private) in files {
            write_file(
                &path,
                pem,
                if private { KEY_MODE } else { CERT_MODE },
                self.force,
            )?;
            written.push(Written { path, private });
        }
        Ok(written)
    }
}

/// A leaf certificate with common name `cn` and `sans`, signed by `issuer`.
fn leaf(
    stem: &str,
    cn: &str,
    sans: Vec<String>,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<Pair, TlsError> {
    let key = generate_key(stem)?;
    let mut params = CertificateParams::new(sans).map_err(|error| generate_error(stem, &error))?;
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|error| generate_error(stem, &error))?;
    Ok(Pair {
        stem: stem.to_string(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn generate_key(what: &str) -> Result<KeyPair, TlsError> {
    KeyPair::generate().map_err(|error| generate_error(what, &error))
}

fn generate_error(what: &str, error: &rcgen::Error) -> TlsError {
    TlsError::Generate {
        what: what.to_string(),
        reason: error.to_string(),
    }
}

/// A name becomes part of a file name and a certificate's CN/SAN: letters, digits, `-`, `_`
/// and `.`, not starting with a dot.
fn check_name(name: &str) -> Result<(), TlsError> {
    let fine = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fine {
        Ok(())
    } else {
        Err(TlsError::BadName {
            name: name.to_string(),
        })
    }
}

fn write_file(path: &Path, contents: &str, mode: u32, force: bool) -> Result<(), TlsError> {
    let write_error = |error: std::io::Error| TlsError::Write {
        path: path.to_path_buf(),
        reason: error.to_string(),
    };
    let mut options = OpenOptions::new();
    options.write(true).mode(mode);
    if force {
        options.create(true).truncate(true);
    } else {
        // Refuses a file that appeared since the check above.
        options.create_new(true);
    }
    let mut file = options.open(path).map_err(write_error)?;
    // An overwritten file keeps its old mode through `open`: set it.
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(write_error)?;
    file.write_all(contents.as_bytes()).map_err(write_error)?;
    file.sync_all().map_err(write_error)
}
