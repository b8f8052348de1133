//! The keys workload: a few agents put, get (linearizable), delete and compare-and-set a small
//! set of keys, so their writes contend, and every operation is recorded with the times the
//! agent sent it and had its answer. The history is checked for linearizability by
//! `hivekeeper-checker` ([`check`]).
//!
//! ```text
//!  kv agent i (homed on member i mod N) ── random key of {run}-kv/k0..k{K-1}:
//!      put(v) | get | delete | cas(value == last seen, or mod_revision == last seen) → put(v)
//!      every value unique: "{agent}-{request number}"          records: KeyOp
//!  after the run: one linearizable read of the prefix            records: FinalRead
//!  check: KeyOps + FinalRead ──▶ Vec<Operation> ──linearizability::check──▶ per key verdict
//!         + any value seen at two revisions (a write applied twice)
//! ```
//!
//! A request that got no answer (the SDK's deadline, a lost connection) or a refusal is
//! recorded as `Unknown`: it took effect once, or never. Each agent sends one request at a
//! time and nothing else, so the SDK's request id of an operation is `{boot}-{request}`:
//! the `request` recorded is the number the service's logs and dedup memory know it by.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use hivekeeper_agent::protocol::kv::CompareOp;
use hivekeeper_agent::{Agent, AgentError, KeyRead, KeyValue, Kv, Txn};
use hivekeeper_checker::linearizability::{
    self, Budget, Counterexample, Expected, Input, Operation, Outcome, Reply,
};
use hivekeeper_checker::watch::{EventKind, Watcher};
use serde::Serialize;
use tokio::time::Instant;

use crate::check::Verdict;
use crate::history::History;
use crate::workload::Context;

/// Per key, how long the linearizability search may run: a run's check never hangs; a key
/// over it is reported undecided, not as an anomaly.
pub const BUDGET: Budget = Budget {
    steps_max: 20_000_000,
    time_max: Some(Duration::from_secs(10)),
};

/// One operation of a keys agent, as it was sent and answered.
#[derive(Debug, Clone, Serialize)]
pub struct KeyOp {
    /// The agent that sent it.
    pub agent: String,
    /// Its request number for that agent: the SDK's request id is `{boot}-{request}`.
    pub request: u64,
    /// What was asked, when, and what came back (times in ns since the run's start).
    pub op: Operation,
    /// The error the SDK gave when the outcome is `Unknown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The linearizable read of every key after the workload stopped.
#[derive(Debug, Clone, Serialize)]
pub struct FinalRead {
    /// When it was sent, µs since the run's start.
    pub invoke_us: u64,
    /// When its answer arrived.
    pub complete_us: u64,
    /// The keys the workload used, present or not.
    pub keys: Vec<String>,
    /// The revision the read saw.
    pub revision: u64,
    /// The keys that existed then.
    pub kvs: Vec<KeyValue>,
}

/// The keys of run `run`, `count` of them under one prefix.
pub fn keys(run: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{}k{i}", prefix(run))).collect()
}

/// The prefix of every key of the workload (the watchers follow it).
pub fn prefix(run: &str) -> String {
    format!("{run}-kv/")
}

/// What an agent last learnt of a key: the compares of its next compare-and-set.
#[derive(Debug, Clone)]
struct Known {
    /// The value, `None` when the key was absent.
    value: Option<String>,
    /// Its `mod_revision`, 0 when absent.
    mod_revision: u64,
}

/// One keys agent: random operations on `keys` until the run ends.
pub async fn agent(ctx: Context, index: usize, keys: Vec<String>) {
    let home = index % ctx.brokers.len();
    let agent_id = format!("{}-kv{index}", ctx.run);
    let Some(agent) = ctx.connect(&agent_id, home).await else {
        return;
    };
    let kv = agent.kv();
    let mut rng = fastrand::Rng::with_seed(index as u64);
    let mut known: HashMap<String, Known> = HashMap::new();
    let mut request = 0u64;
    while !ctx.stopped() {
        let key = keys[rng.usize(..keys.len())].clone();
        request += 1;
        let value = format!("{agent_id}-{request}");
        let input = choose(&mut rng, key.clone(), value, known.get(&key));
        let call_ns = ctx.timeline.now_us() * 1_000;
        let result = perform(&kv, &input).await;
        let return_ns = ctx.timeline.now_us() * 1_000;
        let (outcome, error) = match result {
            Ok(reply) => {
                learn(&mut known, &input, &reply);
                (Outcome::Ok(reply), None)
            }
            Err(error) => (Outcome::Unknown, Some(error.to_string())),
        };
        let op = KeyOp {
            agent: agent_id.clone(),
            request,
            op: Operation {
                client_id: index as u64,
                call_ns,
                return_ns,
                input,
                outcome,
            },
            error,
        };
        ctx.recorder.with(|history| history.key_ops.push(op));
        tokio::time::sleep(Duration::from_millis(rng.u64(2..15))).await;
    }
}

/// A random operation on `key`: puts and gets most, deletes so keys come and go, and
/// compare-and-sets against what this agent last saw of the key.
fn choose(rng: &mut fastrand::Rng, key: String, value: String, known: Option<&Known>) -> Input {
    match rng.u8(..100) {
        0..30 => Input::Put { key, value },
        30..60 => Input::Get { key },
        60..72 => Input::Delete { key },
        _ => {
            let expected = match known {
                Some(Known {
                    value: Some(value), ..
                }) if rng.bool() => Expected::Value(Some(value.clone())),
                Some(known) => Expected::ModRevision(known.mod_revision),
                None => Expected::ModRevision(0),
            };
            Input::CompareAndSet {
                key,
                expected,
                value,
            }
        }
    }
}

/// Sends `input` and reads its answer as the checker's reply.
async fn perform(kv: &Kv, input: &Input) -> Result<Reply, AgentError> {
    Ok(match input {
        Input::Put { key, value } => Reply::Put {
            revision: Some(kv.put(key, value).await?.revision),
        },
        Input::Get { key } => get_reply(&kv.get(key).await?),
        Input::Delete { key } => {
            let deleted = kv.delete(key).await?;
            Reply::Delete {
                deleted: Some(deleted.deleted > 0),
                revision: Some(deleted.revision),
            }
        }
        Input::CompareAndSet {
            key,
            expected,
            value,
        } => {
            let txn = match expected {
                Expected::Value(Some(old)) => Txn::new().if_value(key, CompareOp::Eq, old),
                // Never chosen: an absent key is compared by its mod_revision, 0.
                Expected::Value(None) => Txn::new().if_mod_revision(key, CompareOp::Eq, 0),
                Expected::ModRevision(revision) => {
                    Txn::new().if_mod_revision(key, CompareOp::Eq, *revision)
                }
            };
            let done = kv.txn(txn.then_put(key, value)).await?;
            Reply::CompareAndSet {
                succeeded: done.succeeded,
                revision: Some(done.revision),
            }
        }
    })
}

/// A read of one key as the checker's reply: its value and `mod_revision`, or absent.
fn get_reply(read: &KeyRead) -> Reply {
    Reply::Get {
        value: read.kv.as_ref().map(|kv| kv.value.clone()),
        mod_revision: read.kv.as_ref().map(|kv| kv.mod_revision),
    }
}

/// What an answered operation tells its agent of the key.
fn learn(known: &mut HashMap<String, Known>, input: &Input, reply: &Reply) {
    let key = input.key().to_string();
    let now = match (input, reply) {
        (
            Input::Get { .. },
            Reply::Get {
                value,
                mod_revision,
            },
        ) => Known {
            value: value.clone(),
            mod_revision: mod_revision.unwrap_or(0),
        },
        (Input::Put { value, .. }, Reply::Put { revision })
        | (
            Input::CompareAndSet { value, .. },
            Reply::CompareAndSet {
                succeeded: true,
                revision,
            },
        ) => Known {
            value: Some(value.clone()),
            mod_revision: revision.unwrap_or(0),
        },
        (Input::Delete { .. }, Reply::Delete { .. }) => Known {
            value: None,
            mod_revision: 0,
        },
        _ => return,
    };
    known.insert(key, now);
}

/// The linearizable read of every key once the agents stopped, retried for up to 30 s (the
/// cluster has recovered from the last fault by then).
pub async fn final_read(ctx: &Context, keys: &[String]) -> Result<FinalRead, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let config = ctx.config(&format!("{}-kvfinal", ctx.run), 0);
    let mut last_error = String::from("no attempt");
    while Instant::now() < deadline {
        let agent = match Agent::connect(config.clone()).await {
            Ok(agent) => agent,
            Err(error) => {
                last_error = error.to_string();
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let invoke_us = ctx.timeline.now_us();
        match agent.kv().get_prefix(prefix(&ctx.run)).await {
            Ok(page) => {
                return Ok(FinalRead {
                    invoke_us,
                    complete_us: ctx.timeline.now_us(),
                    keys: keys.to_vec(),
                    revision: page.revision,
                    kvs: page.kvs,
                });
            }
            Err(error) => last_error = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("the final read of the keys failed: {last_error}"))
}

/// An operation for the checker and how the report names it.
struct Labelled {
    /// `{agent} request {n}`, or `final read`.
    label: String,
    /// The operation.
    op: Operation,
}

/// The history as the checker reads it: every operation, then the final read as one get per
/// key (a prefix read is one linearizable read, so every key's get has its interval).
fn operations(history: &History) -> Vec<Labelled> {
    let mut ops: Vec<Labelled> = history
        .key_ops
        .iter()
        .map(|op| Labelled {
            label: format!("{} request {}", op.agent, op.request),
            op: op.op.clone(),
        })
        .collect();
    if let Some(read) = &history.final_read {
        for key in &read.keys {
            let kv = read.kvs.iter().find(|kv| kv.key == *key);
            ops.push(Labelled {
                label: format!("final read @{}", read.revision),
                op: Operation {
                    client_id: u64::MAX,
                    call_ns: read.invoke_us * 1_000,
                    return_ns: read.complete_us * 1_000,
                    input: Input::Get { key: key.clone() },
                    outcome: Outcome::Ok(Reply::Get {
                        value: kv.map(|kv| kv.value.clone()),
                        mod_revision: kv.map(|kv| kv.mod_revision),
                    }),
                },
            });
        }
    }
    ops
}

/// Checks the keys' history: every key linearizable (each key found not to be is one anomaly,
/// described by its counterexample), and no value seen at two revisions.
pub fn check(history: &History, budget: &Budget) -> Verdict {
    let ops = operations(history);
    let mut verdict = Verdict {
        ops: ops.len() as u64,
        ..Verdict::default()
    };
    // One key at a time (the checker would stop at the first key it proves wrong): every
    // wrong key is reported, and each key is searched once.
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, labelled) in ops.iter().enumerate() {
        by_key.entry(labelled.op.input.key()).or_default().push(i);
    }
    for (key, ids) in by_key {
        let subset: Vec<Operation> = ids.iter().map(|&i| ops[i].op.clone()).collect();
        match linearizability::check(&subset, budget) {
            Ok(linearizability::Verdict::Linearizable) => {}
            Ok(linearizability::Verdict::Unknown { timed_out }) => {
                for key in timed_out {
                    verdict.undecided.push(format!(
                        "{:?}: {} operations, over the budget after {} steps",
                        key.key, key.ops, key.steps
                    ));
                }
            }
            Ok(linearizability::Verdict::NotLinearizable(counterexample)) => {
                verdict.anomalies += 1;
                describe(&counterexample, &ids, &ops, &mut verdict.samples);
            }
            Err(error) => {
                verdict.anomalies += 1;
                verdict
                    .samples
                    .push(format!("the history of key {key:?} is unreadable: {error}"));
            }
        }
    }
    for twice in applied_twice(history) {
        verdict.anomalies += 1;
        verdict.samples.push(twice);
    }
    verdict.notes.extend(unanswered(history));
    verdict
}

/// A counterexample as report lines: the last operations that could be placed, then those
/// that could not, each with its agent and request number.
fn describe(
    counterexample: &Counterexample,
    ids: &[usize],
    ops: &[Labelled],
    samples: &mut Vec<String>,
) {
    let line = |id: usize| {
        let Labelled { label, op } = &ops[ids[id]];
        let returned = match op.outcome {
            Outcome::Unknown => "no answer".to_string(),
            Outcome::Ok(_) => format!("{} µs", op.return_ns / 1_000),
        };
        format!(
            "    {label} [{} µs, {returned}] {} -> {}",
            op.call_ns / 1_000,
            op.input,
            op.outcome
        )
    };
    let placed = &counterexample.linearized;
    samples.push(format!(
        "key {:?} is not linearizable: after {} of its {} operations no order fits; the last \
         placed, in order:",
        counterexample.key,
        placed.len(),
        placed.len() + counterexample.unplaced.len()
    ));
    let from = placed.len().saturating_sub(6);
    samples.extend(placed[from..].iter().map(|indexed| line(indexed.id)));
    samples.push("  could not be placed after them (by call time):".into());
    samples.extend(
        counterexample
            .unplaced
            .iter()
            .take(12)
            .map(|indexed| line(indexed.id)),
    );
    if counterexample.unplaced.len() > 12 {
        samples.push(format!(
            "    ... and {} more",
            counterexample.unplaced.len() - 12
        ));
    }
}

/// Every value is written by one request, so it exists at one revision at most: a value seen
/// (by a reply, a read or a watcher) at two revisions was applied twice. One line per value.
pub fn applied_twice(history: &History) -> Vec<String> {
    let mut seen: BTreeMap<&str, BTreeMap<u64, Vec<String>>> = BTreeMap::new();
    for op in &history.key_ops {
        let by = format!("{} request {}", op.agent, op.request);
        let found = match (&op.op.input, &op.op.outcome) {
            (Input::Put { value, .. }, Outcome::Ok(Reply::Put { revision }))
            | (
                Input::CompareAndSet { value, .. },
                Outcome::Ok(Reply::CompareAndSet {
                    succeeded: true,
                    revision,
                }),
            ) => revision.map(|revision| (value.as_str(), revision, format!("{by}'s reply"))),
            (
                Input::Get { .. },
                Outcome::Ok(Reply::Get {
                    value: Some(value),
                    mod_revision: Some(revision),
                }),
            ) => Some((value.as_str(), *revision, format!("{by}'s read"))),
            _ => None,
        };
        if let Some((value, revision, how)) = found {
            seen.entry(value)
                .or_default()
                .entry(revision)
                .or_default()
                .push(how);
        }
    }
    if let Some(read) = &history.final_read {
        for kv in &read.kvs {
            seen.entry(kv.value.as_str())
                .or_default()
                .entry(kv.mod_revision)
                .or_default()
                .push("the final read".into());
        }
    }
    for watcher in &history.watchers {
        watched_puts(watcher, &mut seen);
    }
    seen.into_iter()
        .filter(|(_, revisions)| revisions.len() > 1)
        .map(|(value, revisions)| {
            let at: Vec<String> = revisions
                .iter()
                .map(|(revision, how)| {
                    let how: BTreeSet<&String> = how.iter().collect();
                    let how: Vec<&str> = how.into_iter().map(String::as_str).collect();
                    format!("@{revision} (seen by {})", how.join(", "))
                })
                .collect();
            format!(
                "value {value:?} (written once, by the request it names) is at {} revisions: \
                 applied twice: {}",
                revisions.len(),
                at.join("; ")
            )
        })
        .collect()
}

/// The puts a watcher received, into `seen` (value → revision → who saw it).
fn watched_puts<'h>(
    watcher: &'h Watcher,
    seen: &mut BTreeMap<&'h str, BTreeMap<u64, Vec<String>>>,
) {
    for stream in &watcher.streams {
        for batch in &stream.batches {
            for event in &batch.events {
                if let (EventKind::Put, Some(value)) = (event.kind, &event.value) {
                    seen.entry(value.as_str())
                        .or_default()
                        .entry(event.revision)
                        .or_default()
                        .push(format!("watcher {}", watcher.id));
                }
            }
        }
    }
}

/// A summary of the operations that got no answer, by error: context for a verdict, never an
/// anomaly (a fault is expected to leave some).
fn unanswered(history: &History) -> Option<String> {
    let mut by_error: BTreeMap<&str, u64> = BTreeMap::new();
    for op in &history.key_ops {
        if let Some(error) = &op.error {
            *by_error.entry(error.as_str()).or_default() += 1;
        }
    }
    if by_error.is_empty() {
        return None;
    }
    let total: u64 = by_error.values().sum();
    let top: Vec<String> = by_error
        .iter()
        .take(4)
        .map(|(error, n)| format!("{n}× {error}"))
        .collect();
    Some(format!(
        "{total} of {} operations got no answer (outcome unknown): {}",
        history.key_ops.len(),
        top.join("; ")
    ))
}

#[cfg(test)]
#[path = "keys_test.rs"]
mod tests;
