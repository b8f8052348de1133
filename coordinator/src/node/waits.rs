//! The waits component: every agent write this node has taken and not answered yet, with its
//! commit deadline. It owns a request's lifecycle from submission to its one final answer, so
//! a front door only decodes, submits and publishes.
//!
//! ```text
//!  NodeHandle::submit(write) ─▶ register(origin, respond)   commit deadline = now + propose_timeout
//!  its command applied (fan-out, on the sm worker) or the proposer's result (a follower's
//!  forwarded batch), whichever comes first:
//!      replied(origin, Queued) ─▶ queued: permit released, commit deadline disarmed
//!      replied(origin, other)  ─▶ respond(final answer)
//!  a queued request's Event::Respond (grant, timeout, lease end) ─▶ respond(final answer)
//!  proposer failed (no leader, overloaded, ...) ─▶ failed(origin, error) ─▶ respond(unavailable)
//!  timer task: commit deadline ─▶ respond(unavailable: no commit within ...)
//!  cluster watch: this leader lost its quorum ─▶ fail_all(error): every pending request
//!                 this member is cut off     ─▶ fail_queued(error): the queued waits
//!                 ─▶ respond(unavailable)
//! ```
//!
//! A queued request answered `unavailable` by `fail_all` is not withdrawn: it still waits in
//! the replicated queue. The agent resends its id (to another member, typically), and a
//! resend of a queued id is answered when it is granted (PROTOCOL.md §7).
//!
//! A queued request's `wait_ms` is not timed here: its deadline is in the replicated state
//! (the machine's `wait_deadline.rs`) and the leader's keeper proposes its end, whose entry
//! answers `timeout` on every node through `Event::Respond`. So this node arms no wait timer
//! and proposes nothing: a follower whose leader is gone while its agent waits still gets the
//! final answer, from the entry the next leader's keeper proposes (the deadline was in the
//! state it took over); a node cut off from the majority answers when it hears the log again.
//!
//! Invariants:
//! 1. An entry leaves the map exactly when its final answer is handed to `respond`, so a
//!    request gets at most one final answer from this node, and none after it.
//! 2. An entry has at most one armed deadline, its commit deadline, and only while it is not
//!    queued. `deadlines` holds exactly the armed ones.
//! 3. A resend of a pending request id (the SDK's same-id retry) does not take a second entry:
//!    its `respond` replaces the first (the newest connection or reply route is the live one).
//! 4. `respond` is never called with the map locked.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hivekeeper_protocol::{Response, Success};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::NodeError;
use super::metrics;
use crate::answer::Answer;
use crate::raft::Origin;
use crate::state_machine::Reply;

/// Hands a request's final answer to whoever asked (a front door publishes it). Called once at
/// most; dropped uncalled when a resend of the same id replaced it.
pub type Respond = Box<dyn FnOnce(Response) + Send>;

/// One armed commit deadline's key: when, then a sequence number to keep keys distinct. When
/// it passes, the request was not answered within `propose_timeout`: `unavailable`.
type DeadlineKey = (Instant, u64);

/// A request waiting for its final answer.
struct Pending {
    /// Where the final answer goes.
    respond: Respond,
    /// The op's wire name (the metrics' `op` label).
    op: &'static str,
    /// When it was submitted (the first send, for a resend).
    started: Instant,
    /// Whether the machine queued it.
    queued: bool,
    /// Its ingress permit, held until it is queued or answered.
    permit: Option<OwnedSemaphorePermit>,
    /// The armed commit deadline, if any (invariant 2).
    deadline: Option<DeadlineKey>,
    /// `admin.agent.add`/`rotate`: the secret the node made and its hash. The secret goes into
    /// the answer only when the applied entry stored this hash (`auth.rs`).
    reveal: Option<SecretToReveal>,
}

/// A secret to put into an account op's answer, and the hash that must match.
pub(crate) struct SecretToReveal {
    /// The secret.
    pub(crate) secret: String,
    /// Its hash, as the command carried it.
    pub(crate) hash: String,
}

/// The map and the deadlines, changed together under one lock.
#[derive(Default)]
struct Inner {
    /// Pending requests by origin.
    pending: HashMap<Origin, Pending>,
    /// Armed deadlines, earliest first.
    deadlines: BTreeMap<DeadlineKey, Origin>,
    /// The next deadline's sequence number.
    seq: u64,
}

impl Inner {
    /// Arms `origin`'s commit deadline at `at`, replacing what it had armed.
    fn arm(&mut self, origin: &Origin, at: Instant) {
        self.disarm(origin);
        self.seq += 1;
        let key = (at, self.seq);
        if let Some(pending) = self.pending.get_mut(origin) {
            pending.deadline = Some(key);
            self.deadlines.insert(key, origin.clone());
        }
    }

    /// Disarms `origin`'s deadline, if any.
    fn disarm(&mut self, origin: &Origin) {
        if let Some(key) = self
            .pending
            .get_mut(origin)
            .and_then(|pending| pending.deadline.take())
        {
            self.deadlines.remove(&key);
        }
    }

    /// Removes `origin`'s entry and its deadline.
    fn take(&mut self, origin: &Origin) -> Option<Pending> {
        self.disarm(origin);
        self.pending.remove(origin)
    }
}

/// Pending agent writes and their deadlines. Shared by the node handle (register), the
/// proposer (results and failures), the fan-out (applied answers) and its own timer task.
pub(crate) struct Waits {
    /// The state.
    inner: Mutex<Inner>,
    /// Wakes the timer task when an earlier deadline is armed.
    wake: Notify,
    /// How long a request may wait for its commit.
    commit_timeout: Duration,
}

impl Waits {
    /// An empty component; start its timer with [`Waits::run_timer`].
    pub(crate) fn new(commit_timeout: Duration) -> Waits {
        Waits {
            inner: Mutex::default(),
            wake: Notify::new(),
            commit_timeout,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves the state whole (no callback runs under the lock), so a
        // poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Waits::register`] for an `admin.agent.add`/`rotate`, whose answer gets `reveal`'s
    /// secret when the entry stored its hash. A resend of a pending id keeps the first's
    /// secret: its hash is the one the entry stores.
    pub(crate) fn register_revealing(
        &self,
        origin: Origin,
        op: &'static str,
        permit: OwnedSemaphorePermit,
        respond: Respond,
        reveal: SecretToReveal,
    ) {
        self.register(origin.clone(), op, permit, respond);
        if let Some(pending) = self.lock().pending.get_mut(&origin)
            && pending.reveal.is_none()
        {
            pending.reveal = Some(reveal);
        }
    }

    /// Takes a write of `origin` before it is handed to the proposer (its answer can come back
    /// before the proposer's caller would look). A resend of a pending id keeps the first's
    /// entry, start and permit, with the resend's `respond`.
    pub(crate) fn register(
        &self,
        origin: Origin,
        op: &'static str,
        permit: OwnedSemaphorePermit,
        respond: Respond,
    ) {
        let now = Instant::now();
        let mut inner = self.lock();
        if let Some(pending) = inner.pending.get_mut(&origin) {
            pending.respond = respond;
            return;
        }
        inner.pending.insert(
            origin.clone(),
            Pending {
                respond,
                op,
                started: now,
                queued: false,
                permit: Some(permit),
                deadline: None,
                reveal: None,
            },
        );
        let at = now + self.commit_timeout;
        let earliest = inner
            .deadlines
            .keys()
            .next()
            .is_none_or(|(first, _)| at < *first);
        inner.arm(&origin, at);
        drop(inner);
        if earliest {
            self.wake.notify_one();
        }
    }

    /// Whether `origin` still waits for its answer here: not answered yet (by its command,
    /// a failure, its commit deadline or a lost quorum). The proposer proposes only these.
    pub(crate) fn is_pending(&self, origin: &Origin) -> bool {
        self.lock().pending.contains_key(origin)
    }

    /// The machine's direct reply to `origin`'s command: `Queued` means committed (the commit
    /// deadline no longer applies; the final answer comes from the log), anything else is its
    /// final answer. Nothing happens when the request is not pending here (answered already,
    /// or submitted on another member).
    pub(crate) fn replied(&self, origin: &Origin, reply: Reply) {
        let mut inner = self.lock();
        let Some(pending) = inner.pending.get_mut(origin) else {
            return;
        };
        if reply != Reply::Queued {
            let pending = inner.take(origin).expect("the entry was just found");
            drop(inner);
            finish(pending, &origin.request_id, Ok(reply));
            return;
        }
        pending.queued = true;
        pending.permit = None;
        // Its wait, if it has a `wait_ms`, is timed by the log (the module's doc).
        inner.disarm(origin);
    }

    /// The final answer of a queued request (an applied `Event::Respond`). Returns the reply
    /// back when the request is not pending here: the caller still publishes it (the agent may
    /// have queued it before this process started).
    pub(crate) fn deferred(&self, origin: &Origin, reply: Reply) -> Option<Reply> {
        let Some(pending) = self.lock().take(origin) else {
            return Some(reply);
        };
        finish(pending, &origin.request_id, Ok(reply));
        None
    }

    /// The proposer could not get `origin`'s command committed. A queued entry is left alone:
    /// the failure was a resend's, and the first send still waits in the machine's queue.
    pub(crate) fn failed(&self, origin: &Origin, error: &NodeError) {
        let mut inner = self.lock();
        if inner
            .pending
            .get(origin)
            .is_none_or(|pending| pending.queued)
        {
            return;
        }
        let pending = inner.take(origin).expect("the entry was just found");
        drop(inner);
        finish(pending, &origin.request_id, Err(error.clone()));
    }

    /// Answers every pending request with `error`, queued ones too: this leader can no longer
    /// commit, so nothing here would answer them until a quorum is back. Returns how many
    /// were answered.
    pub(crate) fn fail_all(&self, error: &NodeError) -> usize {
        let drained: Vec<(Origin, Pending)> = {
            let mut inner = self.lock();
            inner.deadlines.clear();
            inner.pending.drain().collect()
        };
        Self::fail(drained, error)
    }

    /// Answers the requests waiting in a queue with `error`: this member is cut off from the
    /// log that would end their waits. Requests still on their way to the leader are left to
    /// the forwarder (it fails over to the next leader, or answers when none comes): a member
    /// merely slow to hear an election on a loaded machine must not drop them. Returns how
    /// many were answered.
    pub(crate) fn fail_queued(&self, error: &NodeError) -> usize {
        // A queued entry has no armed deadline (invariant 2): nothing to disarm.
        let drained: Vec<(Origin, Pending)> = self
            .lock()
            .pending
            .extract_if(|_, pending| pending.queued)
            .collect();
        Self::fail(drained, error)
    }

    /// Hands each of `drained` its `error`; returns how many.
    fn fail(drained: Vec<(Origin, Pending)>, error: &NodeError) -> usize {
        let count = drained.len();
        for (origin, mut pending) in drained {
            pending.deadline = None;
            finish(pending, &origin.request_id, Err(error.clone()));
        }
        count
    }

    /// Requests pending now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().pending.len()
    }

    /// Runs the commit deadlines until aborted (at the node's shutdown): a passed one answers
    /// `unavailable`.
    pub(crate) async fn run_timer(self: Arc<Self>) {
        let commit_timeout_ms = u64::try_from(self.commit_timeout.as_millis()).unwrap_or(u64::MAX);
        loop {
            let now = Instant::now();
            let mut expired = Vec::new();
            let next = {
                let mut inner = self.lock();
                while let Some((&key, _)) = inner.deadlines.first_key_value() {
                    if key.0 > now {
                        break;
                    }
                    let origin = inner.deadlines.remove(&key).expect("the first key exists");
                    if let Some(mut pending) = inner.pending.remove(&origin) {
                        pending.deadline = None;
                        expired.push((origin, pending));
                    }
                }
                inner.deadlines.keys().next().map(|(at, _)| *at)
            };
            for (origin, pending) in expired {
                let error = NodeError::CommitTimeout {
                    timeout_ms: commit_timeout_ms,
                };
                finish(pending, &origin.request_id, Err(error));
            }
            let woken = self.wake.notified();
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = woken => {}
                    }
                }
                None => woken.await,
            }
        }
    }
}

/// Hands `pending`'s final answer to its `respond`, counted.
fn finish(pending: Pending, request_id: &str, answer: Result<Reply, NodeError>) {
    let respond = match (pending.reveal, &answer) {
        (Some(reveal), Ok(Reply::Account { secret_hash, .. })) if *secret_hash == reveal.hash => {
            let respond = pending.respond;
            Box::new(move |mut response: Response| {
                if let Ok(Success::AccountIssued(account)) = &mut response.outcome {
                    account.secret = Some(reveal.secret);
                }
                respond(response);
            })
        }
        (_, _) => pending.respond,
    };
    let answer = answer.map(Answer::Machine);
    answer_with(pending.op, pending.started, request_id, answer, respond);
}

/// Builds the wire response of a final answer, counts it, and hands it to `respond`. Used for
/// every final answer the node gives, pending here or answered at once.
pub(crate) fn answer_with(
    op: &'static str,
    started: Instant,
    request_id: &str,
    answer: Result<Answer, NodeError>,
    respond: Respond,
) {
    let response = match answer {
        Ok(answer) => {
            if let Answer::Machine(Reply::Fence { valid, .. }) = &answer {
                metrics::fence_checked(*valid);
            }
            match crate::response::response(request_id, &answer) {
                Some(response) => response,
                // Only a queueable write is answered `Queued`, and those are pending here.
                None => Response::error(
                    Some(request_id.to_string()),
                    hivekeeper_protocol::ErrorCode::Unavailable,
                    "the request was queued but its final answer was lost; retry the same id",
                ),
            }
        }
        Err(error) => Response::error(
            Some(request_id.to_string()),
            error.code(),
            error.to_string(),
        ),
    };
    metrics::answered(op, started, &response);
    respond(response);
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use hivekeeper_protocol::{ErrorCode, Granted};
    use tokio::sync::Semaphore;

    use super::*;

    const COMMIT_TIMEOUT: Duration = Duration::from_millis(5_000);

    fn origin(id: &str) -> Origin {
        Origin {
            agent: "drone-1".into(),
            request_id: id.into(),
        }
    }

    /// A `Respond` that records what it is given.
    fn recorder() -> (Arc<StdMutex<Vec<Response>>>, Respond) {
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let sink = seen.clone();
        let respond: Respond = Box::new(move |response| {
            sink.lock().expect("test lock").push(response);
        });
        (seen, respond)
    }

    fn permit() -> OwnedSemaphorePermit {
        Arc::new(Semaphore::new(1))
            .try_acquire_owned()
            .expect("a fresh semaphore has a permit")
    }

    /// The timer task.
    fn timer(waits: &Arc<Waits>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(waits.clone().run_timer())
    }

    /// Stops a timer task that must still be running (a panic inside it ends it early).
    fn stop(timer: tokio::task::JoinHandle<()>) {
        assert!(!timer.is_finished(), "the timer task ended early");
        timer.abort();
    }

    fn responses(seen: &Arc<StdMutex<Vec<Response>>>) -> Vec<Response> {
        seen.lock().expect("test lock").clone()
    }

    #[tokio::test(start_paused = true)]
    async fn an_immediate_reply_is_the_final_answer_and_ends_the_entry() {
        let waits = Waits::new(COMMIT_TIMEOUT);
        let (seen, respond) = recorder();
        waits.register(origin("a1"), "lock.acquire", permit(), respond);
        waits.replied(&origin("a1"), Reply::Granted { token: 7 });
        assert_eq!(
            responses(&seen),
            vec![Response::ok("a1", Granted { token: 7 })]
        );
        assert_eq!(waits.len(), 0);
        // A second copy of the reply (the proposer's, after the fan-out's) finds nothing.
        waits.replied(&origin("a1"), Reply::Granted { token: 7 });
        assert_eq!(responses(&seen).len(), 1);
    }

    /// A queued request's `wait_ms` is timed by the log, not here: past it (and past the commit
    /// timeout) nothing happens on this node until the entry that ends the wait is applied.
    #[tokio::test(start_paused = true)]
    async fn a_queued_wait_is_answered_by_the_log_never_by_a_timer_here() {
        let waits = Arc::new(Waits::new(COMMIT_TIMEOUT));
        let timer = timer(&waits);
        let (seen, respond) = recorder();
        // A `lock.acquire` with `wait_ms: 300`, queued.
        waits.register(origin("a1"), "lock.acquire", permit(), respond);
        waits.replied(&origin("a1"), Reply::Queued);
        tokio::time::sleep(COMMIT_TIMEOUT + Duration::from_millis(301)).await;
        assert!(
            responses(&seen).is_empty(),
            "no timer answers a queued wait"
        );
        assert_eq!(waits.len(), 1);
        let timeout = Reply::Refused {
            code: ErrorCode::Timeout,
            message: "wait_ms elapsed before the resource was granted".into(),
        };
        assert_eq!(waits.deferred(&origin("a1"), timeout), None);
        assert_eq!(
            responses(&seen),
            vec![Response::error(
                Some("a1".into()),
                ErrorCode::Timeout,
                "wait_ms elapsed before the resource was granted"
            )]
        );
        assert_eq!(waits.len(), 0);
        stop(timer);
    }

    #[tokio::test(start_paused = true)]
    async fn no_commit_in_time_is_answered_unavailable() {
        let waits = Arc::new(Waits::new(COMMIT_TIMEOUT));
        let timer = timer(&waits);
        let (seen, respond) = recorder();
        waits.register(origin("g1"), "lease.grant", permit(), respond);
        tokio::time::sleep(COMMIT_TIMEOUT + Duration::from_millis(1)).await;
        assert_eq!(
            responses(&seen),
            vec![Response::error(
                Some("g1".into()),
                ErrorCode::Unavailable,
                "no commit within 5000 ms"
            )]
        );
        assert_eq!(waits.len(), 0);
        stop(timer);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resend_replaces_the_first_respond_and_is_answered_once() {
        let waits = Waits::new(COMMIT_TIMEOUT);
        let (first, respond) = recorder();
        waits.register(origin("a1"), "lock.acquire", permit(), respond);
        waits.replied(&origin("a1"), Reply::Queued);
        let (second, respond) = recorder();
        waits.register(origin("a1"), "lock.acquire", permit(), respond);
        // The resend's own reply is `Queued` again (the dedup memory): still one entry.
        waits.replied(&origin("a1"), Reply::Queued);
        assert_eq!(waits.len(), 1);
        assert_eq!(
            waits.deferred(&origin("a1"), Reply::Granted { token: 9 }),
            None
        );
        assert!(responses(&first).is_empty());
        assert_eq!(
            responses(&second),
            vec![Response::ok("a1", Granted { token: 9 })]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_ends_a_request_not_yet_queued_but_not_a_queued_one() {
        let waits = Waits::new(COMMIT_TIMEOUT);
        let (seen, respond) = recorder();
        waits.register(origin("a1"), "lock.acquire", permit(), respond);
        waits.replied(&origin("a1"), Reply::Queued);
        waits.failed(&origin("a1"), &NodeError::Stopping);
        assert!(
            responses(&seen).is_empty(),
            "a resend's failure leaves the queued first"
        );
        let (seen, respond) = recorder();
        waits.register(origin("g1"), "lease.grant", permit(), respond);
        waits.failed(&origin("g1"), &NodeError::NoLeader { waited_ms: 2_000 });
        let [response] = &responses(&seen)[..] else {
            panic!("one answer");
        };
        let error = response.outcome.as_ref().expect_err("unavailable");
        assert_eq!(error.code, ErrorCode::Unavailable);
        assert!(
            error.message.contains("no leader known after 2000 ms"),
            "{}",
            error.message
        );
    }

    /// A node that lost its quorum (or is cut off) answers everything pending at once, the
    /// queued wait too, and the log's later answer for it is handed back to be published.
    #[tokio::test(start_paused = true)]
    async fn fail_all_answers_every_pending_request_queued_or_not_once() {
        let waits = Arc::new(Waits::new(COMMIT_TIMEOUT));
        let timer = timer(&waits);
        let (queued, respond) = recorder();
        waits.register(origin("a1"), "lock.acquire", permit(), respond);
        waits.replied(&origin("a1"), Reply::Queued);
        let (proposed, respond) = recorder();
        waits.register(origin("g1"), "lease.grant", permit(), respond);
        let error = NodeError::Stopping;
        assert_eq!(waits.fail_all(&error), 2);
        assert_eq!(waits.len(), 0);
        for (id, seen) in [("a1", &queued), ("g1", &proposed)] {
            assert_eq!(
                responses(seen),
                vec![Response::error(
                    Some(id.into()),
                    ErrorCode::Unavailable,
                    "the node is stopping"
                )]
            );
        }
        // The commit deadline went with it: nothing more when it passes.
        tokio::time::sleep(COMMIT_TIMEOUT + Duration::from_millis(1)).await;
        assert_eq!(responses(&proposed).len(), 1);
        let grant = Reply::Granted { token: 4 };
        assert_eq!(waits.deferred(&origin("a1"), grant.clone()), Some(grant));
        assert_eq!(waits.fail_all(&error), 0);
        stop(timer);
    }

    /// A cut-off member answers only its queued waits: a request on its way to the leader is
    /// the forwarder's to fail over or answer.
    #[tokio::test(start_paused = true)]
    async fn fail_queued_answers_the_waits_and_leaves_requests_in_flight() {
        let waits = Waits::new(COMMIT_TIMEOUT);
        let (queued, respond) = recorder();
        waits.register(origin("a1"), "lock.acquire", permit(), respond);
        waits.replied(&origin("a1"), Reply::Queued);
        let (in_flight, respond) = recorder();
        waits.register(origin("g1"), "lease.grant", permit(), respond);
        assert_eq!(waits.fail_queued(&NodeError::Stopping), 1);
        assert_eq!(responses(&queued).len(), 1);
        assert!(responses(&in_flight).is_empty());
        assert_eq!(waits.len(), 1);
        waits.replied(&origin("g1"), Reply::Done);
        assert_eq!(responses(&in_flight).len(), 1);
    }

    #[test]
    fn a_deferred_answer_for_a_request_not_pending_here_is_handed_back() {
        let waits = Waits::new(COMMIT_TIMEOUT);
        let reply = Reply::Granted { token: 3 };
        assert_eq!(waits.deferred(&origin("x"), reply.clone()), Some(reply));
    }
}
