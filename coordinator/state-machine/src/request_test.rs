//! The log's form of a request: the wire's, plus the secret's hash for the account ops.

use hivekeeper_protocol::{LockMode, Op, Role};

use super::{AgentRequest, InvalidRequest};

#[test]
fn an_account_add_is_logged_with_its_role_and_hash_after_the_wire_fields() {
    let op = Op::AdminAgentAdd {
        name: "drone-1".into(),
        role: None,
        kv_read: Vec::new(),
        kv_write: Vec::new(),
    };
    let request = AgentRequest::with_secret("a1", op, "$argon2id$h".into()).expect("an add");
    assert_eq!(
        serde_json::to_string(&request).expect("encodes"),
        r#"{"id":"a1","op":"admin.agent.add","name":"drone-1","role":"agent","secret_hash":"$argon2id$h"}"#
    );
    let back: AgentRequest = serde_json::from_str(
        r#"{"id":"a1","op":"admin.agent.add","name":"drone-1","role":"agent","secret_hash":"$argon2id$h"}"#,
    )
    .expect("decodes");
    assert_eq!(back, request);
    assert_eq!(
        back.op,
        Op::AdminAgentAdd {
            name: "drone-1".into(),
            role: Some(Role::Agent),
            kv_read: Vec::new(),
            kv_write: Vec::new(),
        }
    );
}

#[test]
fn a_write_without_a_secret_is_logged_in_the_wire_form() {
    let op = Op::LockAcquire {
        name: "gw".into(),
        lease: "0000000000000002".into(),
        wait_ms: None,
        max_hold_ms: None,
        mode: LockMode::Exclusive,
    };
    let json = r#"{"id":"r1","op":"lock.acquire","name":"gw","lease":"0000000000000002"}"#;
    assert_eq!(
        serde_json::to_string(&AgentRequest::new("r1", op.clone())).expect("encodes"),
        json
    );
    assert!(AgentRequest::with_secret("r1", op, "h".into()).is_none());
}

#[test]
fn a_secret_hash_comes_with_exactly_the_ops_that_set_one() {
    let rotate = AgentRequest::new("r1", Op::AdminAgentRotate { name: "a".into() });
    assert_eq!(
        rotate.validate(),
        Err(InvalidRequest {
            op: "admin.agent.rotate",
            reason: "the log entry carries no `secret_hash`".into()
        })
    );
    let mut revoke = AgentRequest::new("r2", Op::LeaseRevoke { lease: "1".into() });
    revoke.secret_hash = Some("h".into());
    assert_eq!(
        revoke.validate(),
        Err(InvalidRequest {
            op: "lease.revoke",
            reason: "only the account ops carry a `secret_hash`".into()
        })
    );
}
