//! The credentials hook: where a CONNECT's username and password are checked.
//!
//! Today every well-formed CONNECT whose client id is a valid agent id is accepted, as with
//! the rumqttd broker this endpoint replaced. The security issue (DESIGN.md §8: username =
//! agent id + secret, or a client certificate) fills this in; the connection already turns a
//! refusal into the right CONNACK code for 3.1.1 and 5.0.

use super::codec::Refusal;

/// What the hook sees of a CONNECT.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Credentials<'a> {
    /// The client id, already validated as an agent id.
    pub(crate) agent: &'a str,
    /// The username, if one was sent.
    pub(crate) username: Option<&'a str>,
    /// The password, if one was sent.
    pub(crate) password: Option<&'a str>,
    /// The CN of the client certificate the TLS handshake verified (mutual TLS, `client_ca`);
    /// `None` without mutual TLS. The agent's identity: the client id must equal it.
    pub(crate) certificate_cn: Option<&'a str>,
}

/// Accepts or refuses a connection's credentials. A verified client certificate must name
/// the client id (else not authorized); the rest accepts all for now (module doc).
pub(crate) fn check(credentials: Credentials<'_>) -> Result<(), Refusal> {
    if let Some(cn) = credentials.certificate_cn
        && cn != credentials.agent
    {
        return Err(Refusal::NotAuthorized);
    }
    let _ = (
        credentials.agent,
        credentials.username,
        credentials.password,
    );
    Ok(())
}
