//! `hivekeeper serve`: a node, its MQTT transport and the bridge between them, plus /metrics.
//!
//! ```text
//!  config (defaults < TOML file < flags)
//!    ├─ metrics port (metrics_port.rs): /metrics, /health, /ready
//!    └─ hivekeeper::Service::start (src/service.rs, shared with the examples):
//!         Node::start (redb, Raft, actors), Transport::start (the agent endpoint or an
//!         external broker), bridge::run between them, counters copied into metrics once a second
//!  Ctrl-C / SIGTERM / an actor failure ─▶ transport, bridge, node shut down in that order
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use hivekeeper::Service;
use hivekeeper::bridge;
use hivekeeper_coordinator::node::metrics::{
    LEASES_KEEPALIVE_TTL_USED_RATIO, TTL_USED_RATIO_BUCKETS,
};
use hivekeeper_coordinator::node::{ClusterConfig, ClusterState, Health, NodeConfig};
use hivekeeper_coordinator::raft::{ApplyPanic, EXIT_APPLY_PANICKED};
use hivekeeper_coordinator::state_machine::KvLimits;
use hivekeeper_mqtt::{ExternalConfig, Mode};
use serde::{Deserialize, Serialize};

use crate::metrics_port::{self, ConsoleSource, HealthSource};
use crate::{ClusterStateArg, ServeArgs, process_metrics};

/// Upper bounds of the buckets of every `*_seconds` histogram, so they export as Prometheus
/// histograms (aggregatable across nodes) rather than summaries. From half a millisecond (a
/// request answered from memory) to a minute (a long wait in a lock's queue or a long hold),
/// roughly 1-2.5-5 per decade.
const SECONDS_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// How often the metrics recorder drains histogram samples into their buckets.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Everything `serve` can be configured with; the TOML file has the same shape.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// The node: data dir, Raft timing, replicated limits, ingress bounds.
    pub node: NodeConfig,
    /// The MQTT side: the agent endpoint or an external broker, topic prefix, queue sizes.
    pub mqtt: hivekeeper_mqtt::Config,
    /// The Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// Accounts and roles.
    pub auth: AuthConfig,
    /// `[kv]`: the key space's replicated bounds, proposed by the leader like `[node.limits]`
    /// (docs/OPERATIONS.md).
    pub kv: KvLimits,
}

/// `[auth]`: accounts and roles (docs/PROTOCOL.md, authentication).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Agents must connect with username = client id = their agent id and their account's
    /// secret, and each request is checked against the account's role. The first leader
    /// creates the `admin` account and writes its secret to `<data-dir>/admin.secret`.
    /// Off by default: the loopback quickstart needs no account.
    pub enabled: bool,
}

/// Where the metrics port (/metrics, /health, /ready, the web console) is served.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Listen address; loopback by default. A hostname is resolved when the file is read.
    #[serde(deserialize_with = "hivekeeper_listen::deserialize")]
    pub listen: SocketAddr,
    /// The web console's map tiles, a URL with `{z}`, `{x}` and `{y}` (docs/HTTP.md); absent:
    /// the airspace is drawn without a map.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_tile_url: Option<String>,
    /// The port's certificate chain (PEM): with `tls_key`, the port is served over TLS (HTTPS)
    /// and the console's session cookie is `Secure`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The port's private key (PEM), with `tls_cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<std::path::PathBuf>,
}

impl MetricsConfig {
    /// The port's TLS acceptor when `tls_cert` and `tls_key` are set; refused when only one is.
    fn tls(&self) -> anyhow::Result<Option<hivekeeper_console::TlsAcceptor>> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => {
                let cert_key = hivekeeper_tls::CertKey {
                    cert: cert.clone(),
                    key: key.clone(),
                };
                let config = hivekeeper_tls::server_config(&cert_key, None)
                    .context("the metrics port's TLS ([metrics] tls_cert, tls_key)")?;
                Ok(Some(hivekeeper_console::TlsAcceptor::from(config)))
            }
            _ => bail!("[metrics] tls_cert and tls_key go together: give both or neither"),
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9464),
            console_tile_url: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// A listen address from the command line (`hivekeeper_listen::resolve`: an IP address or a
/// hostname, and a port).
pub fn parse_listen(text: &str) -> Result<SocketAddr, hivekeeper_listen::ListenAddrError> {
    hivekeeper_listen::resolve(text)
}

/// Defaults, then the file, then the flags.
fn load(args: ServeArgs) -> anyhow::Result<ServeConfig> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config file {}", path.display()))?;
            toml::from_str(&text)
                .with_context(|| format!("config file {} is not valid", path.display()))?
        }
        None => ServeConfig::default(),
    };
    if let Some(dir) = args.data_dir {
        config.node.data_dir = dir;
    }
    if let Some(listen) = args.mqtt_listen {
        match &mut config.mqtt.mode {
            Mode::Embedded(embedded) => embedded.listen = listen,
            Mode::External(_) => bail!(
                "--mqtt-listen is for the agent endpoint, but the config file selects an external one"
            ),
        }
    }
    if args.mqtt_tls_cert.is_some() || args.mqtt_tls_key.is_some() || args.mqtt_client_ca.is_some()
    {
        let Mode::Embedded(embedded) = &mut config.mqtt.mode else {
            bail!(
                "--mqtt-tls-cert, --mqtt-tls-key and --mqtt-client-ca are for the agent endpoint, \
                 but the config file selects an external broker"
            );
        };
        embedded.tls_cert = args.mqtt_tls_cert.or(embedded.tls_cert.take());
        embedded.tls_key = args.mqtt_tls_key.or(embedded.tls_key.take());
        embedded.client_ca = args.mqtt_client_ca.or(embedded.client_ca.take());
    }
    if let Some(url) = args.mqtt_url {
        match &mut config.mqtt.mode {
            // The flag names the broker; the file's login and client id still apply.
            Mode::External(external) => external.url = url,
            Mode::Embedded(_) => {
                config.mqtt.mode = Mode::External(ExternalConfig {
                    url,
                    ..ExternalConfig::default()
                })
            }
        }
    }
    if let Some(group) = args.mqtt_share_group {
        let Mode::External(external) = &mut config.mqtt.mode else {
            bail!(
                "--mqtt-share-group needs an external broker (--mqtt-url, or an external \
                 [mqtt.mode] in the config file): the agent endpoint has no shared subscriptions"
            );
        };
        external.share_group = Some(group);
    }
    if let Some(prefix) = args.topic_prefix {
        config.mqtt.topic_prefix = prefix;
    }
    if let Some(listen) = args.metrics_listen {
        config.metrics.listen = listen;
    }
    if let Some(rate_per_s_max) = args.rate_per_s_max {
        config.node.rate_per_s_max = rate_per_s_max;
    }
    if args.auth {
        config.auth.enabled = true;
    }
    config.node.auth_enabled = config.auth.enabled;
    config.node.kv = config.kv.clone();
    if let (Some(name), Some(initial_cluster)) = (args.name, args.initial_cluster) {
        config.node.cluster = Some(ClusterConfig::new(name, initial_cluster));
    }
    if let Some(cluster) = &mut config.node.cluster {
        if let Some(state) = args.initial_cluster_state {
            cluster.initial_cluster_state = match state {
                ClusterStateArg::New => ClusterState::New,
                ClusterStateArg::Existing => ClusterState::Existing,
            };
        }
        cluster.peer_listen = args.peer_listen.or(cluster.peer_listen.take());
        cluster.peer_tls_cert = args.peer_tls_cert.or(cluster.peer_tls_cert.take());
        cluster.peer_tls_key = args.peer_tls_key.or(cluster.peer_tls_key.take());
        cluster.peer_ca = args.peer_ca.or(cluster.peer_ca.take());
    }
    config.node.validate().context("node settings")?;
    config.mqtt.validate().context("mqtt settings")?;
    Ok(config)
}

/// Runs `serve` to completion.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let insecure = args.insecure;
    let config = load(args)?;
    read_endpoint_tls(&config)?;
    let exposed = crate::exposure::exposed(&config);
    if !exposed.is_empty() {
        let what = crate::exposure::describe(&exposed);
        if !insecure {
            bail!(
                "refusing to start: {what}. Turn on what is missing, listen on loopback, or \
                 pass --insecure to start anyway"
            );
        }
        tracing::warn!("--insecure: {what}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(serve(config, insecure));
    drop(runtime);
    // A panic in the state machine is a bug that every replica hits on the same entry, at
    // every restart: its own exit status (docs/OPERATIONS.md), so a supervisor does not take
    // it for an ordinary failure and restart the node into it forever unnoticed.
    if let Err(error) = &served
        && error.downcast_ref::<ApplyPanic>().is_some()
    {
        eprintln!("hivekeeper: {error:#}");
        std::process::exit(i32::from(EXIT_APPLY_PANICKED));
    }
    served
}

/// Reads and parses the agent endpoint's certificate, key and client CA, so that a bad file
/// fails the start before the node opens (or creates) its data dir and starts Raft: the
/// endpoint starts after the node. The peer TLS files are read by the node before it opens
/// the data dir.
fn read_endpoint_tls(config: &ServeConfig) -> anyhow::Result<()> {
    if let Mode::Embedded(embedded) = &config.mqtt.mode
        && let (Some(cert), Some(key)) = (&embedded.tls_cert, &embedded.tls_key)
    {
        let cert_key = hivekeeper_tls::CertKey {
            cert: cert.clone(),
            key: key.clone(),
        };
        hivekeeper_tls::server_config(&cert_key, embedded.client_ca.as_deref())
            .context("agent endpoint TLS")?;
    }
    Ok(())
}

/// Installs the metrics recorder with the histograms' buckets, and its upkeep task.
fn install_recorder() -> anyhow::Result<metrics_exporter_prometheus::PrometheusHandle> {
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
            &SECONDS_BUCKETS,
        )
        .context("histogram buckets")?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(LEASES_KEEPALIVE_TTL_USED_RATIO.into()),
            &TTL_USED_RATIO_BUCKETS,
        )
        .context("histogram buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    // Histograms are drained into their buckets by the upkeep; the exporter's own listener
    // ran it every 5 s, so does this.
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(METRICS_UPKEEP).await;
            upkeep.run_upkeep();
        }
    });
    Ok(prometheus)
}

async fn serve(config: ServeConfig, insecure: bool) -> anyhow::Result<()> {
    let metrics_tls = config.metrics.tls()?;
    let metrics_listener = tokio::net::TcpListener::bind(config.metrics.listen)
        .await
        .with_context(|| {
            format!(
                "serving /metrics on {} (give another --metrics-listen, or `listen` in the \
                 config file's [metrics])",
                config.metrics.listen
            )
        })?;
    let prometheus = install_recorder()?;
    let health: HealthSource = Arc::default();
    let console: ConsoleSource = Arc::default();
    tokio::spawn(metrics_port::serve(
        metrics_listener,
        prometheus,
        health.clone(),
        console.clone(),
        metrics_tls.clone(),
    ));
    // Help texts go to the recorder just installed; described before, they would be lost.
    hivekeeper_coordinator::node::metrics::describe();
    bridge::describe_metrics();
    process_metrics::export_build_info();
    let data_dir = config.node.data_dir.clone();
    let cluster = config.node.cluster.as_ref().map_or_else(
        || "single node".to_string(),
        |cluster| format!("member {} of {}", cluster.name, cluster.initial_cluster),
    );
    let service = Arc::new(Service::start(config.node, config.mqtt.clone()).await?);
    let probed = Arc::downgrade(&service);
    let _ = health.set(Box::new(move || match probed.upgrade() {
        Some(service) => service.health(),
        None => Health {
            healthy: false,
            ready: false,
            detail: "stopping: the node is shutting down".into(),
        },
    }));
    // The web console: read-only without authentication unless `--insecure`; its cookie is
    // `Secure` when the port is served over TLS.
    let options = hivekeeper_console::ConsoleOptions {
        writes_without_auth: insecure,
        secure_cookies: metrics_tls.is_some(),
        tile_url: config.metrics.console_tile_url.clone(),
    };
    let backend = hivekeeper::console_backend::NodeConsole {
        node: service.node_handle(),
        data_dir: data_dir.clone(),
    };
    let _ = console.set(hivekeeper_console::Console::new(backend, options));
    let mqtt = match &config.mqtt.mode {
        Mode::Embedded(_) => service
            .mqtt_addrs()
            .iter()
            .map(|addr| format!("agent endpoint on {addr}"))
            .collect::<Vec<_>>()
            .join(", "),
        Mode::External(external) => format!("external broker {}", external.url),
    };
    tracing::info!(
        data_dir = %data_dir.display(),
        %cluster,
        metrics = %config.metrics.listen,
        topic_prefix = %config.mqtt.topic_prefix,
        "hivekeeper ready: {mqtt}"
    );
    let ended_by = tokio::select! {
        _ = shutdown_signal() => None,
        reason = service.failed() => Some(reason),
    };
    tracing::info!("shutting down");
    let service = unshared(service).await?;
    let apply_panic = service.apply_panic();
    let stopped = service.shutdown().await;
    if let Some(panic) = apply_panic {
        return Err(anyhow::Error::new(panic).context("the node failed"));
    }
    // The failure that ended the node is the news; a failing shutdown after it (a full disk
    // also fails the final flush) must not hide it.
    match (ended_by, stopped) {
        (Some(reason), Ok(())) => bail!("the node failed: {reason}"),
        (Some(reason), Err(error)) => {
            bail!("the node failed: {reason} (then stopping it failed too: {error})")
        }
        (None, stopped) => Ok(stopped?),
    }
}

/// The service once no health probe holds it (the metrics port holds it only for the moment
/// of a `/health` or `/ready`, through a weak reference).
async fn unshared(mut service: Arc<Service>) -> anyhow::Result<Service> {
    for _ in 0..100 {
        match Arc::try_unwrap(service) {
            Ok(service) => return Ok(service),
            Err(shared) => service = shared,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("the service was still in use by a health probe after 1 s: not stopped cleanly")
}

/// Ctrl-C or SIGTERM: what stops `serve`, and what the commands that hold something until
/// stopped (`lock`) wait for.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use hivekeeper_coordinator::ConfigError;

    use super::{MetricsConfig, ServeConfig};

    /// `serve`'s argument list, parsed as the command line would be.
    fn serve_args(args: &[&str]) -> Result<crate::ServeArgs, clap::Error> {
        use clap::Parser;
        let cli = crate::Cli::try_parse_from(["hivekeeper", "serve"].iter().chain(args))?;
        match cli.command {
            crate::Command::Serve(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn tls_flags_become_the_config_keys_and_go_together() {
        let args = serve_args(&[
            "--name",
            "n1",
            "--initial-cluster",
            "n1=127.0.0.1:7401",
            "--mqtt-tls-cert",
            "s.crt",
            "--mqtt-tls-key",
            "s.key",
            "--mqtt-client-ca",
            "ca.crt",
            "--peer-tls-cert",
            "p.crt",
            "--peer-tls-key",
            "p.key",
            "--peer-ca",
            "ca.crt",
        ])
        .expect("parses");
        let config = super::load(args).expect("loads");
        let hivekeeper_mqtt::Mode::Embedded(embedded) = &config.mqtt.mode else {
            panic!("the agent endpoint");
        };
        let path = |p: &str| Some(std::path::PathBuf::from(p));
        assert_eq!(
            (&embedded.tls_cert, &embedded.tls_key, &embedded.client_ca),
            (&path("s.crt"), &path("s.key"), &path("ca.crt"))
        );
        let cluster = config.node.cluster.expect("a member");
        assert_eq!(
            (
                &cluster.peer_tls_cert,
                &cluster.peer_tls_key,
                &cluster.peer_ca
            ),
            (&path("p.crt"), &path("p.key"), &path("ca.crt"))
        );
        for partial in [
            &["--mqtt-tls-cert", "s.crt"][..],
            &["--mqtt-client-ca", "ca.crt"],
            &[
                "--name",
                "n1",
                "--initial-cluster",
                "n1=127.0.0.1:7401",
                "--peer-tls-cert",
                "p.crt",
                "--peer-tls-key",
                "p.key",
            ],
        ] {
            let error = serve_args(partial).expect_err("an incomplete set is refused");
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{partial:?}"
            );
        }
    }

    #[test]
    fn a_member_may_use_an_external_broker_with_a_share_group() {
        let member = [
            "--name",
            "n1",
            "--initial-cluster",
            "n1=127.0.0.1:7401",
            "--mqtt-url",
            "mqtt://127.0.0.1:1884",
        ];
        let load = |more: &[&str]| {
            let args: Vec<&str> = member.iter().chain(more).copied().collect();
            super::load(serve_args(&args).expect("parses"))
        };
        let config = load(&["--mqtt-share-group", "east"]).expect("loads");
        let hivekeeper_mqtt::Mode::External(external) = &config.mqtt.mode else {
            panic!("an external broker");
        };
        assert_eq!(external.share_group.as_deref(), Some("east"));
        let config = load(&[]).expect("loads");
        let hivekeeper_mqtt::Mode::External(external) = &config.mqtt.mode else {
            panic!("an external broker");
        };
        assert_eq!(
            external.share_group, None,
            "left to the service (`as_member`)"
        );
    }

    /// The commented cluster block of the example, uncommented, is a valid member config.
    #[test]
    fn the_example_cluster_block_parses_and_validates() {
        let block: String = include_str!("../hivekeeper.example.toml")
            .lines()
            .skip_while(|line| !line.starts_with("# [node.cluster]"))
            .take_while(|line| line.starts_with("# "))
            .filter(|line| line.starts_with("# [") || line.contains(" = "))
            .map(|line| line.trim_start_matches("# ").to_string() + "\n")
            .collect();
        let config: ServeConfig = toml::from_str(&block).expect("the cluster block parses");
        let cluster = config.node.cluster.clone().expect("a cluster section");
        assert_eq!(cluster.name, "n1");
        assert_eq!(cluster.members().expect("members").len(), 3);
        let tls = cluster
            .peer_tls()
            .expect("all three")
            .expect("peer TLS set");
        assert_eq!(tls.ca, std::path::PathBuf::from("certs/ca.crt"));
        config.node.validate().expect("valid");
    }

    #[test]
    fn a_name_missing_from_the_initial_cluster_is_refused() {
        let config: ServeConfig = toml::from_str(
            "[node.cluster]\nname = \"n9\"\ninitial_cluster = \"n1=127.0.0.1:7401\"\n",
        )
        .expect("parses");
        let error = config.node.validate().expect_err("n9 is not a member");
        assert!(
            matches!(&error, ConfigError::NameNotInCluster { name, .. } if name == "n9"),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains("\"n9\" is not in initial_cluster"),
            "{error}"
        );
    }

    /// The shipped example must parse and say exactly what the defaults are, so the file can
    /// never drift from the code.
    #[test]
    fn the_example_config_parses_and_equals_the_defaults() {
        let example: ServeConfig = toml::from_str(include_str!("../hivekeeper.example.toml"))
            .expect("hivekeeper.example.toml parses");
        let defaults = ServeConfig::default();
        assert_eq!(format!("{example:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn the_metrics_port_takes_tls_cert_and_key_together_or_neither() {
        let plain = MetricsConfig::default();
        assert!(plain.tls().expect("no TLS").is_none());
        let half = MetricsConfig {
            tls_cert: Some("server.crt".into()),
            ..MetricsConfig::default()
        };
        let Err(error) = half.tls() else {
            panic!("a cert without a key was taken");
        };
        assert!(error.to_string().contains("go together"), "{error}");
    }

    #[test]
    fn listen_flags_take_hostnames_as_well_as_addresses() {
        let args = serve_args(&[
            "--mqtt-listen",
            "localhost:18830",
            "--metrics-listen",
            "127.0.0.1:19464",
        ])
        .expect("parses");
        let config = super::load(args).expect("loads");
        let hivekeeper_mqtt::Mode::Embedded(embedded) = &config.mqtt.mode else {
            panic!("the agent endpoint");
        };
        assert_eq!(embedded.listen.to_string(), "127.0.0.1:18830");
        assert_eq!(config.metrics.listen.to_string(), "127.0.0.1:19464");
        assert_eq!(
            super::parse_listen("[::1]:1883").map(|addr| addr.to_string()),
            Ok("[::1]:1883".to_string())
        );
        for bad in [
            "localhost",
            "localhost:http",
            ":1883",
            "no-such-host.invalid:1883",
        ] {
            let error = serve_args(&["--mqtt-listen", bad]).expect_err(bad);
            assert!(error.to_string().contains(bad), "{bad}: {error}");
        }
    }

    /// The config file's listen keys take hostnames too.
    #[test]
    fn config_listen_keys_take_hostnames() {
        let config: ServeConfig = toml::from_str(
            "[mqtt.mode]\nkind = \"embedded\"\nlisten = \"localhost:1883\"\n[metrics]\nlisten = \"localhost:9464\"\n\
             [node.cluster]\nname = \"n1\"\ninitial_cluster = \"n1=127.0.0.1:7401\"\n\
             peer_listen = \"localhost:7401\"\n",
        )
        .expect("parses");
        let hivekeeper_mqtt::Mode::Embedded(embedded) = &config.mqtt.mode else {
            panic!("the agent endpoint");
        };
        assert_eq!(embedded.listen.to_string(), "127.0.0.1:1883");
        assert_eq!(config.metrics.listen.to_string(), "127.0.0.1:9464");
        let cluster = config.node.cluster.expect("a member");
        assert_eq!(
            cluster.peer_listen.map(|addr| addr.to_string()),
            Some("127.0.0.1:7401".into())
        );
        let error = toml::from_str::<ServeConfig>("[metrics]\nlisten = \"localhost\"\n")
            .expect_err("no port");
        assert!(error.to_string().contains("is not HOST:PORT"), "{error}");
    }

    #[test]
    fn the_kv_section_sets_the_key_space_bounds() {
        let load_file = |text: &str| {
            let dir = tempfile::tempdir().expect("a temp dir");
            let path = dir.path().join("hivekeeper.toml");
            std::fs::write(&path, text).expect("write the config");
            let args = serve_args(&["--config", path.to_str().expect("UTF-8")]).expect("parses");
            super::load(args)
        };
        let config =
            load_file("[kv]\nhistory_events_max = 50\nhistory_bytes_max = 4096\n").expect("loads");
        assert_eq!(config.node.kv.history_events_max, 50);
        assert_eq!(config.node.kv.history_bytes_max, 4_096);
        assert_eq!(
            config.node.kv.keys_max,
            hivekeeper_coordinator::state_machine::KV_LIMITS_DEFAULT.keys_max,
            "a key left out keeps its default"
        );
        config.node.validate().expect("valid");

        let typo = "[kv]\nhistory_event_max = 50\n";
        let error = toml::from_str::<ServeConfig>(typo).expect_err("unknown key");
        assert!(error.to_string().contains("history_event_max"), "{error}");
        let nested = "[node.kv]\nhistory_events_max = 50\n";
        let error = toml::from_str::<ServeConfig>(nested).expect_err("the section is [kv]");
        assert!(error.to_string().contains("kv"), "{error}");

        let error = load_file("[kv]\nvalue_bytes_max = 10000\n").expect_err("past a request");
        assert_eq!(
            format!("{error:#}"),
            "node settings: kv.value_bytes_max = 10000 is outside 1..=8192 (8192: a value \
             travels inside one request, whose MQTT payload is at most this)"
        );
    }

    #[test]
    fn an_unknown_key_is_an_error_not_a_silent_default() {
        let typo = "[node]\ndata_dri = \"x\"\n";
        let error = toml::from_str::<ServeConfig>(typo).expect_err("unknown key");
        assert!(error.to_string().contains("data_dri"), "{error}");
    }
}
