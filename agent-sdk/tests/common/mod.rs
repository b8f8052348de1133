//! Test support: a mosquitto broker per test (Debian's, as `.ci/run` installs it) and a fake
//! Hivekeeper service with scripted behaviour. Ports, bounded waits, the mosquitto binary and
//! the killable TCP proxy come from `hivekeeper-test-support`.
//!
//! The SDK must not depend on the coordinator, so [`Fake`] plays the service: a rumqttc client
//! subscribed to `hk/v1/req/+` that keeps leases, holders and request outcomes in memory and
//! answers like the real service (same-id retries get the first outcome; a queued request is
//! answered only when granted or when its `wait_ms` runs out). Scripts make it misbehave on
//! purpose: drop the first response of an op, answer `unavailable`, stop acknowledging
//! keepalives, hold a lock for "another agent". Several brokers can be served by one [`Fake`],
//! which then plays a replicated service whose nodes share one state.
//!
//! Everything binds 127.0.0.1 only, on ports the OS picked.

#![allow(dead_code)] // Each test binary uses a different part of this module.

#[allow(unused_imports)] // Each test binary uses a different part of this module.
pub use hivekeeper_test_support::{Proxy, eventually, free_port, within};

use hivekeeper_test_support::Mosquitto;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hivekeeper_agent::protocol::{
    ErrorCode, Event, Granted, LeaseGranted, LeaseKept, Op, Request, Response, Success,
};
use hivekeeper_agent::{AgentConfig, BrokerOrder};
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, NetworkOptions, Packet, QoS};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Starts a mosquitto broker on a free loopback port and returns the port once it accepts
/// TCP connections. The broker lives until the test process ends: it runs under `sh`, which
/// waits on its stdin (a pipe this process holds) and kills the broker when the pipe closes,
/// i.e. when the test process exits, however it exits.
///
/// A general-purpose broker is needed here (the fake service is itself an MQTT client
/// subscribed to every agent's request topic), which the agent endpoint deliberately is not.
pub fn start_broker() -> u16 {
    let mosquitto = Mosquitto::binary();
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("hk-sdk-mosquitto-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir for mosquitto.conf");
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\n\
             persistence false\nmax_queued_messages 10000\n"
        ),
    )
    .expect("write mosquitto.conf");
    let script = format!(
        "'{}' -c '{}' >/dev/null 2>&1 & broker=$!; read _; kill $broker",
        mosquitto.display(),
        conf.display()
    );
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn mosquitto under sh");
    // Keep the stdin pipe open for the life of the process: its close is the stop signal.
    std::mem::forget(child);
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            // mosquitto read its config at start and rereads it only on SIGHUP: the directory
            // can go now, rather than stay in the temp dir, one per broker per test run.
            let _ = std::fs::remove_dir_all(&dir);
            return port;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("mosquitto did not listen on {port} within 5 s");
}

/// Settings for a test agent: short timeouts so retries happen within a test's time.
pub fn agent_config(agent_id: &str, ports: &[u16]) -> AgentConfig {
    let brokers: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    AgentConfig {
        agent_id: agent_id.to_string(),
        brokers,
        // The failover tests know which broker an agent tries first.
        broker_order: BrokerOrder::InOrder,
        request_timeout_ms: 300,
        request_deadline_ms: 5_000,
        wait_resend_ms: 500,
        backoff_first_ms: 20,
        backoff_cap_ms: 200,
        keepalive_margin_ms: 150,
        mqtt_keepalive_s: 2,
        connect_timeout_s: 2,
        ..AgentConfig::default()
    }
}

/// What the fake does with `lease.keepalive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepaliveMode {
    /// Acknowledge (`ttl_ms`).
    Ack,
    /// Acknowledge, but only after this delay, like a slow link: tells a deadline counted from
    /// the keepalive's send time from one counted, wrongly, from the ack's arrival.
    AckAfter(Duration),
    /// Record it and say nothing, like a service that stopped answering.
    Silent,
    /// Answer `lease_not_found`, like a service whose lease expired.
    LeaseNotFound,
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The agent, from the topic.
    pub agent: String,
    /// The request id.
    pub id: String,
    /// The decoded op.
    pub op: Op,
    /// When it arrived (same monotonic clock as the agent under test: one process).
    pub at: Instant,
    /// Which responder (which broker) got it, in [`Fake::serve`] order.
    pub responder: usize,
    /// Whether the fake answered it with success.
    pub answered_ok: bool,
}

/// A request queued behind a busy resource.
#[derive(Debug, Clone)]
struct Queued {
    agent: String,
    id: String,
    key: String,
    lease: String,
    responder: usize,
}

/// The fake service's whole state, shared by its responders.
#[derive(Default)]
struct FakeState {
    received: Vec<Received>,
    /// Final outcomes by (agent, id): a retry gets the same answer.
    outcomes: HashMap<(String, String), Response>,
    leases: HashMap<String, u64>,
    next_lease: u64,
    next_token: u64,
    /// Holder lease and token by resource key (`lock:door`).
    holders: HashMap<String, (String, u64)>,
    /// Resources held by "another agent": acquires queue or refuse.
    busy: HashSet<String>,
    queued: Vec<Queued>,
    keepalive: Option<KeepaliveMode>,
    /// Ops whose next n responses are computed but not sent (a lost reply).
    drop_responses: HashMap<&'static str, u32>,
    /// Ops whose next n requests are answered with a code the SDK retries (`unavailable`,
    /// `rate_limited`), with no state change.
    transient: HashMap<&'static str, (ErrorCode, u32)>,
    /// Ops never answered.
    silent: HashSet<&'static str>,
    /// Responders whose node is cut off from the majority: everything they receive is
    /// answered `unavailable`.
    cut_off: HashSet<usize>,
    responders: Vec<AsyncClient>,
}

/// What to do with one request.
enum Action {
    Answer(Response),
    AnswerAfter(Duration, Response),
    Nothing,
    /// Queued with a `wait_ms`: answer `timeout` after it, unless granted first.
    QueueFor(Duration),
}

/// The fake Hivekeeper service. Cheap to clone; clones share the state.
#[derive(Clone, Default)]
pub struct Fake {
    state: Arc<Mutex<FakeState>>,
}

fn resource_key(kind: &str, name: &str) -> String {
    format!("{kind}:{name}")
}

impl Fake {
    /// A fake with no responder yet: call [`Fake::serve`] for each broker.
    pub fn new() -> Fake {
        Fake::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connects a responder to the broker on `port` and waits until it is subscribed. Returns
    /// the responder's index (see [`Received::responder`]).
    pub async fn serve(&self, port: u16) -> usize {
        let mut options = MqttOptions::new(format!("hk-fake-{port}"), "127.0.0.1", port);
        options.set_keep_alive(Duration::from_secs(5));
        let (client, mut eventloop) = AsyncClient::new(options, 256);
        let mut network = NetworkOptions::new();
        network.set_tcp_nodelay(true);
        eventloop.set_network_options(network);
        let responder = {
            let mut state = self.state();
            state.responders.push(client.clone());
            state.responders.len() - 1
        };
        let (requests_tx, mut requests_rx) = mpsc::unbounded_channel::<(String, Vec<u8>)>();
        let (subscribed_tx, mut subscribed_rx) = mpsc::unbounded_channel::<()>();
        // The event loop task only polls and forwards, never publishes (DESIGN.md §7).
        let subscriber = client.clone();
        tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                        // try_subscribe: never block the polling task on its own channel.
                        let _ = subscriber.try_subscribe("hk/v1/req/+", QoS::AtLeastOnce);
                    }
                    Ok(MqttEvent::Incoming(Packet::SubAck(_))) => {
                        let _ = subscribed_tx.send(());
                    }
                    Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                        let _ = requests_tx.send((p.topic.clone(), p.payload.to_vec()));
                    }
                    Ok(_) => {}
                    // The broker thread may still be starting: retry, gently.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
        let fake = self.clone();
        tokio::spawn(async move {
            while let Some((topic, payload)) = requests_rx.recv().await {
                fake.on_request(responder, &client, &topic, &payload).await;
            }
        });
        within(10, "fake responder subscribed", subscribed_rx.recv()).await;
        responder
    }

    async fn on_request(
        &self,
        responder: usize,
        client: &AsyncClient,
        topic: &str,
        payload: &[u8],
    ) {
        let Some(agent) = topic.strip_prefix("hk/v1/req/") else {
            return;
        };
        let request = match Request::decode(payload) {
            Ok(request) => request,
            Err(e) => {
                publish(client, agent, &e.to_response()).await;
                return;
            }
        };
        let id = request.id.clone();
        let action = self.handle(responder, agent, request);
        match action {
            Action::Answer(response) => publish(client, agent, &response).await,
            Action::AnswerAfter(delay, response) => {
                let (client, agent) = (client.clone(), agent.to_string());
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    publish(&client, &agent, &response).await;
                });
            }
            Action::Nothing => {}
            Action::QueueFor(wait) => {
                let fake = self.clone();
                let (client, agent) = (client.clone(), agent.to_string());
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    if let Some(response) = fake.wait_ran_out(&agent, &id) {
                        publish(&client, &agent, &response).await;
                    }
                });
            }
        }
    }

    /// The scripted service logic. Pure state: publishing happens outside the lock.
    fn handle(&self, responder: usize, agent: &str, request: Request) -> Action {
        let mut state = self.state();
        let op_name = request.op.name();
        let key = (agent.to_string(), request.id.clone());
        let mut received = Received {
            agent: agent.to_string(),
            id: request.id.clone(),
            op: request.op.clone(),
            at: Instant::now(),
            responder,
            answered_ok: false,
        };
        // A retry of a finished request: the first outcome, like the service's dedup.
        if let Some(response) = state.outcomes.get(&key).cloned() {
            received.answered_ok = response.outcome.is_ok();
            state.received.push(received);
            return Action::Answer(response);
        }
        // A retry of a queued request: no second slot, no answer until granted.
        if state
            .queued
            .iter()
            .any(|q| q.agent == agent && q.id == request.id)
        {
            state.received.push(received);
            return Action::Nothing;
        }
        if state.silent.contains(op_name) {
            state.received.push(received);
            return Action::Nothing;
        }
        if state.cut_off.contains(&responder) {
            state.received.push(received);
            return Action::Answer(Response::error(
                Some(request.id),
                ErrorCode::Unavailable,
                "fake: cut off from the majority",
            ));
        }
        if let Some((code, left)) = state.transient.get_mut(op_name)
            && *left > 0
        {
            *left -= 1;
            let code = *code;
            state.received.push(received);
            return Action::Answer(Response::error(
                Some(request.id),
                code,
                format!("fake: {code}"),
            ));
        }
        let id = request.id.clone();
        let error = |code, message: &str| Response::error(Some(id.clone()), code, message);
        let (response, remember) = match request.op {
            Op::LeaseGrant { ttl_ms, .. } => {
                state.next_lease += 1;
                let lease = format!("{:016x}", 0x11 * state.next_lease);
                state.leases.insert(lease.clone(), ttl_ms);
                (Response::ok(&id, LeaseGranted { lease, ttl_ms }), true)
            }
            Op::LeaseKeepalive { lease } => match state.keepalive.unwrap_or(KeepaliveMode::Ack) {
                KeepaliveMode::Silent => {
                    state.received.push(received);
                    return Action::Nothing;
                }
                KeepaliveMode::AckAfter(delay) => {
                    let known = state.leases.get(&lease).copied();
                    received.answered_ok = known.is_some();
                    state.received.push(received);
                    return Action::AnswerAfter(
                        delay,
                        match known {
                            Some(ttl_ms) => Response::ok(&id, LeaseKept { ttl_ms }),
                            None => error(ErrorCode::LeaseNotFound, "fake: no such lease"),
                        },
                    );
                }
                KeepaliveMode::LeaseNotFound => {
                    (error(ErrorCode::LeaseNotFound, "fake: expired"), false)
                }
                KeepaliveMode::Ack => match state.leases.get(&lease) {
                    Some(ttl_ms) => (Response::ok(&id, LeaseKept { ttl_ms: *ttl_ms }), false),
                    None => (
                        error(ErrorCode::LeaseNotFound, "fake: no such lease"),
                        false,
                    ),
                },
            },
            Op::LeaseRevoke { lease } => {
                state.leases.remove(&lease);
                state.holders.retain(|_, (holder, _)| *holder != lease);
                (Response::ok(&id, Success::default()), true)
            }
            Op::LockAcquire {
                ref name,
                ref lease,
                wait_ms,
                ..
            }
            | Op::SemAcquire {
                ref name,
                ref lease,
                wait_ms,
                ..
            }
            | Op::WaypointReserve {
                ref name,
                ref lease,
                wait_ms,
                ..
            } => {
                let resource = resource_key(op_name.split('.').next().unwrap_or(""), name);
                if !state.leases.contains_key(lease) {
                    (error(ErrorCode::LeaseNotFound, "fake: no such lease"), true)
                } else if let Some((holder, token)) = state.holders.get(&resource)
                    && holder == lease
                {
                    (Response::ok(&id, Granted { token: *token }), true)
                } else if state.busy.contains(&resource) || state.holders.contains_key(&resource) {
                    match wait_ms {
                        Some(0) => (error(ErrorCode::WouldBlock, "fake: taken"), true),
                        wait_ms => {
                            state.queued.push(Queued {
                                agent: agent.to_string(),
                                id: id.clone(),
                                key: resource,
                                lease: lease.clone(),
                                responder,
                            });
                            state.received.push(received);
                            return match wait_ms {
                                Some(ms) => Action::QueueFor(Duration::from_millis(ms)),
                                None => Action::Nothing,
                            };
                        }
                    }
                } else {
                    state.next_token += 1;
                    let token = state.next_token;
                    state.holders.insert(resource, (lease.clone(), token));
                    (Response::ok(&id, Granted { token }), true)
                }
            }
            Op::LockRelease { name, lease }
            | Op::SemRelease { name, lease }
            | Op::WaypointRelease { name, lease } => {
                let resource = resource_key(op_name.split('.').next().unwrap_or(""), &name);
                match state.holders.get(&resource) {
                    Some((holder, _)) if *holder == lease => {
                        state.holders.remove(&resource);
                        (Response::ok(&id, Success::default()), true)
                    }
                    _ => (error(ErrorCode::NotHolder, "fake: not the holder"), true),
                }
            }
            Op::FenceCheck { .. }
            | Op::Inspect { .. }
            | Op::AdminStatus {}
            | Op::AdminLeases { .. }
            | Op::AdminResources { .. }
            | Op::AdminSnapshot { .. }
            | Op::AdminRevoke { .. }
            | Op::AdminMemberAdd { .. }
            | Op::AdminMemberRemove { .. }
            | Op::AdminAgentAdd { .. }
            | Op::AdminAgentList { .. }
            | Op::AdminAgentRemove { .. }
            | Op::AdminAgentRotate { .. }
            | Op::LockDowngrade { .. }
            | Op::LockAcquireAll { .. }
            | Op::LockReleaseAll { .. }
            | Op::RouteReserve { .. }
            | Op::RouteRelease { .. }
            | Op::RouteAmend { .. }
            | Op::AirspaceQuery { .. }
            | Op::KvPut { .. }
            | Op::KvGet { .. }
            | Op::KvDelete { .. }
            | Op::KvTxn { .. }
            | Op::WatchPoll { .. }
            | Op::ElectionCampaign { .. }
            | Op::ElectionProclaim { .. }
            | Op::ElectionResign { .. }
            | Op::ElectionLeader { .. }
            | Op::BarrierEnter { .. }
            | Op::BarrierLeave { .. } => {
                (error(ErrorCode::BadRequest, "fake: not implemented"), true)
            }
        };
        received.answered_ok = response.outcome.is_ok();
        state.received.push(received);
        if remember {
            state.outcomes.insert(key, response.clone());
        }
        if let Some(left) = state.drop_responses.get_mut(op_name)
            && *left > 0
        {
            *left -= 1;
            return Action::Nothing;
        }
        Action::Answer(response)
    }

    /// A queued request's `wait_ms` ran out: `timeout`, unless it was granted meanwhile.
    fn wait_ran_out(&self, agent: &str, id: &str) -> Option<Response> {
        let mut state = self.state();
        let at = state
            .queued
            .iter()
            .position(|q| q.agent == agent && q.id == id)?;
        state.queued.remove(at);
        let response = Response::error(Some(id.to_string()), ErrorCode::Timeout, "fake: waited");
        state
            .outcomes
            .insert((agent.to_string(), id.to_string()), response.clone());
        Some(response)
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state().received.clone()
    }

    /// The requests received for one op (`"lock.acquire"`), in arrival order.
    pub fn received_op(&self, op: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.op.name() == op)
            .collect()
    }

    /// How `lease.keepalive` is answered from now on.
    pub fn set_keepalive(&self, mode: KeepaliveMode) {
        self.state().keepalive = Some(mode);
    }

    /// Makes the lock `name` held (or no longer held) by another agent.
    pub fn set_busy(&self, name: &str, busy: bool) {
        let key = resource_key("lock", name);
        let mut state = self.state();
        if busy {
            state.busy.insert(key);
        } else {
            state.busy.remove(&key);
        }
    }

    /// Computes, records, but does not send the next `n` responses to `op`.
    pub fn drop_responses(&self, op: &'static str, n: u32) {
        self.state().drop_responses.insert(op, n);
    }

    /// Answers the next `n` requests for `op` with `code`, changing nothing.
    pub fn transient(&self, op: &'static str, code: ErrorCode, n: u32) {
        self.state().transient.insert(op, (code, n));
    }

    /// Answers everything that reaches `responder` with `unavailable` from now on (its node is
    /// cut off from the majority, its broker still up).
    pub fn cut_off(&self, responder: usize) {
        self.state().cut_off.insert(responder);
    }

    /// Never answers `op` from now on.
    pub fn silence(&self, op: &'static str) {
        self.state().silent.insert(op);
    }

    /// The other agent lets go: every queued request is granted, in order, each answered on the
    /// responder that received it.
    pub async fn grant_waiters(&self) {
        let grants: Vec<(AsyncClient, String, Response)> = {
            let mut state = self.state();
            let queued = std::mem::take(&mut state.queued);
            let mut grants = Vec::new();
            for q in queued {
                state.busy.remove(&q.key);
                state.next_token += 1;
                let token = state.next_token;
                state
                    .holders
                    .insert(q.key.clone(), (q.lease.clone(), token));
                let response = Response::ok(&q.id, Granted { token });
                state
                    .outcomes
                    .insert((q.agent.clone(), q.id.clone()), response.clone());
                grants.push((state.responders[q.responder].clone(), q.agent, response));
            }
            grants
        };
        for (client, agent, response) in grants {
            publish(&client, &agent, &response).await;
        }
    }

    /// Whether `lease` holds the lock `name` in the fake's state.
    pub fn holds(&self, lease: &str, name: &str) -> bool {
        self.state()
            .holders
            .get(&resource_key("lock", name))
            .is_some_and(|(holder, _)| holder == lease)
    }

    /// Publishes `event` to `agent` through the first responder.
    pub async fn send_event(&self, agent: &str, event: &Event) {
        let client = self.state().responders[0].clone();
        client
            .publish(
                format!("hk/v1/evt/{agent}"),
                QoS::AtLeastOnce,
                false,
                event.encode(),
            )
            .await
            .expect("the fake's event loop is running");
    }

    /// Publishes any bytes on `agent`'s response topic through the first responder.
    pub async fn send_raw_response(&self, agent: &str, payload: Vec<u8>) {
        let client = self.state().responders[0].clone();
        client
            .publish(
                format!("hk/v1/rsp/{agent}"),
                QoS::AtLeastOnce,
                false,
                payload,
            )
            .await
            .expect("the fake's event loop is running");
    }
}

async fn publish(client: &AsyncClient, agent: &str, response: &Response) {
    client
        .publish(
            format!("hk/v1/rsp/{agent}"),
            QoS::AtLeastOnce,
            false,
            response.encode(),
        )
        .await
        .expect("the fake's event loop is running");
}

/// A broker with a fake service on it: the common setup of single-broker tests.
pub async fn broker_with_fake() -> (u16, Fake) {
    let port = start_broker();
    let fake = Fake::new();
    fake.serve(port).await;
    (port, fake)
}

/// Agent `agent_id` connected to the broker on `port` within 10 s.
pub async fn connected_agent(agent_id: &str, port: u16) -> hivekeeper_agent::Agent {
    let config = agent_config(agent_id, &[port]);
    within(10, "connect", hivekeeper_agent::Agent::connect(config))
        .await
        .expect("connect")
}

/// Agent `agent_id` connected to the broker on `port`, and a session of `ttl_ms` through it,
/// each within 10 s: the common start of a test against the fake.
pub async fn connected_session(
    agent_id: &str,
    port: u16,
    ttl_ms: u64,
) -> (hivekeeper_agent::Agent, hivekeeper_agent::Session) {
    let agent = connected_agent(agent_id, port).await;
    let session = within(10, "session", agent.session(ttl_ms))
        .await
        .expect("session");
    (agent, session)
}
