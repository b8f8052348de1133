//! The sentinels: one raw MQTT client per member that never leaves it, asking it a
//! linearizable `inspect` every 100 ms and recording each answer's code, so a window can say
//! when a member the fault hit began to answer `unavailable` (what clients of a cut-off member
//! need, to move elsewhere, within about 1 s).
//!
//! The SDK's agents cannot say it: the SDK answers `unavailable` itself by moving to another
//! member and resending, so its callers see a grant, later. A sentinel is the plain MQTT client
//! of PROTOCOL.md, pinned to one broker.
//!
//! ```text
//!  sentinel n ─ connect to member n only (reconnect every 50 ms while it is down)
//!     loop every 100 ms until the run stops (not connected: record "disconnected"):
//!       publish {"id":"s<k>","op":"inspect","kind":"lock",...} on hk/v1/req/<agent>
//!       wait ≤ 1 s for the response with id s<k> on hk/v1/rsp/<agent>
//!       record Answer { member n, invoke, complete, "ok" | code | "timeout" | "disconnected" }
//! ```

use std::time::Duration;

use hivekeeper_local_cluster::raw_mqtt;
use hivekeeper_protocol::Response;
use rumqttc::QoS;
use tokio::sync::{mpsc, watch};

use super::history::Answer;
use super::workload::Context;

/// The topic prefix (the service's default).
const PREFIX: &str = "hk/v1";
/// How long one ask waits for its answer before it counts as `timeout`.
const ANSWER_WAIT: Duration = Duration::from_secs(1);
/// The pause between asks.
const ASK_EVERY: Duration = Duration::from_millis(100);

/// Runs member `member`'s sentinel until the run stops.
pub async fn sentinel(ctx: Context, member: usize) {
    let agent = format!("{}-sentinel{member}", ctx.run);
    let Ok((client, eventloop)) =
        raw_mqtt::client(&ctx.brokers[member], &agent, Duration::from_secs(5), 1, 64)
    else {
        return;
    };
    let response_topic = format!("{PREFIX}/rsp/{agent}");
    let (answers_tx, mut answers) = mpsc::unbounded_channel::<(Option<String>, String)>();
    // Subscribed on the current connection: an ask is sent only then (rumqttc would otherwise
    // queue it and send it after the reconnect, seconds late).
    let (subscribed_tx, subscribed) = watch::channel(false);
    let poller = raw_mqtt::poll_responses(
        eventloop,
        client.clone(),
        response_topic,
        subscribed_tx,
        move |payload| {
            let answer = match Response::decode(payload) {
                Ok(response) => (
                    response.id,
                    match response.outcome {
                        Ok(_) => "ok".to_string(),
                        Err(error) => error.code.as_str().to_string(),
                    },
                ),
                Err(_) => (None, "unreadable".to_string()),
            };
            answers_tx.send(answer).is_ok()
        },
    );
    let request_topic = format!("{PREFIX}/req/{agent}");
    let name = format!("{}-sentinel", ctx.run);
    let mut k = 0u64;
    while !ctx.stopped() {
        k += 1;
        let id = format!("s{k}");
        let payload = format!(r#"{{"id":"{id}","op":"inspect","kind":"lock","name":"{name}"}}"#);
        let invoke_us = ctx.timeline.now_us();
        let outcome = if !*subscribed.borrow()
            || client
                .try_publish(&request_topic, QoS::AtMostOnce, false, payload)
                .is_err()
        {
            "disconnected".to_string()
        } else {
            wait_for(&mut answers, &id).await
        };
        let answer = Answer {
            member,
            invoke_us,
            complete_us: ctx.timeline.now_us(),
            outcome,
        };
        ctx.recorder.with(|history| history.sentinel.push(answer));
        tokio::time::sleep(ASK_EVERY).await;
    }
    poller.abort();
}

/// The outcome of the answer to `id`, or `timeout` after [`ANSWER_WAIT`]. Answers to earlier
/// asks that come late are dropped.
async fn wait_for(
    answers: &mut mpsc::UnboundedReceiver<(Option<String>, String)>,
    id: &str,
) -> String {
    let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
    loop {
        match tokio::time::timeout_at(deadline, answers.recv()).await {
            Ok(Some((Some(answered), outcome))) if answered == id => return outcome,
            Ok(Some(_)) => {}
            Ok(None) => return "disconnected".to_string(),
            Err(_) => return "timeout".to_string(),
        }
    }
}
