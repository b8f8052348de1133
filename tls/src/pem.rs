//! Reading certificates and keys from PEM files, with errors that name the file.

use std::path::Path;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

/// Every `CERTIFICATE` block of `path`, in order; at least one. `what` says what the file is
/// for, in errors.
pub(crate) fn certificates(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| pem_error(error, path, what, "CERTIFICATE"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| pem_error(error, path, what, "CERTIFICATE"))?;
    if certificates.is_empty() {
        return Err(TlsError::Missing {
            what,
            path: path.to_path_buf(),
            block: "CERTIFICATE",
        });
    }
    Ok(certificates)
}

/// The first private key of `path` (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|error| pem_error(error, path, "private key", "PRIVATE KEY"))
}

fn pem_error(error: pem::Error, path: &Path, what: &'static str, block: &'static str) -> TlsError {
    let path = path.to_path_buf();
    match error {
        pem::Error::Io(error) => TlsError::Read {
            what,
            path,
            reason: error.to_string(),
        },
        pem::Error::NoItemsFound => TlsError::Missing { what, path, block },
        other => TlsError::BadPem {
            what,
            path,
            reason: other.to_string(),
        },
    }
}

/// A root store of every certificate of the CA file `path`.
pub(crate) fn root_store(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for (index, certificate) in certificates(path, "CA")?.into_iter().enumerate() {
        roots.add(certificate).map_err(|error| TlsError::BadCa {
            path: path.to_path_buf(),
            index,
            reason: error.to_string(),
        })?;
    }
    Ok(roots)
}
