//! The admin CLI: `hivekeeper status | inspect | leases | revoke | member`, an MQTT client of
//! the wire protocol like any agent, so it works against any deployment an operator can reach.
//!
//! ```text
//!  hivekeeper status  --brokers a:1883,b:1883─▶ one Agent per broker ─▶ admin.status each
//!                                               (each node answers for itself: a row per node)
//!  hivekeeper inspect lock NAME              ─▶ inspect ─▶ admin.leases pages (time left)
//!  hivekeeper ls [KIND] [--prefix P]          ─▶ admin.resources, page after page
//!  hivekeeper leases [--agent A]              ─▶ admin.leases, page after page
//!  hivekeeper revoke LEASE | --agent A        ─▶ (admin.leases pages,) admin.revoke each
//!  hivekeeper member list | add N=H:P | remove N ─▶ admin.status | admin.member.add | .remove
//!  hivekeeper agent add | list | remove | rotate  ─▶ admin.agent.*
//!  hivekeeper kv get|put|del|txn|watch       ─▶ kv.get | kv.put | kv.delete | kv.txn | watch.poll
//!  hivekeeper elect NAME [--value V]        ─▶ lease.grant, election.campaign, … election.resign
//!  hivekeeper elect NAME --listen            ─▶ kv.get + watch.poll of $election/NAME
//!  hivekeeper barrier NAME --count N [--leave] [-- CMD] ─▶ lease.grant, barrier.enter, barrier.leave
//!  hivekeeper lock NAME [--shared] [-- CMD] ─▶ lease.grant, lock.acquire, … lock.release
//!  hivekeeper snapshot save FILE              ─▶ admin.snapshot, page after page (one snapshot)
//!  hivekeeper snapshot restore FILE --data-dir DIR  (offline: no request, seeds DIR)
//! ```
//!
//! Requests go through the agent SDK (`Agent::request`): its same-id resends, backoff and
//! broker failover are reused rather than written again. The CLI's agent id is
//! `hk-admin-{pid}`, or the `--user` it authenticates as (`hivekeeper-client-flags`); it takes no lease, so it
//! holds nothing on the service, except `elect`, `barrier` and `lock`, which take one for as
//! long as they run and revoke it on the way out. Output is a table
//! for people, or JSON (`--json`) for scripts. A failure is one line on stderr and exit code 1.
//!
//! # Layout
//! One file per subcommand (its arguments, its requests, its output): `status.rs`,
//! `inspect.rs`, `kv.rs`, `elect.rs`, `barrier.rs`, `lock.rs`, `ls.rs`, `leases.rs`, `revoke.rs`, `member.rs`, `agent.rs`, `snapshot.rs`
//! (the credential and TLS flags are `hivekeeper-client-flags`'s). This file holds what they share: the
//! [`Target`] flags, the connection and one request with its one-line failure; `table.rs` the
//! text output (a padded table, durations for people).

mod agent;
mod barrier;
mod elect;
mod inspect;
mod kv;
mod leases;
mod lock;
mod ls;
mod member;
mod revoke;
mod snapshot;
mod status;
mod table;

use anyhow::anyhow;
use hivekeeper_agent::protocol::{Op, Success, UnexpectedReply};
use hivekeeper_agent::{
    Agent, AgentConfig, AgentError, BrokerAddr, BrokerOrder, DEFAULT_BROKER, DEFAULTS, Session,
    SessionOptions, TlsFailure,
};
use hivekeeper_client_flags::Login;

/// The default TTL, ms, of the lease a session-holding command (`elect`, `lock`, `barrier`)
/// binds its hold to: how long after this process dies its hold can outlive it.
const SESSION_TTL_MS: u64 = 10_000;

pub use agent::{AgentArgs, agent};
pub use barrier::{BarrierArgs, barrier};
pub use elect::{ElectArgs, elect};
pub use inspect::{InspectArgs, inspect};
pub use kv::{KvArgs, kv};
pub use leases::{LeasesArgs, leases};
pub use lock::{LockArgs, lock};
pub use ls::{LsArgs, ls};
pub use member::{MemberArgs, member};
pub use revoke::{RevokeArgs, revoke};
pub use snapshot::{SnapshotArgs, snapshot};
pub use status::{StatusArgs, status};

/// Flags every admin subcommand takes.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// Broker(s) to reach the service through, host:port. For `status`, a comma list asks each
    /// node in turn (one row per node); for the other commands, the next broker of the list is
    /// tried when one does not answer. `--broker` is a hidden alias (the flag's first name);
    /// `bench` and the examples take `--brokers` too.
    #[arg(
        long = "brokers",
        alias = "broker",
        value_name = "HOST:PORT[,...]",
        default_value = DEFAULT_BROKER,
        value_delimiter = ','
    )]
    broker: Vec<String>,
    /// Topic prefix of the service (`{prefix}/req/{agent}`).
    #[arg(long, value_name = "PREFIX", default_value = hivekeeper_protocol::topic::DEFAULT_PREFIX)]
    topic_prefix: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// How long to try in all (connect, resends) before giving up, ms.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    timeout_ms: u64,
    #[command(flatten)]
    login: Login,
    /// TLS to the brokers.
    #[command(flatten)]
    tls: hivekeeper_client_flags::TlsArgs,
}

/// Runs `future` on a small runtime of its own: the admin commands are one client each.
fn block_on<T>(future: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| anyhow!("starting the async runtime: {error}"))?
        .block_on(future)
}

/// Connects, runs `work` with a session of `ttl_ms` (its lease granted as `options` say), then
/// revokes the lease whatever happened, so that nothing stays held or queued until it expires
/// (no lock-delay follows an agent's own revoke); then exits with the code `work` returns
/// when it is not 0: the status of the command `barrier` or `lock` ran.
fn run_in_session<F>(
    target: &Target,
    ttl_ms: u64,
    options: SessionOptions,
    work: impl FnOnce(Session) -> F,
) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<Option<i32>>>,
{
    let status = block_on(async move {
        let agent = connect(target, &target.broker).await?;
        let session = agent
            .session_with(ttl_ms, options)
            .await
            .map_err(|e| failure("lease.grant", e))?;
        let outcome = work(session.clone()).await;
        let revoke = session.revoke();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), revoke).await;
        outcome
    })?;
    match status {
        Some(code) if code != 0 => std::process::exit(code),
        _ => Ok(()),
    }
}

/// How long the refused-connection probe waits for one broker's TCP answer.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// `Some(error)` when every broker of `brokers` refuses a TCP connection (nothing listens
/// there): the SDK would redial until `--timeout-ms` ran out, so the command fails at once
/// instead. Anything else (a broker that accepts, one that does not answer in time, a name
/// that does not resolve) leaves the decision to the SDK.
async fn refused_everywhere(brokers: &[String]) -> Option<anyhow::Error> {
    let mut refusals = Vec::new();
    for broker in brokers {
        let addr = BrokerAddr::parse(broker).ok()?;
        let dial = tokio::net::TcpStream::connect((addr.host.as_str(), addr.port));
        match tokio::time::timeout(PROBE_TIMEOUT, dial).await {
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                refusals.push(broker.as_str());
            }
            _ => return None,
        }
    }
    Some(anyhow!(
        "no node reachable at {}: connection refused (is `hivekeeper serve` running there, \
         and is --brokers its agent endpoint's address?)",
        refusals.join(",")
    ))
}

/// An SDK agent for `brokers`, as patient as `--timeout-ms` allows, or an error at once when
/// every broker refuses the connection. Its id is `hk-admin-{pid}`, or the CN of `--tls-cert`.
async fn connect(target: &Target, brokers: &[String]) -> anyhow::Result<Agent> {
    if let Some(refused) = refused_everywhere(brokers).await {
        return Err(refused);
    }
    let timeout_ms = target.timeout_ms.max(1);
    let request_timeout_ms = timeout_ms.min(DEFAULTS.request_timeout_ms);
    let config = AgentConfig {
        agent_id: format!("hk-admin-{}", std::process::id()),
        brokers: brokers.to_vec(),
        // One short-lived client: the first broker that answers, as listed, is the predictable
        // choice (spreading is for fleets).
        broker_order: BrokerOrder::InOrder,
        topic_prefix: target.topic_prefix.clone(),
        request_timeout_ms,
        request_deadline_ms: timeout_ms,
        wait_resend_ms: DEFAULTS.wait_resend_ms.max(request_timeout_ms),
        backoff_first_ms: DEFAULTS.backoff_first_ms.min(request_timeout_ms),
        connect_timeout_s: timeout_ms
            .div_ceil(1_000)
            .clamp(1, DEFAULTS.connect_timeout_s),
        ..AgentConfig::default()
    };
    let config = target.login.apply(config)?;
    let authenticated = config.secret.is_some();
    // With --tls-cert the client id becomes the certificate's CN (the endpoint's identity).
    let config = target.tls.apply(config)?;
    Agent::connect(config)
        .await
        .map_err(|error| connect_failure(error, authenticated))
}

/// A failed connect as one line that names its cause and the flags that fix it.
fn connect_failure(error: AgentError, authenticated: bool) -> anyhow::Error {
    match error {
        AgentError::CredentialsRefused { broker, refusal } if authenticated => {
            anyhow!("credentials refused by {broker}: {refusal} (check --user and the password)")
        }
        AgentError::CredentialsRefused { broker, refusal } => anyhow!(
            "credentials refused by {broker}: {refusal}: the service has authentication on; \
             pass --user NAME and --password-file FILE (or HIVEKEEPER_USER and \
             HIVEKEEPER_PASSWORD)"
        ),
        AgentError::Tls { broker, failure } => match failure {
            TlsFailure::ExpectsTls => anyhow!(
                "the service at {broker} expects TLS: pass --tls-ca FILE (the CA that signed \
                 its certificate; or HIVEKEEPER_TLS_CA)"
            ),
            TlsFailure::NotTls => anyhow!(
                "the service at {broker} does not speak TLS on that port: drop --tls-ca (and \
                 HIVEKEEPER_TLS_CA), or give its TLS port"
            ),
            TlsFailure::CertificateRequired => anyhow!(
                "the service at {broker} requires a client certificate (mutual TLS): pass \
                 --tls-cert FILE and --tls-key FILE (or HIVEKEEPER_TLS_CERT and \
                 HIVEKEEPER_TLS_KEY)"
            ),
            TlsFailure::CertificateRefused { reason } => anyhow!(
                "the service at {broker} refused the client certificate of --tls-cert \
                 ({reason}): it must be signed by the CA the service trusts for clients"
            ),
            TlsFailure::UnknownCa { reason } => anyhow!(
                "the certificate of the service at {broker} is not signed by the CA of \
                 --tls-ca ({reason})"
            ),
            TlsFailure::BadCertificate { reason } => anyhow!(
                "the certificate of the service at {broker} is refused ({reason}): it must \
                 name the host as written in --brokers, and be valid now"
            ),
        },
        AgentError::Unreachable { brokers, waited_ms } => {
            anyhow!("no node reachable at {brokers} within {waited_ms} ms")
        }
        other => anyhow!("{other}"),
    }
}

/// One request, its answer read as the shape `T` its op gets, its failure as one line: a
/// refusal names its code.
async fn request<T>(agent: &Agent, op: Op) -> anyhow::Result<T>
where
    T: TryFrom<Success, Error = UnexpectedReply>,
{
    let name = op.name();
    agent
        .request_as(op)
        .await
        .map_err(|error| failure(name, error))
}

/// Every item of a paged admin op `name`, page after page (each page a linearizable read; the
/// whole is not one snapshot when items come and go meanwhile): `page(after)` reads one page,
/// its items and where the next begins. Stops at the last page, once `enough` says so, or with
/// an error past `pages_max` pages.
async fn all_pages<T, F>(
    name: &str,
    pages_max: usize,
    mut page: impl FnMut(Option<String>) -> F,
    mut enough: impl FnMut(&[T]) -> bool,
) -> anyhow::Result<Vec<T>>
where
    F: std::future::Future<Output = anyhow::Result<(Vec<T>, Option<String>)>>,
{
    let mut items = Vec::new();
    let mut after = None;
    for _ in 0..pages_max {
        let (more, next_after) = page(after).await?;
        items.extend(more);
        match next_after {
            Some(next) if !enough(&items) => after = Some(next),
            _ => return Ok(items),
        }
    }
    anyhow::bail!("{name}: more than {pages_max} pages; stopped")
}

/// A request's failure as one line: a refusal names its code.
fn failure(name: &str, error: AgentError) -> anyhow::Error {
    match error {
        AgentError::Service { code, message } => anyhow!("{name} refused: {code}: {message}"),
        AgentError::Timeout { waited_ms, .. } => anyhow!(
            "{name}: no answer within {waited_ms} ms (is a node serving this topic prefix, and \
             does it have a leader?)"
        ),
        AgentError::Disconnected => anyhow!("{name}: lost the connection to every broker"),
        other => anyhow!("{name}: {other}"),
    }
}
