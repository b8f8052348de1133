//! The shared TLS configuration end to end over an in-memory duplex: development certificates,
//! server and client configs, mutual TLS, the peer policy, and the errors for bad files.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use hivekeeper_test_support::{TestCerts, within};
use hivekeeper_tls::dev::{CERT_MODE, DevCerts, KEY_MODE};
use hivekeeper_tls::tokio_rustls::{TlsAcceptor, TlsConnector};
use hivekeeper_tls::{
    CertKey, PeerIdentity, PeerPolicy, TlsError, client_config, peer_server_config, server_config,
    server_name,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Handshakes a client and a server over a duplex and echoes one byte; returns the identity
/// the server saw, or the client's and the server's errors.
async fn handshake(
    server: Arc<hivekeeper_tls::rustls::ServerConfig>,
    client: Arc<hivekeeper_tls::rustls::ClientConfig>,
    name: &str,
) -> Result<Option<PeerIdentity>, (String, String)> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server_side = async move {
        let mut stream = TlsAcceptor::from(server)
            .accept(server_io)
            .await
            .map_err(|error| error.to_string())?;
        let identity = PeerIdentity::of(stream.get_ref().1);
        let mut byte = [0_u8; 1];
        stream
            .read_exact(&mut byte)
            .await
            .map_err(|error| error.to_string())?;
        stream
            .write_all(&byte)
            .await
            .map_err(|error| error.to_string())?;
        stream.flush().await.map_err(|error| error.to_string())?;
        Ok::<_, String>(identity)
    };
    let name = server_name(name).expect("a valid server name");
    let client_side = async move {
        let mut stream = TlsConnector::from(client)
            .connect(name, client_io)
            .await
            .map_err(|error| error.to_string())?;
        stream
            .write_all(b"x")
            .await
            .map_err(|error| error.to_string())?;
        let mut byte = [0_u8; 1];
        stream
            .read_exact(&mut byte)
            .await
            .map_err(|error| error.to_string())?;
        Ok::<_, String>(byte)
    };
    let (server, client) = within(10, "the TLS handshake and echo", async {
        tokio::join!(server_side, client_side)
    })
    .await;
    match (server, client) {
        (Ok(identity), Ok(byte)) => {
            assert_eq!(&byte, b"x");
            Ok(identity)
        }
        (server, client) => Err((
            client.err().unwrap_or_default(),
            server.err().unwrap_or_default(),
        )),
    }
}

#[tokio::test]
async fn a_server_certificate_verifies_for_localhost_and_the_loopback_addresses() {
    let certs = TestCerts::new(&[], &[]);
    let server = server_config(&certs.server(), None).expect("server config");
    let client = client_config(&certs.ca(), None).expect("client config");
    for name in ["localhost", "127.0.0.1", "::1"] {
        let identity = handshake(server.clone(), client.clone(), name)
            .await
            .unwrap_or_else(|error| panic!("{name}: {error:?}"));
        assert_eq!(identity, None, "no client certificate asked for");
    }
    let refused = handshake(server, client, "example.com").await;
    let (client_error, _) = refused.expect_err("a name the certificate does not carry");
    assert!(
        client_error.contains("certificate not valid for name"),
        "{client_error}"
    );
}

#[tokio::test]
async fn mutual_tls_gives_the_client_certificates_cn_and_refuses_no_or_foreign_certificates() {
    let certs = TestCerts::new(&[], &["drone-1"]);
    let server = server_config(&certs.server(), Some(&certs.ca())).expect("server config");
    let client = client_config(&certs.ca(), Some(&certs.client("drone-1"))).expect("client");
    let identity = handshake(server.clone(), client, "localhost")
        .await
        .expect("a client with a certificate of the CA");
    assert_eq!(
        identity,
        Some(PeerIdentity {
            common_name: Some("drone-1".into()),
            dns_names: Vec::new(),
        })
    );

    let anonymous = client_config(&certs.ca(), None).expect("client without a certificate");
    let (_, server_error) = handshake(server.clone(), anonymous, "localhost")
        .await
        .expect_err("no client certificate");
    assert!(
        server_error.contains("peer sent no certificates"),
        "{server_error}"
    );

    let other = TestCerts::new(&[], &["drone-1"]);
    let foreign = client_config(&certs.ca(), Some(&other.client("drone-1"))).expect("client");
    let (_, server_error) = handshake(server, foreign, "localhost")
        .await
        .expect_err("a certificate of another CA");
    // Both CAs carry the same subject: the chain is found and its signature refused.
    assert_eq!(server_error, "invalid peer certificate: BadSignature");
}

/// Admits the names in its list.
#[derive(Debug)]
struct Members(Vec<&'static str>);

impl PeerPolicy for Members {
    fn admits(&self, identity: &PeerIdentity) -> bool {
        self.0.iter().any(|name| identity.names(name))
    }
}

#[tokio::test]
async fn the_peer_policy_admits_members_and_refuses_a_non_member_inside_the_handshake() {
    let certs = TestCerts::new(&["n1", "n2", "n9"], &[]);
    let policy = Arc::new(Members(vec!["n1", "n2"]));
    let server = peer_server_config(&certs.peer("n1"), &certs.ca(), policy).expect("server");
    let n2 = client_config(&certs.ca(), Some(&certs.peer("n2"))).expect("n2");
    let identity = handshake(server.clone(), n2.clone(), "n1")
        .await
        .expect("a member");
    assert_eq!(
        identity,
        Some(PeerIdentity {
            common_name: Some("n2".into()),
            dns_names: vec!["n2".into(), "localhost".into()],
        })
    );
    // The dialler checks it reached the member it meant: n1's certificate does not name n2.
    let (client_error, _) = handshake(server.clone(), n2, "n2")
        .await
        .expect_err("n1's certificate dialled as n2");
    assert!(
        client_error.contains("certificate not valid for name"),
        "{client_error}"
    );

    let n9 = client_config(&certs.ca(), Some(&certs.peer("n9"))).expect("n9");
    let (_, server_error) = handshake(server, n9, "n1")
        .await
        .expect_err("a certificate of the CA naming a non-member");
    assert!(
        server_error.contains("ApplicationVerificationFailure"),
        "{server_error}"
    );
}

#[test]
fn dev_certs_are_written_with_key_modes_and_never_overwritten_without_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let request = DevCerts {
        out: dir.path().join("certs"),
        members: vec!["n1".into()],
        clients: vec!["admin".into()],
        force: false,
    };
    let written = request.write().expect("first run writes");
    let names: Vec<String> = written
        .iter()
        .map(|file| {
            let name = file.path.file_name().expect("a file name");
            name.to_string_lossy().into_owned()
        })
        .collect();
    assert_eq!(
        names,
        [
            "ca.crt",
            "ca.key",
            "server.crt",
            "server.key",
            "client-admin.crt",
            "client-admin.key",
            "peer-n1.crt",
            "peer-n1.key"
        ]
    );
    for file in &written {
        let mode = std::fs::metadata(&file.path)
            .expect("written")
            .permissions()
            .mode()
            & 0o777;
        let want = if file.private { KEY_MODE } else { CERT_MODE };
        assert_eq!(mode, want, "{}", file.path.display());
        assert_eq!(
            file.private,
            file.path.extension().is_some_and(|ext| ext == "key")
        );
    }
    let ca_before = std::fs::read(dir.path().join("certs/ca.crt")).expect("ca");
    match request.write() {
        Err(TlsError::Exists { path }) => assert_eq!(path, dir.path().join("certs/ca.crt")),
        other => panic!("expected Exists, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(dir.path().join("certs/ca.crt")).expect("ca"),
        ca_before,
        "a refused run changes nothing"
    );
    DevCerts {
        force: true,
        ..request.clone()
    }
    .write()
    .expect("--force overwrites");
    assert_ne!(
        std::fs::read(dir.path().join("certs/ca.crt")).expect("ca"),
        ca_before,
        "a new CA"
    );
    match (DevCerts {
        clients: vec!["../evil".into()],
        ..request
    })
    .write()
    {
        Err(TlsError::BadName { name }) => assert_eq!(name, "../evil"),
        other => panic!("expected BadName, got {other:?}"),
    }
}

#[test]
fn bad_files_are_named_in_the_error() {
    let certs = TestCerts::new(&[], &[]);
    let missing = certs.path("nope.crt");
    match server_config(
        &CertKey {
            cert: missing.clone(),
            key: certs.server().key,
        },
        None,
    ) {
        Err(TlsError::Read { what, path, .. }) => {
            assert_eq!((what, path), ("certificate", missing));
        }
        other => panic!("expected Read, got {other:?}"),
    }
    // A certificate where the key should be.
    match server_config(
        &CertKey {
            cert: certs.server().cert,
            key: certs.server().cert,
        },
        None,
    ) {
        Err(TlsError::Missing { what, path, block }) => {
            assert_eq!(
                (what, path, block),
                ("private key", certs.server().cert, "PRIVATE KEY")
            );
        }
        other => panic!("expected Missing, got {other:?}"),
    }
    // The CA's key does not match the server's certificate.
    match server_config(
        &CertKey {
            cert: certs.server().cert,
            key: certs.path("ca.key"),
        },
        None,
    ) {
        Err(TlsError::CertKey { cert, key, .. }) => {
            assert_eq!((cert, key), (certs.server().cert, certs.path("ca.key")));
        }
        other => panic!("expected CertKey, got {other:?}"),
    }
    match client_config(&certs.path("ca.key"), None) {
        Err(TlsError::Missing { what, block, .. }) => {
            assert_eq!((what, block), ("CA", "CERTIFICATE"))
        }
        other => panic!("expected Missing, got {other:?}"),
    }
}
