//! The formation's controller, chosen by election: control towers campaign for
//! `fleet/controller` (`Session::campaign`), served in arrival order. The leader orders the
//! formation's rounds on the board, each order a `kv.txn` fenced by its leadership's token, and
//! stops at once when `Leadership::lost` resolves; the others wait in the queue and follow who
//! leads (`Agent::observe`), a line per change. Half-way, the ops desk takes the leader off duty
//! (revokes its lease): the next tower leads in the same log entry, and the deposed tower's
//! delayed order, under its old token, is refused by the board.

use anyhow::Context;
use futures_util::StreamExt;
use hivekeeper_agent::protocol::{Done, Inspection, Op, ResourceKind};
use hivekeeper_agent::{Agent, Kv, LeadershipEnd, Txn};

use crate::flights::connect;
use crate::formation::{CONTROLLER, Entry, LANDED, ORDER, Shared, board_now, wait_for_round};

/// Control tower `index`: campaigns for the controller role while it follows who leads, then
/// leads until its leadership is lost. The run aborts the task when the formation is done.
pub(crate) async fn tower(shared: &Shared, index: usize) -> anyhow::Result<()> {
    let me = format!("tower-{index}");
    let config = &shared.config;
    let session = connect(&config.brokers, &me, config.ttl_ms).await?;
    let leadership = tokio::select! {
        won = session.campaign(CONTROLLER, me.clone()) => {
            won.with_context(|| format!("{me} campaigns for {CONTROLLER}"))?
        }
        followed = stand_by(session.agent(), &me) => return followed,
    };
    let token = leadership.token();
    println!("controller: {me} leads (token {token})");
    shared.log.seen().leaders.push((me.clone(), token));
    let kv = session.kv();
    // Dropping `command` at the loss is what stops the orders at once.
    tokio::select! {
        end = leadership.lost() => {
            println!("controller: {me} {}; it stops ordering", ended(end));
            Ok(())
        }
        commanded = command(shared, &kv, &me, token) => commanded,
    }
}

/// How a leadership ended, for the output.
fn ended(end: LeadershipEnd) -> String {
    match end {
        LeadershipEnd::Lost => "lost the leadership (the service ended it)".to_string(),
        LeadershipEnd::Session(state) => format!("lost the leadership (its session: {state:?})"),
        LeadershipEnd::Resigned => "resigned".to_string(),
    }
}

/// Follows who leads while the tower waits in the queue: a line for each new leader other than
/// itself. Ends only with an error.
async fn stand_by(agent: &Agent, me: &str) -> anyhow::Result<()> {
    let mut leaders = agent.observe(CONTROLLER);
    while let Some(leader) = leaders.next().await {
        let leader = leader.with_context(|| format!("{me} observes {CONTROLLER}"))?;
        if let Some(leader) = leader.filter(|leader| leader.value != me) {
            println!(
                "  {me} stands by: {} leads (token {})",
                leader.value, leader.token
            );
        }
    }
    anyhow::bail!("{me}: the observation of {CONTROLLER} ended")
}

/// The controller's work while it leads: orders the next round once the formation has landed
/// the previous one, each order fenced by the leadership's `token`. A round already ordered
/// (by the tower before) is waited for, not ordered again. Once every round has landed it stays
/// the leader, idle, until the run ends.
async fn command(shared: &Shared, kv: &Kv, me: &str, token: u64) -> anyhow::Result<()> {
    loop {
        let (ordered, landed) = board_now(kv).await?;
        if landed >= shared.config.rounds {
            return std::future::pending().await;
        }
        let round = landed + 1;
        if ordered < round {
            let order = kv
                .txn(fenced_order(token, round, me))
                .await
                .with_context(|| format!("{me} orders round {round}"))?;
            if !order.succeeded {
                // The token no longer leads: `lost()` resolves as well, and ends the task.
                println!("controller: {me}'s order for round {round} was refused (token {token})");
                return std::future::pending().await;
            }
            shared.log.seen().order_tokens.push(token);
            println!("controller: {me} orders round {round} (token {token})");
        }
        wait_for_round(kv, LANDED, round).await?;
    }
}

/// The order of round `round` by `tower`, put on the board only while `token` leads the
/// controller election: the service checks it in the txn's own log entry.
fn fenced_order(token: u64, round: u32, tower: &str) -> Txn {
    Txn::new()
        .if_holder(ResourceKind::Election, CONTROLLER, token)
        .then_put(ORDER, Entry::value(round, tower))
}

/// What the ops desk did half-way.
#[derive(Debug)]
pub(crate) struct Handover {
    /// The tower it took off duty.
    pub(crate) deposed: String,
    /// Whether the board refused that tower's delayed order, as it must.
    pub(crate) stale_order_refused: bool,
}

/// The ops desk: once the formation has landed round `after_round`, it takes the leading tower
/// off duty by revoking its lease, as `hivekeeper revoke` does; the service hands the
/// leadership to the next tower in that entry. Then the deposed tower's last order, delayed on
/// its way and carrying its old token, reaches the board, which must refuse it.
pub(crate) async fn take_leader_off_duty(
    shared: &Shared,
    ops: &Agent,
    after_round: u32,
) -> anyhow::Result<Handover> {
    let kv = ops.kv();
    let landed = wait_for_round(&kv, LANDED, after_round);
    shared
        .until_deadline("waiting for the handover's round", landed)
        .await?;
    let inspect = Op::Inspect {
        kind: ResourceKind::Election,
        name: CONTROLLER.to_string(),
    };
    let inspection: Inspection = ops
        .request_as(inspect)
        .await
        .context("inspecting the controller election")?;
    let leader = inspection
        .holders
        .into_iter()
        .next()
        .context("nobody leads the controller election")?;
    let (tower, token) = (leader.agent, leader.token);
    ops.request_as::<Done>(Op::AdminRevoke {
        lease: leader.lease.clone(),
    })
    .await
    .with_context(|| format!("revoking {tower}'s lease"))?;
    println!(
        "ops: {tower} taken off duty: its lease {} revoked (as `hivekeeper revoke --agent \
         {tower}` does)",
        leader.lease
    );
    let late = kv
        .txn(fenced_order(token, after_round + 1, &tower))
        .await
        .context("the delayed order")?;
    println!(
        "ops: {tower}'s delayed order (token {token}) {} by the board",
        if late.succeeded {
            "WAS ACCEPTED"
        } else {
            "was refused"
        }
    );
    Ok(Handover {
        deposed: tower,
        stale_order_refused: !late.succeeded,
    })
}
