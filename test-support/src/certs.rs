//! [`TestCerts`]: development certificates for a test, made by the same generator as
//! `hivekeeper certs dev`, in a temporary directory removed when the value drops.

use std::path::PathBuf;

use hivekeeper_tls::CertKey;
use hivekeeper_tls::dev::DevCerts;

/// A CA, a server pair (localhost, 127.0.0.1, ::1), and client and peer pairs by name.
pub struct TestCerts {
    /// Holds the files; removed on drop.
    dir: tempfile::TempDir,
}

impl TestCerts {
    /// Generates a fresh CA and its certificates: `peer-<member>` for each of `members`,
    /// `client-<name>` for each of `clients`. Two calls make two unrelated CAs.
    pub fn new(members: &[&str], clients: &[&str]) -> TestCerts {
        let dir = tempfile::tempdir().expect("a temporary directory for test certificates");
        DevCerts {
            out: dir.path().to_path_buf(),
            members: members.iter().map(|name| name.to_string()).collect(),
            clients: clients.iter().map(|name| name.to_string()).collect(),
            force: false,
        }
        .write()
        .expect("the development certificates are generated");
        TestCerts { dir }
    }

    /// A file of the directory (`ca.crt`, `client-a.key`).
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// The agent endpoint's certificate and key.
    pub fn server(&self) -> CertKey {
        self.pair("server")
    }

    /// Client `name`'s certificate and key (CN = `name`).
    pub fn client(&self, name: &str) -> CertKey {
        self.pair(&format!("client-{name}"))
    }

    /// Member `name`'s peer certificate and key.
    pub fn peer(&self, name: &str) -> CertKey {
        self.pair(&format!("peer-{name}"))
    }

    fn pair(&self, stem: &str) -> CertKey {
        CertKey {
            cert: self.path(&format!("{stem}.crt")),
            key: self.path(&format!("{stem}.key")),
        }
    }
}
