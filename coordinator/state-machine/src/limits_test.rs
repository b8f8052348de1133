//! Limits: each rule of `validate` names the offending field and values, in the words the
//! `Configure` refusal and the node's config error have always used.

use super::{Limits, LimitsError};

#[test]
fn the_defaults_are_valid() {
    assert_eq!(Limits::DEFAULTS.validate(), Ok(()));
}

#[test]
fn each_rule_names_the_offending_values() {
    let zero_ttl = Limits {
        lease_ttl_ms_min: 0,
        ..Limits::DEFAULTS
    };
    assert_eq!(zero_ttl.validate(), Err(LimitsError::LeaseTtlMinZero));
    let inverted = Limits {
        lease_ttl_ms_min: 2_000,
        lease_ttl_ms_max: 1_000,
        ..Limits::DEFAULTS
    };
    let error = inverted.validate().expect_err("an empty TTL range");
    assert_eq!(
        error,
        LimitsError::LeaseTtlRange {
            min_ms: 2_000,
            max_ms: 1_000
        }
    );
    assert_eq!(
        error.to_string(),
        "lease_ttl_ms_min (2000) is above lease_ttl_ms_max (1000)"
    );
    let no_dedup = Limits {
        dedup_agents_max: 0,
        ..Limits::DEFAULTS
    };
    let error = no_dedup.validate().expect_err("a zero count");
    assert_eq!(
        error,
        LimitsError::Zero {
            limit: "dedup_agents_max"
        }
    );
    assert_eq!(error.to_string(), "dedup_agents_max must be at least 1");
    for limit in [
        "leases_per_agent_max",
        "waits_per_lease_max",
        "holds_per_agent_max",
    ] {
        let mut zero = Limits::DEFAULTS;
        match limit {
            "leases_per_agent_max" => zero.leases_per_agent_max = 0,
            "waits_per_lease_max" => zero.waits_per_lease_max = 0,
            _ => zero.holds_per_agent_max = 0,
        }
        assert_eq!(zero.validate(), Err(LimitsError::Zero { limit }));
    }
}
