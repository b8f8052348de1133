//! Authentication at the node's edge: account secrets (made, hashed, verified) and the role
//! check every request passes in [`NodeHandle::submit`](super::NodeHandle::submit).
//!
//! ```text
//!  admin.agent.add / rotate ─▶ new_secret() ─▶ hash_secret() (Argon2id, random salt, PHC)
//!        the log carries the hash; the operator's answer carries the secret, once
//!  CONNECT (agent endpoint) ─▶ NodeHandle::authenticate(agent, secret)
//!        the LOCAL replica's account (not a linearizable read: a change takes effect on a
//!        member when it applies it) ─▶ verify_secret (constant-time) ─▶ Ok(role)
//!  every request ─▶ role_of(agent) ≥ Role::needed_for(op)?  else `forbidden`
//!  a key op ─▶ kv_access_for(agent): the account's role and key prefixes, from the LOCAL
//!        replica ─▶ KvAccess::check(op)?  else `forbidden`, naming account, key and prefixes
//! ```
//!
//! Why Argon2id, and why so cheap a cost ([`ARGON2_M_COST_KIB`]): the secrets are 256-bit
//! values the node generates, never passwords a person chose, so no cost makes guessing one
//! any harder than 2^256 tries. What the hash does buy is that a copy of the state (a snapshot,
//! a log file) gives no secret away, and that needs only a salted one-way function. The cost is
//! kept low so that 10,000 agents reconnecting at once are checked within seconds on two cores
//! (measured in docs/BENCHMARKS.md: `cargo run --release -p hivekeeper-coordinator --example
//! auth_cost`). The parameters live in each PHC string, so a later build may raise them and
//! old hashes still verify.

use std::path::Path;

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use hivekeeper_protocol::{ConflictInfo, ErrorCode, KvAccess, KvDenied, Op, Request, Role};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::waits::{Respond, SecretToReveal, answer_with};
use super::{NodeError, NodeHandle};
use crate::raft::Origin;
use crate::raft::transport::AgentWrite;
use crate::state_machine::{AgentRequest, Reply};

/// Bytes of randomness in a secret: 256 bits.
pub const SECRET_BYTES: usize = 32;

/// Argon2id memory cost, KiB. Small on purpose (module doc): a verify costs tens of
/// microseconds rather than the tens of milliseconds a password needs.
pub const ARGON2_M_COST_KIB: u32 = 64;

/// Argon2id passes over the memory.
pub const ARGON2_T_COST: u32 = 1;

/// Argon2id lanes.
pub const ARGON2_P_COST: u32 = 1;

/// Why a CONNECT's credentials were refused. The text is for the server's log; the client
/// hears "bad username or password", or "server unavailable" for [`AuthError::Unavailable`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No account has this agent id.
    #[error("agent {agent:?} has no account")]
    NoAccount {
        /// The agent id tried.
        agent: String,
    },
    /// The secret does not match the account's hash.
    #[error("wrong secret for agent {agent:?}")]
    WrongSecret {
        /// The agent id tried.
        agent: String,
    },
    /// The node could not read its replica (it is stopping).
    #[error("the node cannot read its accounts: {reason}")]
    Unavailable {
        /// What failed.
        reason: String,
    },
}

/// The Argon2id instance with this build's parameters.
fn argon2() -> Argon2<'static> {
    let params = Params::new(ARGON2_M_COST_KIB, ARGON2_T_COST, ARGON2_P_COST, None)
        .expect("the constant Argon2 parameters are within Argon2's bounds");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// A new secret: [`SECRET_BYTES`] from the operating system's generator, as lowercase hex
/// (64 characters: fits any MQTT password field and any shell).
pub fn new_secret() -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The secret's salted Argon2id hash, as a PHC string (`$argon2id$v=19$m=...`).
pub fn hash_secret(secret: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    argon2()
        .hash_password(secret.as_bytes(), &salt)
        .expect("hashing a short secret with a generated salt cannot fail")
        .to_string()
}

/// Whether `secret` matches `phc`, with the parameters the PHC string names. The comparison of
/// the hash outputs is constant-time (password-hash's `Output` equality); an unreadable PHC
/// string matches nothing.
pub fn verify_secret(secret: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .is_ok_and(|hash| argon2().verify_password(secret.as_bytes(), &hash).is_ok())
}

/// The refusal of an op the role may not send, naming the role it needs.
pub fn forbidden(op: &Op, agent: &str, role: Role) -> Reply {
    let needed = Role::needed_for(op);
    Reply::refused(
        ErrorCode::Forbidden,
        format!(
            "{} needs the {needed} role; agent {agent:?} has the {role} role",
            op.name()
        ),
    )
}

/// The refusal of a key op outside the account's key permissions: the account, the key or
/// prefix, and the prefixes it may use.
pub fn kv_forbidden(agent: &str, denied: &KvDenied) -> Reply {
    Reply::refused(
        ErrorCode::Forbidden,
        format!("agent {agent:?} (role {}): {denied}", denied.role),
    )
}

/// An `inspect` answer as a non-admin sees it with authentication on: other agents' holds by
/// agent id, without their lease ids (a lease id is what a request needs to act on a hold).
pub fn redact_inspect(agent: &str, mut reply: Reply) -> Reply {
    if let Reply::Inspect { holders, .. } = &mut reply {
        for holder in holders.iter_mut().filter(|holder| holder.agent != agent) {
            holder.lease = String::new();
        }
    }
    reply
}

/// An `airspace.query` answer as the `agent` role sees it with authentication on: other agents'
/// reservations without their `agent` and `lease` (only observers and admins see who holds the
/// airspace); the asker's own keep both.
pub fn redact_conflicts(agent: &str, reply: Reply) -> Reply {
    match reply {
        Reply::Conflicts {
            conflicts,
            next_after,
        } => Reply::Conflicts {
            conflicts: conflicts
                .into_iter()
                .map(|conflict| {
                    if conflict.agent == agent {
                        conflict
                    } else {
                        ConflictInfo {
                            agent: String::new(),
                            lease: String::new(),
                            ..conflict
                        }
                    }
                })
                .collect(),
            next_after,
        },
        other => other,
    }
}

/// File, in the data directory, where the first leader with authentication on writes the
/// `admin` account's secret (mode 0600).
pub const ADMIN_SECRET_FILE: &str = "admin.secret";

/// The account the first leader with authentication on creates.
pub const ADMIN_ACCOUNT: &str = "admin";

/// The hash an unknown agent's secret is checked against (made once per process, from a
/// secret nobody keeps).
static UNKNOWN_AGENT_HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The agent id the node's own `admin` proposal is made as: it only keys the proposal's
/// remembered outcome (its request id carries 64 random bits, so no agent's request can
/// collide with it), and nobody is answered or told under it.
const NODE_AGENT: &str = "hivekeeper.node";

impl NodeHandle {
    /// Whether accounts and roles are enforced on this node.
    pub fn auth_enabled(&self) -> bool {
        self.auth_enabled
    }

    /// What `agent` may do, from the local replica: its account's role, `agent` when it has
    /// none (an agent authenticated by a client certificate, or by an external broker's ACLs),
    /// and `admin` for everyone with authentication off.
    pub fn role_of(&self, agent: &str) -> Role {
        if !self.auth_enabled {
            return Role::Admin;
        }
        self.raft
            .query(|sm| sm.account(agent).map(|account| account.role))
            .ok()
            .flatten()
            .unwrap_or(Role::Agent)
    }

    /// The role [`NodeHandle::submit`] checks `op` against: only ops that need more than
    /// `agent`, and `inspect` (its answer depends on it), read the accounts; the rest of the
    /// agent ops are bound to the agent's own leases by the state machine. `airspace.query`
    /// reads them too: its answer shows holders to observers and admins only.
    pub(super) fn role_for(&self, agent: &str, op: &Op) -> Role {
        if !self.auth_enabled {
            Role::Admin
        } else if Role::needed_for(op) > Role::Agent
            || matches!(op, Op::Inspect { .. } | Op::AirspaceQuery { .. })
        {
            self.role_of(agent)
        } else {
            Role::Agent
        }
    }

    /// The key permissions [`NodeHandle::submit`] checks a key op against, read like the role
    /// ([`NodeHandle::role_of`]) from the local replica: the account's role and prefixes, the
    /// `agent` role's defaults for an agent without an account. `None` when nothing is checked:
    /// authentication off, or an op that touches no key.
    pub(super) fn kv_access_for(&self, agent: &str, op: &Op) -> Option<KvAccess> {
        if !self.auth_enabled || !op.is_key_op() {
            return None;
        }
        let access = self
            .raft
            .query(|sm| sm.account(agent).map(|account| account.kv_access()))
            .ok()
            .flatten()
            .unwrap_or_else(|| KvAccess::of_role(Role::Agent));
        Some(access)
    }

    /// Checks a CONNECT's secret for `agent` against the account in this node's own replica
    /// (not a linearizable read: an account change takes effect on a member when the member
    /// applies it). Returns the account's role. With authentication off every secret passes
    /// (`admin`). The hash is verified on the blocking pool, never on an async worker: one
    /// verify takes about 100 µs (docs/BENCHMARKS.md), too long to hold a worker that serves
    /// other connections.
    pub async fn authenticate(&self, agent: &str, secret: &str) -> Result<Role, AuthError> {
        if !self.auth_enabled {
            return Ok(Role::Admin);
        }
        let account = self
            .raft
            .query(|sm| sm.account(agent).cloned())
            .map_err(|error| AuthError::Unavailable {
                reason: error.to_string(),
            })?;
        // An unknown agent costs one verify too (against a hash nobody has the secret of), so
        // the time of a refusal does not tell which agent ids have accounts.
        let hash = account.as_ref().map_or_else(
            || {
                UNKNOWN_AGENT_HASH
                    .get_or_init(|| hash_secret(&new_secret()))
                    .clone()
            },
            |account| account.secret_hash.clone(),
        );
        let secret = secret.to_string();
        let verified = tokio::task::spawn_blocking(move || verify_secret(&secret, &hash))
            .await
            .map_err(|error| AuthError::Unavailable {
                reason: error.to_string(),
            })?;
        match account {
            Some(account) if verified => Ok(account.role),
            Some(_) => Err(AuthError::WrongSecret {
                agent: agent.to_string(),
            }),
            None => Err(AuthError::NoAccount {
                agent: agent.to_string(),
            }),
        }
    }

    /// `admin.agent.add` and `admin.agent.rotate`: a new secret, its hash (made on the
    /// blocking pool) through the log as an agent write, and the secret in the answer only
    /// when the applied entry stored this request's hash ([`Waits::register_revealing`]). A
    /// same-id retry is answered from the dedup memory with the first attempt's hash: it gets
    /// the account without a secret (the secret is in no log; rotate again).
    ///
    /// [`Waits::register_revealing`]: super::waits::Waits::register_revealing
    pub(super) async fn write_secret(
        &self,
        agent: &str,
        request: Request,
        permit: OwnedSemaphorePermit,
        respond: Respond,
        started: Instant,
    ) {
        let op = request.op.name();
        let secret = new_secret();
        let hash = tokio::task::spawn_blocking({
            let secret = secret.clone();
            move || hash_secret(&secret)
        })
        .await;
        let Ok(hash) = hash else {
            return answer_with(op, started, &request.id, Err(NodeError::Stopping), respond);
        };
        let origin = Origin {
            agent: agent.to_string(),
            request_id: request.id.clone(),
        };
        let Some(request) = AgentRequest::with_secret(request.id, request.op, hash.clone()) else {
            let refusal = Reply::refused(
                ErrorCode::BadRequest,
                "only admin.agent.add and admin.agent.rotate make a secret",
            );
            return answer_with(op, started, &origin.request_id, Ok(refusal.into()), respond);
        };
        let reveal = SecretToReveal { secret, hash };
        self.waits
            .register_revealing(origin.clone(), op, permit, respond, reveal);
        let write = AgentWrite {
            agent: agent.to_string(),
            request,
        };
        if let Err(error) = self.proposer.write(write, origin.clone()) {
            self.waits.failed(&origin, &error);
        }
    }

    /// On the first start of a cluster with authentication (no account has the `admin` role
    /// once this node leads), creates the [`ADMIN_ACCOUNT`] account and writes its secret to
    /// `<data_dir>/admin.secret`, mode 0600. Logs the path, never the secret. The file is
    /// written before the proposal, so a committed account always has its secret on disk; a
    /// proposal that fails is retried at the next term with a new secret.
    pub(super) async fn bootstrap_admin(&self, data_dir: &Path) -> Result<(), NodeError> {
        if !self.auth_enabled {
            return Ok(());
        }
        self.raft.confirm_leadership().await?;
        let has_admin = self.raft.query(|sm| sm.has_role(Role::Admin))?;
        if has_admin {
            return Ok(());
        }
        let secret = new_secret();
        let path = data_dir.join(ADMIN_SECRET_FILE);
        write_secret_file(&path, &secret).map_err(|error| NodeError::Start {
            reason: format!(
                "cannot write the admin secret to {}: {error}",
                path.display()
            ),
        })?;
        let request = Request {
            id: format!("bootstrap-admin-{}", &new_secret()[..16]),
            op: Op::AdminAgentAdd {
                name: ADMIN_ACCOUNT.to_string(),
                role: Some(Role::Admin),
                kv_read: Vec::new(),
                kv_write: Vec::new(),
            },
        };
        let permit = self
            .ingress
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| NodeError::Stopping)?;
        let hash = tokio::task::spawn_blocking({
            let secret = secret.clone();
            move || hash_secret(&secret)
        })
        .await
        .map_err(|_| NodeError::Stopping)?;
        let request = AgentRequest::with_secret(request.id, request.op, hash)
            .expect("admin.agent.add is an op that makes a secret");
        let origin = Origin {
            agent: NODE_AGENT.to_string(),
            request_id: request.id.clone(),
        };
        let (answered, answer) = tokio::sync::oneshot::channel();
        let respond: Respond = Box::new(move |response| {
            let _ = answered.send(response);
        });
        self.waits
            .register(origin.clone(), "admin.agent.add", permit, respond);
        let write = AgentWrite {
            agent: NODE_AGENT.to_string(),
            request,
        };
        if let Err(error) = self.proposer.write(write, origin.clone()) {
            self.waits.failed(&origin, &error);
        }
        let response = answer.await.map_err(|_| NodeError::Stopping)?;
        match response.outcome {
            Ok(_) => {
                tracing::info!(
                    path = %path.display(),
                    "created the `admin` account; its secret is in this file (mode 0600)"
                );
                Ok(())
            }
            Err(error) => Err(NodeError::Start {
                reason: format!(
                    "the admin account was not created: {}: {}",
                    error.code.as_str(),
                    error.message
                ),
            }),
        }
    }
}

/// Writes `secret` to `path`, readable by the owner only (0600 from its creation on Unix, so
/// it is never readable by others, even briefly).
fn write_secret_file(path: &Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // An existing file keeps its mode on open: set it again.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    writeln!(file, "{secret}")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hivekeeper_protocol::HolderInfo;

    #[test]
    fn a_secret_verifies_against_its_hash_and_nothing_else_does() {
        let secret = new_secret();
        assert_eq!(secret.len(), 2 * SECRET_BYTES);
        assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()));
        let hash = hash_secret(&secret);
        assert!(hash.starts_with("$argon2id$v=19$m=64,t=1,p=1$"), "{hash}");
        assert!(verify_secret(&secret, &hash));
        assert!(!verify_secret(&new_secret(), &hash));
        assert!(!verify_secret(&secret, "not a phc string"));
        assert_ne!(hash_secret(&secret), hash, "a fresh salt each time");
    }

    #[test]
    fn a_non_admin_sees_other_holders_without_their_leases() {
        let holder = |agent: &str, lease: &str| HolderInfo {
            agent: agent.into(),
            lease: lease.into(),
            token: 7,
            permits: None,
            since_ms: 1,
            area: None,
            start_ms: None,
            end_ms: None,
            volumes: Vec::new(),
            priority: None,
            vacate_by_ms: None,
            mode: hivekeeper_protocol::LockMode::Exclusive,
            value: None,
        };
        let reply = Reply::Inspect {
            limit: None,
            holders: vec![
                holder("me", "0000000000000002"),
                holder("you", "0000000000000003"),
            ],
            waiters: Vec::new(),
            count: None,
            leaving: None,
        };
        assert_eq!(
            redact_inspect("me", reply),
            Reply::Inspect {
                limit: None,
                holders: vec![holder("me", "0000000000000002"), holder("you", "")],
                waiters: Vec::new(),
                count: None,
                leaving: None,
            }
        );
    }

    #[test]
    fn an_agent_sees_other_agents_conflicts_without_agent_or_lease() {
        let conflict = |name: &str, agent: &str, lease: &str| ConflictInfo {
            name: name.into(),
            kind: hivekeeper_protocol::ReservationKind::Waypoint,
            agent: agent.into(),
            lease: lease.into(),
            area: None,
            start_ms: Some(10),
            end_ms: Some(20),
            volumes: Vec::new(),
            volume_indexes: Vec::new(),
            priority: None,
        };
        let reply = Reply::Conflicts {
            conflicts: vec![
                conflict("a", "me", "0000000000000002"),
                conflict("b", "you", "0000000000000003"),
            ],
            next_after: Some("b".into()),
        };
        assert_eq!(
            redact_conflicts("me", reply),
            Reply::Conflicts {
                conflicts: vec![
                    conflict("a", "me", "0000000000000002"),
                    conflict("b", "", "")
                ],
                next_after: Some("b".into()),
            }
        );
    }
}
