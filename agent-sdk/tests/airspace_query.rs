//! `Agent::airspace_query` against the fake service: the query goes out as the wire's
//! `airspace.query` with exactly its fields, a refusal comes back as the typed error, and a
//! query the service would refuse is refused before anything is sent. The rows and pages of a
//! real service are tested in the root package's tests/e2e_airspace_sdk.rs, which can start
//! one.

mod common;

use common::{broker_with_fake, connected_agent, within};
use hivekeeper_agent::protocol::{ErrorCode, Op, QueryVolume, Volume};
use hivekeeper_agent::{AgentError, AirspaceQuery};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_is_sent_with_its_fields_and_a_bad_one_is_refused_before_sending() {
    let (port, fake) = broker_with_fake().await;
    let agent = connected_agent("planner", port).await;
    let leg = Volume {
        lat: 47.3769,
        lon: 8.5417,
        radius_m: 20.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms: 1_000,
        end_ms: 2_000,
    };
    let query = AirspaceQuery::route(vec![leg]).after("east").limit(5);
    // The fake refuses every airspace.query; the SDK hands its refusal on, typed.
    let refused = within(10, "airspace.query", agent.airspace_query(&query)).await;
    assert_eq!(
        refused,
        Err(AgentError::Service {
            code: ErrorCode::BadRequest,
            message: "fake: not implemented".into(),
        })
    );
    let sent = fake.received_op("airspace.query");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0].op,
        Op::AirspaceQuery {
            volume: None,
            volumes: Some(vec![leg]),
            after: Some("east".into()),
            limit: Some(5),
        }
    );

    // An empty window, a limit of 0, a route of no volumes: refused here with the service's
    // message.
    let empty = QueryVolume {
        lat: 47.3769,
        lon: 8.5417,
        radius_m: 20.0,
        alt_min_m: 0.0,
        alt_max_m: 120.0,
        start_ms: Some(5),
        end_ms: Some(5),
    };
    let refusals = [
        (
            AirspaceQuery::volume(empty),
            "airspace.query: `volume`: the window is empty: `end_ms` (5) is not after \
             `start_ms` (5)",
        ),
        (
            query.clone().limit(0),
            "airspace.query: `limit` is 0, it must be from 1 to 100",
        ),
        (
            AirspaceQuery::route(Vec::new()),
            "airspace.query: `volumes` has 0 volumes, a route has 1 to 64",
        ),
    ];
    for (bad, message) in refusals {
        assert_eq!(
            agent.airspace_query(&bad).await,
            Err(AgentError::Service {
                code: ErrorCode::BadRequest,
                message: message.into(),
            })
        );
    }
    assert_eq!(
        fake.received_op("airspace.query").len(),
        1,
        "nothing more was sent"
    );
}
