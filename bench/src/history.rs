//! What the agents saw, one record per grant, and what follows from it: the mutual-exclusion
//! check, handover latencies and fairness.
//!
//! Every time is taken on the bench's own monotonic clock, at the agent: `acquire_at` before
//! the request is sent, `granted_at` when the grant arrived, `release_at` before the release
//! is sent. A correct service grants the next holder only after it applied the release, which
//! is after the release was sent, so for two consecutive holders of a lock
//! `next.granted_at > prev.release_at` always holds. A grant inside another holder's
//! `[granted_at, release_at]` therefore proves two holders at once. The converse is not
//! claimed: an overlap shorter than the two message delays can go unseen; the fencing tokens
//! are checked too (strictly increasing in grant order, never repeated).

use std::collections::HashMap;

use serde::Serialize;
use tokio::time::Instant;

/// One grant, from the acquire to the start of its release.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    /// Which resource (index into the scenario's names).
    pub resource: usize,
    /// Which agent (index into the scenario's agents).
    pub agent: usize,
    /// The fencing token of the grant.
    pub token: u64,
    /// When the acquire was sent.
    pub acquire_at: Instant,
    /// When the grant arrived.
    pub granted_at: Instant,
    /// When the release was sent; `None` if the run ended while it was held (still checked
    /// as held until the end).
    pub release_at: Option<Instant>,
}

/// The result of the mutual-exclusion check.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Exclusion {
    /// True when no violation was found.
    pub ok: bool,
    /// Grants checked.
    pub grants_checked: u64,
    /// Violations found (overlapping holders beyond the capacity, tokens out of order or
    /// repeated).
    pub violations: u64,
    /// The first few, described.
    pub samples: Vec<String>,
}

impl Exclusion {
    fn violation(&mut self, what: String) {
        self.violations += 1;
        if self.samples.len() < 5 {
            self.samples.push(what);
        }
    }
}

/// Grants grouped per resource, in grant order.
fn per_resource(grants: &[Grant]) -> HashMap<usize, Vec<Grant>> {
    let mut by_resource: HashMap<usize, Vec<Grant>> = HashMap::new();
    for grant in grants {
        by_resource.entry(grant.resource).or_default().push(*grant);
    }
    for list in by_resource.values_mut() {
        list.sort_by_key(|grant| grant.granted_at);
    }
    by_resource
}

/// Checks that no resource ever had more than `capacity` holders at once (1 for a lock) and
/// that tokens are never repeated on a resource. With `capacity == 1` it also checks that
/// tokens strictly increase in grant order (with several permits, grants made in one log
/// entry may reach their agents in any order).
pub fn check_exclusion(grants: &[Grant], capacity: usize) -> Exclusion {
    let mut result = Exclusion {
        grants_checked: grants.len() as u64,
        ..Exclusion::default()
    };
    for (resource, list) in per_resource(grants) {
        check_repeated_tokens(resource, list.iter().map(|grant| grant.token), &mut result);
        if capacity == 1 {
            for pair in list.windows(2) {
                let (prev, next) = (&pair[0], &pair[1]);
                if next.token <= prev.token {
                    result.violation(format!(
                        "resource {resource}: token {} granted after token {}",
                        next.token, prev.token
                    ));
                }
            }
        }
        // Sweep: +1 at each grant, −1 at each release start; a release at the same instant
        // as a grant is counted first (the grant cannot have preceded the release).
        let mut edges: Vec<(Instant, i64, u64)> = Vec::with_capacity(list.len() * 2);
        for grant in &list {
            edges.push((grant.granted_at, 1, grant.token));
            if let Some(release_at) = grant.release_at {
                edges.push((release_at, -1, grant.token));
            }
        }
        edges.sort_by_key(|&(at, delta, _)| (at, delta));
        let mut holders: i64 = 0;
        for (_, delta, token) in edges {
            holders += delta;
            if delta > 0 && holders > capacity as i64 {
                result.violation(format!(
                    "resource {resource}: {holders} holders at once (capacity {capacity}) when \
                     token {token} was granted"
                ));
            }
        }
    }
    result.ok = result.violations == 0;
    result
}

/// Checks a read-write lock's grants, each resource on its own: `shared` grants may overlap
/// each other, an `exclusive` grant overlaps nothing (neither a shared holder nor another
/// exclusive one). Tokens are never repeated, and each exclusive grant's token is above every
/// token granted before it and below every one granted after it (in arrival order at the
/// agents). Shared grants are not ordered among themselves: several made in one log entry may
/// arrive in any order. With no shared grant it is [`check_exclusion`] with a capacity of 1.
///
/// Sound by the argument of this file's doc: a correct service grants a writer only after it
/// applied the release of every shared holder, which is after that holder's `release_at`, and
/// grants a reader queued behind a writer only after it applied the writer's release.
pub fn check_read_write(shared: &[Grant], exclusive: &[Grant]) -> Exclusion {
    let grants: Vec<(Grant, bool)> = shared
        .iter()
        .map(|grant| (*grant, false))
        .chain(exclusive.iter().map(|grant| (*grant, true)))
        .collect();
    let mut result = Exclusion {
        grants_checked: grants.len() as u64,
        ..Exclusion::default()
    };
    let mut by_resource: HashMap<usize, Vec<(Grant, bool)>> = HashMap::new();
    for &(grant, is_exclusive) in &grants {
        by_resource
            .entry(grant.resource)
            .or_default()
            .push((grant, is_exclusive));
    }
    for (resource, mut list) in by_resource {
        list.sort_by_key(|(grant, _)| grant.granted_at);
        check_repeated_tokens(
            resource,
            list.iter().map(|(grant, _)| grant.token),
            &mut result,
        );
        check_exclusive_order(resource, &list, &mut result);
        check_read_write_overlap(resource, &list, &mut result);
    }
    result.ok = result.violations == 0;
    result
}

/// A violation for every token of `resource` granted more than once.
fn check_repeated_tokens(
    resource: usize,
    tokens: impl Iterator<Item = u64>,
    result: &mut Exclusion,
) {
    let mut tokens: Vec<u64> = tokens.collect();
    tokens.sort_unstable();
    for pair in tokens.windows(2) {
        if pair[0] == pair[1] {
            result.violation(format!(
                "resource {resource}: token {} granted twice",
                pair[0]
            ));
        }
    }
}

/// Over one resource's grants in arrival order (`true`: exclusive): a violation for every
/// exclusive grant whose token is not above all tokens before it and below all after it.
fn check_exclusive_order(resource: usize, list: &[(Grant, bool)], result: &mut Exclusion) {
    let mut lowest_after = vec![u64::MAX; list.len() + 1];
    for (i, (grant, _)) in list.iter().enumerate().rev() {
        lowest_after[i] = lowest_after[i + 1].min(grant.token);
    }
    let mut highest_before = 0;
    for (i, &(grant, is_exclusive)) in list.iter().enumerate() {
        let later = lowest_after[i + 1];
        if is_exclusive && (grant.token <= highest_before || grant.token >= later) {
            result.violation(format!(
                "resource {resource}: exclusive token {} granted after token {highest_before} \
                 and before token {later}",
                grant.token
            ));
        }
        highest_before = highest_before.max(grant.token);
    }
}

/// Over one resource's grants (`true`: exclusive): a violation for every exclusive grant that
/// arrived while anyone held, and every shared grant that arrived while an exclusive holder
/// held (from its grant's arrival to its release's send).
fn check_read_write_overlap(resource: usize, list: &[(Grant, bool)], result: &mut Exclusion) {
    // +1 at each grant, −1 at each release start; a release at the same instant as a grant
    // is counted first (the grant cannot have preceded the release).
    let mut edges: Vec<(Instant, i64, bool, u64)> = Vec::with_capacity(list.len() * 2);
    for &(grant, is_exclusive) in list {
        edges.push((grant.granted_at, 1, is_exclusive, grant.token));
        if let Some(release_at) = grant.release_at {
            edges.push((release_at, -1, is_exclusive, grant.token));
        }
    }
    edges.sort_by_key(|&(at, delta, _, _)| (at, delta));
    let (mut shared, mut exclusive) = (0i64, 0i64);
    for (_, delta, is_exclusive, token) in edges {
        if delta > 0 && (exclusive > 0 || (is_exclusive && shared > 0)) {
            let mode = if is_exclusive { "exclusive" } else { "shared" };
            result.violation(format!(
                "resource {resource}: {mode} token {token} granted while {exclusive} exclusive \
                 and {shared} shared holders held"
            ));
        }
        if is_exclusive {
            exclusive += delta;
        } else {
            shared += delta;
        }
    }
}

/// Handover latencies of locks, µs: for each grant to an agent that was already waiting when
/// the previous holder started its release, the time from that release start to the grant
/// (the latest release start before a lock's grant is its previous holder's). Grants of an
/// idle lock are not handovers and are left out.
pub fn handovers_us(grants: &[Grant]) -> Vec<u64> {
    let mut latencies = Vec::new();
    for list in per_resource(grants).values() {
        let mut releases: Vec<Instant> = list.iter().filter_map(|g| g.release_at).collect();
        releases.sort_unstable();
        for grant in list {
            let before = releases.partition_point(|&release| release <= grant.granted_at);
            let Some(&release_at) = before.checked_sub(1).and_then(|i| releases.get(i)) else {
                continue;
            };
            if grant.acquire_at <= release_at {
                latencies.push(micros(grant.granted_at - release_at));
            }
        }
    }
    latencies
}

/// Jain's fairness index of the grants per agent, and the fewest and most any agent got.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Fairness {
    /// `(Σx)² / (n·Σx²)`: 1 when every agent got the same, 1/n when one got everything.
    pub jain_index: f64,
    /// Fewest grants of one agent.
    pub grants_min: u64,
    /// Most grants of one agent.
    pub grants_max: u64,
}

/// Fairness over `agents` agents (an agent with no grant counts as 0).
pub fn fairness(grants: &[Grant], agents: usize) -> Fairness {
    let mut per_agent = vec![0u64; agents];
    for grant in grants {
        if let Some(count) = per_agent.get_mut(grant.agent) {
            *count += 1;
        }
    }
    let sum: f64 = per_agent.iter().map(|&x| x as f64).sum();
    let sum_squares: f64 = per_agent.iter().map(|&x| (x as f64) * (x as f64)).sum();
    Fairness {
        jain_index: if sum_squares > 0.0 {
            sum * sum / (agents as f64 * sum_squares)
        } else {
            0.0
        },
        grants_min: per_agent.iter().copied().min().unwrap_or(0),
        grants_max: per_agent.iter().copied().max().unwrap_or(0),
    }
}

/// A duration in whole microseconds, saturating.
pub fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;

    /// A grant of `resource` to `agent` with `token`, times in ms after `t0`.
    pub(crate) fn grant(
        t0: Instant,
        resource: usize,
        agent: usize,
        token: u64,
        (acquire, granted, release): (u64, u64, u64),
    ) -> Grant {
        let at = |ms| t0 + Duration::from_millis(ms);
        Grant {
            resource,
            agent,
            token,
            acquire_at: at(acquire),
            granted_at: at(granted),
            release_at: Some(at(release)),
        }
    }

    #[test]
    fn a_clean_handover_passes_and_is_measured() {
        let t0 = Instant::now();
        let grants = [
            grant(t0, 0, 0, 10, (0, 1, 5)),
            grant(t0, 0, 1, 20, (2, 7, 9)),
            // An idle lock taken later: not a handover.
            grant(t0, 0, 0, 30, (20, 21, 22)),
        ];
        let exclusion = check_exclusion(&grants, 1);
        assert!(exclusion.ok, "{exclusion:?}");
        assert_eq!(handovers_us(&grants), vec![2_000]);
    }

    #[test]
    fn overlapping_holders_and_bad_tokens_are_violations() {
        let t0 = Instant::now();
        // Agent 1 is granted at 3 while agent 0 holds until 5.
        let overlap = [
            grant(t0, 0, 0, 10, (0, 1, 5)),
            grant(t0, 0, 1, 20, (2, 3, 9)),
        ];
        let result = check_exclusion(&overlap, 1);
        assert!(!result.ok);
        assert_eq!(result.violations, 1, "{result:?}");
        // A later grant with a lower token.
        let backwards = [
            grant(t0, 0, 0, 20, (0, 1, 5)),
            grant(t0, 0, 1, 10, (2, 6, 9)),
        ];
        assert_eq!(check_exclusion(&backwards, 1).violations, 1);
        // A repeated token on a semaphore, even without overlap beyond the capacity.
        let repeated = [
            grant(t0, 0, 0, 10, (0, 1, 5)),
            grant(t0, 0, 1, 10, (0, 2, 6)),
        ];
        assert_eq!(check_exclusion(&repeated, 2).violations, 1);
        // Three holders of a 2-permit semaphore.
        let crowded = [
            grant(t0, 0, 0, 10, (0, 1, 9)),
            grant(t0, 0, 1, 11, (0, 2, 9)),
            grant(t0, 0, 2, 12, (0, 3, 9)),
        ];
        assert_eq!(check_exclusion(&crowded, 2).violations, 1);
        // Other resources are independent.
        let apart = [
            grant(t0, 0, 0, 10, (0, 1, 5)),
            grant(t0, 1, 1, 5, (0, 2, 6)),
        ];
        assert!(check_exclusion(&apart, 1).ok);
    }

    #[test]
    fn readers_share_and_a_writer_holds_alone() {
        let t0 = Instant::now();
        // Two readers at once, then the writer after both released, then a reader again.
        let shared = [
            grant(t0, 0, 0, 10, (0, 1, 4)),
            grant(t0, 0, 1, 11, (0, 2, 3)),
            grant(t0, 0, 0, 30, (5, 9, 10)),
        ];
        let exclusive = [grant(t0, 0, 2, 20, (1, 5, 8))];
        let clean = check_read_write(&shared, &exclusive);
        assert!(clean.ok, "{clean:?}");
        assert_eq!(clean.grants_checked, 4);
        // Shared grants of one entry may arrive in any token order.
        let swapped = [
            grant(t0, 0, 0, 11, (0, 1, 4)),
            grant(t0, 0, 1, 10, (0, 2, 3)),
        ];
        assert!(check_read_write(&swapped, &exclusive).ok);
        // With no shared grant it is the lock's check.
        assert!(check_read_write(&[], &exclusive).ok);
    }

    #[test]
    fn a_reader_beside_the_writer_or_a_token_out_of_order_is_a_violation() {
        let t0 = Instant::now();
        let writer = [grant(t0, 0, 2, 20, (0, 2, 8))];
        // A reader granted while the writer holds.
        let inside = [grant(t0, 0, 0, 30, (1, 5, 6))];
        let result = check_read_write(&inside, &writer);
        assert_eq!(result.violations, 1, "{result:?}");
        assert!(result.samples[0].contains("shared token 30"), "{result:?}");
        // The writer granted while a reader holds.
        let holding = [grant(t0, 0, 0, 10, (0, 1, 3))];
        let result = check_read_write(&holding, &writer);
        assert_eq!(result.violations, 1, "{result:?}");
        assert!(
            result.samples[0].contains("exclusive token 20"),
            "{result:?}"
        );
        // A reader granted after the writer released, with a lower token.
        let stale = [grant(t0, 0, 0, 15, (9, 10, 11))];
        let result = check_read_write(&stale, &writer);
        assert_eq!(result.violations, 1, "{result:?}");
        // Two writers at once, and a token repeated.
        let writers = [
            grant(t0, 0, 2, 20, (0, 2, 8)),
            grant(t0, 0, 3, 21, (0, 3, 9)),
        ];
        assert!(!check_read_write(&[], &writers).ok);
        let repeated = [grant(t0, 0, 0, 20, (9, 10, 11))];
        assert!(!check_read_write(&repeated, &writer).ok);
    }

    #[test]
    fn jain_index_is_one_when_even_and_falls_when_skewed() {
        let t0 = Instant::now();
        let even: Vec<Grant> = (0..4)
            .map(|agent| grant(t0, 0, agent, agent as u64 + 1, (0, 1, 2)))
            .collect();
        let fair = fairness(&even, 4);
        assert!((fair.jain_index - 1.0).abs() < 1e-12);
        assert_eq!((fair.grants_min, fair.grants_max), (1, 1));
        // One agent of four got everything: 1/4.
        let skewed: Vec<Grant> = (0..4).map(|i| grant(t0, 0, 0, i + 1, (0, 1, 2))).collect();
        let unfair = fairness(&skewed, 4);
        assert!((unfair.jain_index - 0.25).abs() < 1e-12);
        assert_eq!((unfair.grants_min, unfair.grants_max), (0, 4));
    }
}
