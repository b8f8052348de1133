//! Recipes: what etcd, ZooKeeper and Consul users build, here either decided by the service
//! (leader election, read-write and multi-locks, double barriers: one log entry decides,
//! fenced by tokens) or built on
//! keys and watches with [`Kv`](crate::Kv), [`Watch`](crate::Watch) and
//! [`KvCache`](crate::KvCache). A watch is a [`futures_util::Stream`]: read it with
//! `StreamExt::next` from `futures-util` (or `tokio-stream`).
//!
//! # Leader election: [`Session::campaign`](crate::Session::campaign)
//!
//! Candidates wait in arrival order; the leader holds a [`Leadership`](crate::Leadership)
//! with a fencing token, which every action it takes carries. Race the work against
//! [`Leadership::lost`](crate::Leadership::lost): it resolves when the service ends the
//! leadership (`election.lost`), when the session is no longer live, or on a resign.
//! Dropping the guard resigns; a campaign dropped while it waits never leaves a leadership
//! behind. Anyone can follow who leads with [`Agent::observe`](crate::Agent::observe), one
//! item per change.
//!
//! ```no_run
//! # async fn lead(agent: hivekeeper_agent::Agent) -> Result<(), hivekeeper_agent::AgentError> {
//! use futures_util::StreamExt;
//! let session = agent.session(5_000).await?;
//! let leadership = session.campaign("hive/gateway", "10.0.0.7:7000").await?;
//! let lost = leadership.lost();
//! tokio::select! {
//!     end = lost => println!("no longer leading: {end:?}"),
//!     () = serve_as_gateway(leadership.token()) => leadership.resign().await?,
//! }
//! // Elsewhere, a follower:
//! let mut leaders = agent.observe("hive/gateway");
//! while let Some(leader) = leaders.next().await {
//!     println!("gateway: {:?}", leader?.map(|leader| leader.value));
//! }
//! # Ok(()) }
//! # async fn serve_as_gateway(token: u64) {}
//! ```
//!
//! # Readers and writers, several locks at once, bounded holds
//!
//! [`Session::read_lock`](crate::Session::read_lock) holds a lock shared with other readers,
//! [`Session::write_lock`](crate::Session::write_lock) (the same as `lock`) alone; the queue is
//! FIFO whatever the mode, so a waiting writer is not starved by later readers. A writer done
//! writing can [`Guard::downgrade`](crate::Guard::downgrade) to a reader without letting
//! anyone in between, keeping its token. [`Session::lock_all`](crate::Session::lock_all) takes
//! several locks as one grant with one token, which cannot deadlock however other agents order
//! the names. A max-hold ([`AcquireOptions`](crate::AcquireOptions)) bounds a hold even while
//! the session lives, and [`Guard::ended`](crate::Guard::ended) says why a hold ended
//! ([`HoldEnd`](crate::HoldEnd)); a lock-delay ([`SessionOptions`](crate::SessionOptions))
//! keeps a dead agent's locks from anyone for a while.
//!
//! ```no_run
//! # async fn rw(agent: hivekeeper_agent::Agent) -> Result<(), hivekeeper_agent::AgentError> {
//! use std::time::Duration;
//! use hivekeeper_agent::{AcquireOptions, LockMode, Resource, SessionOptions, Wait};
//! let options = SessionOptions { lock_delay: Duration::from_secs(5) };
//! let session = agent.session_with(5_000, options).await?;
//! let mut map = session.write_lock("hive/map").await?;
//! println!("writing the map under token {}", map.token());
//! map.downgrade().await?; // readers come in; the token stays valid
//! let bays = session.lock_all(["bay/1", "bay/2"], LockMode::Exclusive).await?;
//! let bounded = AcquireOptions::max_hold(Duration::from_secs(30));
//! let pump = session.acquire_with(Resource::lock("pump-2"), Wait::UntilGranted, bounded);
//! let pump = pump.await?;
//! tokio::select! {
//!     end = pump.ended() => println!("pump-2 ended: {end:?}"), // HoldEnd::MaxHold after 30 s
//!     () = tokio::time::sleep(Duration::from_secs(10)) => pump.release().await?,
//! }
//! bays.release().await?; // lock.release_all
//! # Ok(()) }
//! ```
//!
//! # A double barrier: [`Session::barrier`](crate::Session::barrier)
//!
//! Nobody starts until all `count` members have arrived, nobody goes on until all have
//! finished; the service answers every member in the one log entry where the last arrives,
//! and again where the last leaves, with the round's generation. A member that dies is never
//! counted; dropping the handle inside a round leaves it.
//!
//! ```no_run
//! # async fn survey(session: hivekeeper_agent::Session) -> Result<(), hivekeeper_agent::AgentError> {
//! let mut barrier = session.barrier("survey/start", 3);
//! let generation = barrier.enter().await?; // all three are here
//! println!("surveying in round {generation}");
//! barrier.leave().await?; // all three are done
//! # Ok(()) }
//! ```
//!
//! # Config distribution: a [`KvCache`](crate::KvCache) on a prefix
//!
//! One writer puts the hive's settings under `hive/config/`; each sensor keeps a local copy
//! that follows every change, reads it without a round trip, and learns which revision it
//! reflects. A cursor that falls behind the service's history (`compacted`) makes the cache
//! read the prefix again by itself.
//!
//! ```no_run
//! # async fn config(agent: hivekeeper_agent::Agent) -> Result<(), hivekeeper_agent::AgentError> {
//! use hivekeeper_agent::KvCache;
//! // The writer (an operator's tool, a controller):
//! let put = agent.kv().put("hive/config/sample_rate_hz", "10").await?;
//! // Every sensor:
//! let config = KvCache::start(&agent.kv(), "hive/config/").await?;
//! config.wait_for(put.revision).await?; // read-your-writes, when the writer is this agent
//! let rate = config.get("hive/config/sample_rate_hz").map(|kv| kv.value);
//! let snapshot = config.snapshot(); // the whole map and the revision it reflects, together
//! println!("rate {rate:?} as of revision {}", snapshot.revision);
//! # Ok(()) }
//! ```
//!
//! # Presence: leased keys
//!
//! Each drone puts `presence/{id}` bound to its session's lease. The key lives while the
//! session does: when the drone stops, crashes or loses its link for longer than the lease's
//! TTL, the service deletes the key in the same entry that ends the lease, and every watcher
//! sees the delete. No heartbeat key, no reaper of one's own.
//!
//! ```no_run
//! # async fn presence(agent: hivekeeper_agent::Agent) -> Result<(), hivekeeper_agent::AgentError> {
//! use futures_util::StreamExt;
//! use hivekeeper_agent::protocol::kv::EventKind;
//! // The drone:
//! let session = agent.session(5_000).await?;
//! session.kv().put_leased("presence/drone-7", r#"{"pad":"3"}"#).await?;
//! // A controller: who is here now, then who comes and goes.
//! let kv = agent.kv();
//! let here = kv.get_prefix("presence/").await?;
//! let mut changes = kv.watch_prefix("presence/").after(here.revision).events();
//! while let Some(event) = changes.next().await {
//!     let event = event?;
//!     match event.kind {
//!         EventKind::Put => println!("{} is up", event.kv.key),
//!         EventKind::Delete => println!("{} is gone", event.kv.key),
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # A counter by txn: compare the version, put
//!
//! Read the counter, then write the next value only if nobody wrote in between (its
//! `version` is still the one read); otherwise read again and retry. The txn is one log entry,
//! so two agents never both win from the same version.
//!
//! ```no_run
//! # async fn count(kv: hivekeeper_agent::Kv) -> Result<(), hivekeeper_agent::AgentError> {
//! use hivekeeper_agent::Txn;
//! use hivekeeper_agent::protocol::kv::CompareOp;
//! let key = "hive/landings";
//! loop {
//!     let read = kv.get(key).await?;
//!     // A missing key has version 0: the first increment creates it.
//!     let (version, count) = read.kv.map_or((0, 0), |kv| {
//!         (kv.version, kv.value.parse::<u64>().unwrap_or(0))
//!     });
//!     let txn = Txn::new()
//!         .if_version(key, CompareOp::Eq, version)
//!         .then_put(key, (count + 1).to_string());
//!     if kv.txn(txn).await?.succeeded {
//!         break;
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # A work queue: claim by txn
//!
//! Jobs are keys under `queue/`. A worker claims one by creating `claim/{job}` bound to its
//! session's lease, only if no claim exists (`version == 0`) and the job is still there
//! (`version > 0`). Done, it deletes the job and the claim in one txn. A worker that dies
//! leaves no claim behind (its lease's end deletes it), so the job is claimable again.
//!
//! ```no_run
//! # async fn work(session: hivekeeper_agent::Session) -> Result<(), hivekeeper_agent::AgentError> {
//! use hivekeeper_agent::Txn;
//! use hivekeeper_agent::kv::put;
//! use hivekeeper_agent::protocol::kv::{CompareOp, Put, TxnOp};
//! let kv = session.kv();
//! for job in kv.get_prefix("queue/").await?.kvs {
//!     let claim = format!("claim/{}", job.key);
//!     let mine = Put {
//!         lease: Some(session.lease().to_string()),
//!         ..put(claim.clone(), "worker-3")
//!     };
//!     let claimed = Txn::new()
//!         .if_version(claim.clone(), CompareOp::Eq, 0)
//!         .if_version(job.key.clone(), CompareOp::Gt, 0)
//!         .then(TxnOp::Put(mine));
//!     if !kv.txn(claimed).await?.succeeded {
//!         continue; // another worker has it, or it is done
//!     }
//!     println!("working on {} = {}", job.key, job.value);
//!     kv.txn(Txn::new().then_delete(job.key.clone()).then_delete(claim)).await?;
//! }
//! # Ok(()) }
//! ```
