//! `uncontended --flood`: one more agent floods the service while the swarm runs, to measure
//! what a flooding client costs everyone else (the target: the swarm's p99 within 2x of a run
//! without the flood, and no lease expired).
//!
//! The flooder is a raw MQTT client, not the SDK: the SDK backs off on `rate_limited`, a
//! flooding client does not. It publishes writes (QoS 1, unique ids) as fast as its client
//! takes them, each a `lock.release` under a lease that does not exist, so every one the node
//! admits costs a log entry and is answered `lease_not_found`; the rest are answered
//! `rate_limited`. It reads its responses, counting them by code, so the endpoint never drops
//! it as a slow consumer.
//!
//! ```text
//!  start ─▶ connect, subscribe to rsp ─▶ publish loop until stop ─▶ FloodFigures
//!                                           (answers counted by code meanwhile)
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use hivekeeper_agent::{Resource, Session, SessionState};
use hivekeeper_local_cluster::raw_mqtt;
use rumqttc::QoS;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Common;
use super::cycles;
use super::report::Report;
use super::swarm::RunId;

/// The topic prefix the bench's agents use (the SDK's default).
const PREFIX: &str = "hk/v1";

/// What the flood did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FloodFigures {
    /// The flooding agent.
    pub agent: String,
    /// Requests published.
    pub sent: u64,
    /// Responses received, by error code (`ok` for successes).
    pub answered: BTreeMap<String, u64>,
    /// Requests a second the flooder published, over the measured phase.
    pub sent_per_s: f64,
    /// The swarm's sessions that went into jeopardy or expired during the flood.
    pub sessions_lost: u64,
}

/// A running flood.
pub struct Flooder {
    agent: String,
    stop: watch::Sender<bool>,
    publisher: JoinHandle<u64>,
    poller: JoinHandle<()>,
    answered: Arc<Mutex<BTreeMap<String, u64>>>,
    started: tokio::time::Instant,
}

impl Flooder {
    /// Connects agent `agent` to `broker` (`host:port`) and starts flooding once subscribed.
    pub async fn start(broker: &str, agent: String) -> anyhow::Result<Flooder> {
        let (client, eventloop) =
            raw_mqtt::client(broker, &agent, Duration::from_secs(5), 5, 1_024)?;
        let response_topic = format!("{PREFIX}/rsp/{agent}");
        let answered = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
        let (subscribed_tx, mut subscribed) = watch::channel(false);
        let poller = {
            let answered = answered.clone();
            raw_mqtt::poll_responses(
                eventloop,
                client.clone(),
                response_topic,
                subscribed_tx,
                move |payload| {
                    let code = response_code(payload);
                    let mut answered = answered.lock().unwrap_or_else(|poison| poison.into_inner());
                    *answered.entry(code).or_default() += 1;
                    true
                },
            )
        };
        tokio::time::timeout(Duration::from_secs(10), subscribed.wait_for(|ready| *ready))
            .await
            .context("the flooder did not connect and subscribe within 10 s")?
            .context("the flooder's event loop stopped")?;
        let (stop, stopped) = watch::channel(false);
        let request_topic = format!("{PREFIX}/req/{agent}");
        let publisher = tokio::spawn(async move {
            let mut sent = 0u64;
            while !*stopped.borrow() {
                let payload = format!(
                    r#"{{"id":"flood-{sent}","op":"lock.release","name":"flood","lease":"ffffffffffffffff"}}"#
                );
                if client
                    .publish(&request_topic, QoS::AtLeastOnce, false, payload)
                    .await
                    .is_err()
                {
                    break;
                }
                sent += 1;
            }
            sent
        });
        Ok(Flooder {
            agent,
            stop,
            publisher,
            poller,
            answered,
            started: tokio::time::Instant::now(),
        })
    }

    /// Stops publishing, waits up to `drain` for the last answers, and reports.
    pub async fn stop(self, drain: Duration) -> FloodFigures {
        let elapsed_s = self.started.elapsed().as_secs_f64();
        let _ = self.stop.send(true);
        let sent = self.publisher.await.unwrap_or(0);
        let deadline = tokio::time::Instant::now() + drain;
        let answered = || {
            self.answered
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .clone()
        };
        while answered().values().sum::<u64>() < sent && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.poller.abort();
        FloodFigures {
            agent: self.agent,
            sent,
            answered: answered(),
            sent_per_s: sent as f64 / elapsed_s.max(1e-9),
            sessions_lost: 0,
        }
    }
}

/// The error code of a response (`ok` for a success, `unreadable` for anything else).
fn response_code(payload: &[u8]) -> String {
    let Ok(response) = serde_json::from_slice::<serde_json::Value>(payload) else {
        return "unreadable".into();
    };
    if response["ok"] == serde_json::Value::Bool(true) {
        return "ok".into();
    }
    response["error"]["code"]
        .as_str()
        .unwrap_or("unreadable")
        .to_string()
}

/// `uncontended --flood`: connects the swarm, starts the flooder, runs the measured phase,
/// then stops the flood and counts the swarm's sessions that did not stay live.
pub async fn run(
    common: &Common,
    run: &RunId,
    agents: usize,
    resources: Vec<Resource>,
) -> anyhow::Result<Report> {
    let (members, connect_errors) = cycles::connect(common, run, agents).await?;
    let sessions: Vec<Session> = members.iter().map(|m| m.session.clone()).collect();
    let broker = common
        .brokers
        .first()
        .context("--brokers names no broker")?;
    let flooder = Flooder::start(broker, run.agent("flood", 0)).await?;
    let mut report = cycles::measure(common, members.into_iter().zip(resources).collect(), 1).await;
    let mut figures = flooder.stop(DRAIN).await;
    figures.sessions_lost = sessions
        .iter()
        .filter(|session| session.state() != SessionState::Live)
        .count() as u64;
    report.errors.merge(connect_errors);
    report.flood = Some(figures);
    Ok(report)
}

/// How long the flood's last answers may take after it stops.
const DRAIN: Duration = Duration::from_secs(10);
