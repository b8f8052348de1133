//! The credentials hook: where a CONNECT's identity is checked (DESIGN.md §8).
//!
//! With authentication off (no [`Authenticator`] given to [`Transport::start_with`]) every
//! well-formed CONNECT whose client id is a valid agent id is accepted, as before. With it on,
//! the client id is the agent id and the connection must prove it, one of two ways:
//! - a verified client certificate whose CN is the client id: authenticated by the
//!   certificate, no password needed (its role is its account's, `agent` without one);
//! - username = the client id and password = the account's secret, checked by the node
//!   against its own replica ([`Authenticator::authenticate`]; the service gives the
//!   transport the node's implementation).
//!
//! A certificate naming someone else is refused "not authorized" (3.1.1 0x05, 5.0 0x87),
//! with authentication on or off: under mutual TLS the certificate is the identity. Anything
//! else (anonymous, another username, a wrong secret, an unknown agent) is refused with "bad
//! username or password" (3.1.1 0x04, 5.0 0x86), and the reason goes to the server's debug
//! log only. So a takeover by client id needs the victim's secret or certificate. A node that
//! cannot read its accounts answers "server unavailable" (3.1.1 0x03, 5.0 0x88): clients take
//! the credential refusals as final and retry this one.
//!
//! [`Transport::start_with`]: crate::Transport::start_with

use std::future::Future;
use std::pin::Pin;

use hivekeeper_protocol::Role;
use tracing::debug;

use super::codec::Refusal;

/// What the endpoint asks about a connecting agent. The service implements it with the node
/// (which checks against its own replica); the transport never reads accounts itself.
pub trait Authenticator: Send + Sync + 'static {
    /// Checks `secret` for `agent`; its role when it matches.
    fn authenticate<'a>(
        &'a self,
        agent: &'a str,
        secret: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Role, AuthRefused>> + Send + 'a>>;

    /// The role of an agent proven some other way (a client certificate): its account's,
    /// `agent` when it has none.
    fn role_of(&self, agent: &str) -> Role;
}

/// Why an [`Authenticator`] refused a secret, with the authenticator's own error for the
/// endpoint's debug log. The two kinds get different CONNACKs: a client gives up on wrong
/// credentials, and retries a server that could not check them.
#[derive(Debug, thiserror::Error)]
pub enum AuthRefused {
    /// No such account, or a wrong secret: "bad username or password", final.
    #[error("{0}")]
    Credentials(Box<dyn std::error::Error + Send + Sync>),
    /// The accounts could not be read (the node is not serving): "server unavailable",
    /// which a client retries.
    #[error("{0}")]
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
}

/// What the hook sees of a CONNECT.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Credentials<'a> {
    /// The client id, already validated as an agent id.
    pub(crate) agent: &'a str,
    /// The username, if one was sent.
    pub(crate) username: Option<&'a str>,
    /// The password, if one was sent.
    pub(crate) password: Option<&'a str>,
    /// The CN of the client certificate the TLS listener verified, if any (`None` on a
    /// plain-TCP listener).
    pub(crate) certificate_cn: Option<&'a str>,
}

/// Accepts or refuses a connection's credentials (module doc); on acceptance, the agent's role
/// (`None` with authentication off: every client may do everything).
pub(crate) async fn check(
    authenticator: Option<&dyn Authenticator>,
    credentials: Credentials<'_>,
) -> Result<Option<Role>, Refusal> {
    let agent = credentials.agent;
    // A verified certificate is an identity with or without accounts: it must name the client.
    if let Some(cn) = credentials.certificate_cn
        && cn != agent
    {
        debug!(
            agent,
            cn, "CONNECT refused: the certificate names another agent"
        );
        return Err(Refusal::NotAuthorized);
    }
    let Some(authenticator) = authenticator else {
        return Ok(None);
    };
    if credentials.certificate_cn.is_some() {
        return Ok(Some(authenticator.role_of(agent)));
    }
    let (Some(username), Some(password)) = (credentials.username, credentials.password) else {
        debug!(agent, "CONNECT refused: no username and password");
        return Err(Refusal::BadCredentials);
    };
    if username != agent {
        debug!(
            agent,
            username, "CONNECT refused: the username is not the client id"
        );
        return Err(Refusal::BadCredentials);
    }
    authenticator
        .authenticate(agent, password)
        .await
        .map(Some)
        .map_err(|error| {
            debug!(agent, %error, "CONNECT refused");
            match error {
                AuthRefused::Credentials(_) => Refusal::BadCredentials,
                AuthRefused::Unavailable(_) => Refusal::Unavailable,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Knows one agent, `a`, with secret `s` and the observer role.
    struct One;

    impl Authenticator for One {
        fn authenticate<'a>(
            &'a self,
            agent: &'a str,
            secret: &'a str,
        ) -> Pin<Box<dyn Future<Output = Result<Role, AuthRefused>> + Send + 'a>> {
            Box::pin(async move {
                match (agent, secret) {
                    ("a", "s") => Ok(Role::Observer),
                    ("u", _) => Err(AuthRefused::Unavailable("no state machine".into())),
                    _ => Err(AuthRefused::Credentials(
                        "no account a with that secret".into(),
                    )),
                }
            })
        }

        fn role_of(&self, agent: &str) -> Role {
            if agent == "a" {
                Role::Observer
            } else {
                Role::Agent
            }
        }
    }

    fn credentials<'a>(
        agent: &'a str,
        username: Option<&'a str>,
        password: Option<&'a str>,
        certificate_cn: Option<&'a str>,
    ) -> Credentials<'a> {
        Credentials {
            agent,
            username,
            password,
            certificate_cn,
        }
    }

    #[tokio::test]
    async fn each_way_in_and_each_refusal() {
        let one: &dyn Authenticator = &One;
        let cases = [
            (
                credentials("a", Some("a"), Some("s"), None),
                Ok(Some(Role::Observer)),
            ),
            (
                credentials("a", None, None, None),
                Err(Refusal::BadCredentials),
            ),
            (
                credentials("a", Some("a"), Some("x"), None),
                Err(Refusal::BadCredentials),
            ),
            (
                credentials("a", Some("b"), Some("s"), None),
                Err(Refusal::BadCredentials),
            ),
            (
                credentials("b", Some("b"), Some("s"), None),
                Err(Refusal::BadCredentials),
            ),
            (
                credentials("a", None, None, Some("a")),
                Ok(Some(Role::Observer)),
            ),
            (
                credentials("c", None, None, Some("c")),
                Ok(Some(Role::Agent)),
            ),
            (
                credentials("a", Some("a"), Some("s"), Some("b")),
                Err(Refusal::NotAuthorized),
            ),
            (
                credentials("u", Some("u"), Some("s"), None),
                Err(Refusal::Unavailable),
            ),
        ];
        for (credentials, expected) in cases {
            assert_eq!(
                check(Some(one), credentials).await,
                expected,
                "{credentials:?}"
            );
        }
        assert_eq!(
            check(None, credentials("a", None, None, None)).await,
            Ok(None),
            "authentication off"
        );
        assert_eq!(
            check(None, credentials("a", None, None, Some("b"))).await,
            Err(Refusal::NotAuthorized),
            "authentication off: a certificate must still name the client"
        );
    }
}
