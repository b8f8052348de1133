//! [`Role`]: what an authenticated agent may do, and the role each op needs.
//!
//! Three roles, ordered: `agent` < `observer` < `admin`; a role may do everything the roles
//! below it may. The roles live with the accounts in the replicated state (etcd's auth store is
//! the model); the node checks them in one place, where every request enters it, so both front
//! doors (the agent endpoint and the external-broker bridge) enforce the same rules.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::request::Op;

/// What an account may do. Ordered by power: a role allows everything the roles before it do.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Its own leases and resources, and `inspect` (other holders shown by agent id only).
    #[default]
    Agent,
    /// Also `admin.status`, `admin.leases` and `admin.resources`: watching the service,
    /// changing nothing. It reads keys and never writes one (`crate::kv_access`).
    Observer,
    /// Everything: `admin.revoke`, membership and accounts.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Agent, Role::Observer, Role::Admin];

    /// The role's wire name: `agent`, `observer` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Observer => "observer",
            Role::Admin => "admin",
        }
    }

    /// Whether this role may do what `needed` may.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }

    /// The weakest role that may send `op`.
    pub fn needed_for(op: &Op) -> Role {
        Role::needed_for_name(op.name())
    }

    /// The weakest role that may send the op named `name` (one of [`Op::NAMES`]): the admin
    /// reads need `observer`, every other `admin.*` op needs `admin`, everything else `agent`.
    /// The one place that says which op needs which role: the node checks requests with it and
    /// `hivekeeper agent add --help` lists each role's ops from it ([`Role::ops_added`]).
    pub fn needed_for_name(name: &str) -> Role {
        match name {
            "admin.status" | "admin.leases" | "admin.resources" => Role::Observer,
            _ if name.starts_with("admin.") => Role::Admin,
            _ => Role::Agent,
        }
    }

    /// The ops this role may send and the roles below it may not, in [`Op::NAMES`] order.
    pub fn ops_added(self) -> impl Iterator<Item = &'static str> {
        Op::NAMES
            .into_iter()
            .filter(move |name| Role::needed_for_name(name) == self)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role name that is none of `agent`, `observer`, `admin`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?}; the roles are agent, observer, admin")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;

    fn from_str(text: &str) -> Result<Role, UnknownRole> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == text)
            .ok_or_else(|| UnknownRole(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_parse_from_their_wire_names() {
        assert!(Role::Admin.allows(Role::Observer));
        assert!(Role::Observer.allows(Role::Agent));
        assert!(!Role::Observer.allows(Role::Admin));
        assert!(!Role::Agent.allows(Role::Observer));
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
            assert_eq!(
                serde_json::to_string(&role).expect("encodes"),
                format!("\"{role}\"")
            );
        }
        assert_eq!("root".parse::<Role>(), Err(UnknownRole("root".to_string())));
    }

    #[test]
    fn each_op_needs_the_role_the_issue_names() {
        let inspect = Op::Inspect {
            kind: crate::ResourceKind::Lock,
            name: "gw".into(),
        };
        assert_eq!(Role::needed_for(&inspect), Role::Agent);
        for lock_op in ["lock.downgrade", "lock.acquire_all", "lock.release_all"] {
            assert_eq!(Role::needed_for_name(lock_op), Role::Agent, "{lock_op}");
        }
        for barrier in ["barrier.enter", "barrier.leave"] {
            assert_eq!(Role::needed_for_name(barrier), Role::Agent, "{barrier}");
        }
        assert_eq!(Role::needed_for(&Op::AdminStatus {}), Role::Observer);
        assert_eq!(
            Role::needed_for(&Op::AdminLeases { after: None }),
            Role::Observer
        );
        let resources = Op::AdminResources {
            kind: None,
            prefix: None,
            after: None,
            limit: None,
        };
        assert_eq!(Role::needed_for(&resources), Role::Observer);
        // A backup copies every account's secret hash: the admin role, not the observer's.
        let snapshot = Op::AdminSnapshot {
            index: None,
            offset: None,
            page_bytes_max: None,
        };
        assert_eq!(Role::needed_for(&snapshot), Role::Admin);
        assert_eq!(
            Role::needed_for(&Op::AdminRevoke {
                lease: "0000000000000002".into()
            }),
            Role::Admin
        );
        assert_eq!(
            Role::needed_for(&Op::AdminAgentList { after: None }),
            Role::Admin
        );
        // Agents campaign, proclaim, resign and read the leader; observers, above them, may
        // read the leader (and do what agents do).
        for name in [
            "election.campaign",
            "election.proclaim",
            "election.resign",
            "election.leader",
        ] {
            assert_eq!(Role::needed_for_name(name), Role::Agent, "{name}");
        }
        let leader = Op::ElectionLeader {
            name: "hive".into(),
        };
        assert!(Role::Observer.allows(Role::needed_for(&leader)));
    }

    #[test]
    fn each_role_adds_the_ops_of_its_own_list() {
        assert_eq!(
            Role::Observer.ops_added().collect::<Vec<_>>(),
            ["admin.status", "admin.leases", "admin.resources"]
        );
        assert_eq!(
            Role::Admin.ops_added().collect::<Vec<_>>(),
            [
                "admin.snapshot",
                "admin.revoke",
                "admin.member.add",
                "admin.member.remove",
                "admin.agent.add",
                "admin.agent.list",
                "admin.agent.remove",
                "admin.agent.rotate"
            ]
        );
        let every = Role::ALL
            .into_iter()
            .map(|role| role.ops_added().count())
            .sum::<usize>();
        assert_eq!(every, Op::NAMES.len());
    }
}
