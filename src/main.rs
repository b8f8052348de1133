//! The `hivekeeper` command line: `serve` runs a node; `status`, `inspect`, `leases`,
//! `revoke`, `member`, `agent` and `snapshot` are the operator's commands; `kv`, `elect`,
//! `barrier` and `lock` use keys and recipes from the shell (an MQTT client of the service,
//! `admin/`); `bench` measures a running service (the `hivekeeper-bench` crate); `certs dev`
//! writes development certificates. The fault test is a binary of its own,
//! `hivekeeper-nemesis`: this one links no test harness.

mod admin;
mod certs;
mod exposure;
mod log;
mod metrics_port;
mod process_metrics;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Hivekeeper: a replicated coordination service for agent swarms — leases, FIFO locks,
/// counting semaphores and waypoint reservations over MQTT, with a fencing token on every grant.
#[derive(Debug, Parser)]
#[command(name = "hivekeeper", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a node. With no flags: one node (a single-member Raft cluster), data in
    /// ./hivekeeper-data, the agent endpoint (Hivekeeper's own MQTT server, MQTT 3.1.1 and 5)
    /// on 127.0.0.1:1883 and Prometheus metrics on 127.0.0.1:9464. Flags override the config
    /// file, which overrides the defaults. Stops cleanly on Ctrl-C or SIGTERM.
    Serve(Box<ServeArgs>),
    /// Each node's view of the cluster: role, leader, term, log indexes, members.
    Status(admin::StatusArgs),
    /// Who holds a lock, semaphore, waypoint, election or barrier (tokens, lease time left) and
    /// who waits, in order.
    Inspect(admin::InspectArgs),
    /// The resources in use (locks, semaphores, waypoints, elections, barriers), with how many
    /// hold and wait for each: find a name for `inspect`.
    Ls(admin::LsArgs),
    /// Every live lease (or one agent's, --agent): id, agent, TTL and time left.
    Leases(admin::LeasesArgs),
    /// End any agent's lease now, or every lease of one agent (--agent), an operator's
    /// force-release: what it held goes to the next waiters, with higher tokens, and the agent
    /// is told.
    Revoke(admin::RevokeArgs),
    /// The cluster's members: list them, add one (learner, then voter once caught up), remove one.
    Member(admin::MemberArgs),
    /// Accounts (with `serve --auth`): add one (prints its secret once), list, remove, rotate.
    Agent(admin::AgentArgs),
    /// Keys: `get KEY | --prefix P`, `put KEY VALUE`, `del KEY | --prefix P`, `txn` (JSON
    /// from --file or stdin) and `watch KEY | --prefix P [--rev R]`, printing changes as they
    /// happen. `--json` prints the answers and events as JSON lines.
    Kv(admin::KvArgs),
    /// Lead an election: campaign (waiting in line), print the token when leading, hold the
    /// leadership until Ctrl-C, then resign. With --listen, do not campaign: print the leader
    /// and then each change, one line each.
    Elect(admin::ElectArgs),
    /// Pass a double barrier with N members: enter and print the round's generation when all N
    /// have arrived; with --leave, then leave and wait until all have left; with `-- COMMAND`,
    /// run it between the two.
    Barrier(admin::BarrierArgs),
    /// Hold a lock, exclusive or with --shared: with `-- COMMAND`, run it holding the lock
    /// (HIVEKEEPER_LOCK_TOKEN set) and exit with its status; without, print the token and hold
    /// the lock until Ctrl-C or SIGTERM. If the hold is lost meanwhile, the command gets
    /// SIGTERM and this exits 1.
    Lock(admin::LockArgs),
    /// Backups: `save FILE` (online, a consistent snapshot from the leader) and `restore FILE
    /// --data-dir DIR` (offline, seeds a new cluster's member).
    Snapshot(admin::SnapshotArgs),
    /// Measure a running service through the agent SDK over MQTT, one agent = one MQTT
    /// connection and one lease: throughput, acquire and handover latency, fairness, and a
    /// mutual-exclusion check over every grant. Scenarios: uncontended, contended, semaphore,
    /// reclaim, scale, and failover (its own cluster, whose leader it kills or pauses); for
    /// keys and watches, on a cluster of their own: kv-put (puts/s, commit latency), watch
    /// (put → event through a follower; --watchers N pending polls woken by one put) and
    /// kv-fill (K keys, each member's memory); for the recipes, on a cluster of their own:
    /// election (leadership handovers), barrier (N agents released by the last arrival) and
    /// rwlock (readers and a writer on one read-write lock, against the exclusive rate).
    Bench(hivekeeper_bench::BenchArgs),
    /// Certificates: `certs dev --out DIR` writes a development CA, a server certificate,
    /// client and peer certificates, to try TLS and mutual TLS in a minute.
    Certs(certs::CertsArgs),
    /// Print a shell completion script: `hivekeeper completions bash > /etc/bash_completion.d/hivekeeper`
    /// (also zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Flags of `hivekeeper serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML config file (see hivekeeper.example.toml for every setting, commented).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory for the Raft log, vote and snapshots (created if missing). Keep it on a local
    /// disk: every grant waits for its fsync.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address of the agent endpoint, Hivekeeper's own MQTT server (MQTT 3.1.1 and 5, serving
    /// only Hivekeeper's topics): an IP address or a hostname (`localhost:1883`), and a port.
    /// Loopback by default: give 0.0.0.0:1883 to accept agents from the network.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "mqtt_url", value_parser = serve::parse_listen)]
    mqtt_listen: Option<SocketAddr>,
    /// PEM certificate chain for the agent endpoint: with --mqtt-tls-key, it speaks MQTT over
    /// TLS only (`mode.tls_cert` in the config file).
    #[arg(
        long,
        value_name = "FILE",
        requires = "mqtt_tls_key",
        conflicts_with = "mqtt_url"
    )]
    mqtt_tls_cert: Option<PathBuf>,
    /// PEM private key of --mqtt-tls-cert (`mode.tls_key`).
    #[arg(long, value_name = "FILE", requires = "mqtt_tls_cert")]
    mqtt_tls_key: Option<PathBuf>,
    /// PEM CA for mutual TLS on the agent endpoint (`mode.client_ca`): every agent must present
    /// a certificate signed by it, whose CN is its agent id (the client id must equal it).
    #[arg(long, value_name = "FILE", requires = "mqtt_tls_cert")]
    mqtt_client_ca: Option<PathBuf>,
    /// Use an existing broker instead of the agent endpoint, e.g. mqtt://127.0.0.1:1883
    /// (Mosquitto: set `set_tcp_nodelay true`, or every round trip costs about 44 ms). With a
    /// config file whose [mqtt.mode] is external, this replaces only its `url`: the file's
    /// `username`, `password` and `client_id` still apply (docs/SECURITY.md).
    #[arg(long, value_name = "URL")]
    mqtt_url: Option<String>,
    /// The shared-subscription group the members of a cluster read requests through on the
    /// external broker (`$share/{GROUP}/{prefix}/req/+`, `share_group` in [mqtt.mode];
    /// default `hivekeeper`), so each request reaches one member. Needs an external broker
    /// (--mqtt-url, or an external [mqtt.mode]); a single node given one shares its
    /// subscription too (docs/CLUSTER.md).
    #[arg(long, value_name = "GROUP")]
    mqtt_share_group: Option<String>,
    /// Topic prefix: agents use {prefix}/req/{agent}, {prefix}/rsp/{agent}, {prefix}/evt/{agent}.
    #[arg(long, value_name = "PREFIX")]
    topic_prefix: Option<String>,
    /// Address of the metrics port: Prometheus /metrics, and /health and /ready for probes
    /// (an IP address or a hostname, and a port).
    #[arg(long, value_name = "HOST:PORT", value_parser = serve::parse_listen)]
    metrics_listen: Option<SocketAddr>,
    /// This node's name in a cluster (etcd's --name); it must appear in --initial-cluster.
    /// Without it the node runs alone.
    #[arg(long, value_name = "NAME", requires = "initial_cluster")]
    name: Option<String>,
    /// Every initial member and its inter-node address, the same list on every member, e.g.
    /// n1=127.0.0.1:7401,n2=127.0.0.1:7402,n3=127.0.0.1:7403. Each node listens for its peers
    /// at its own address. The first start of an empty data dir forms the cluster.
    #[arg(long, value_name = "NAME=HOST:PORT,...", requires = "name")]
    initial_cluster: Option<String>,
    /// `new` (default) to form a new cluster from --initial-cluster; `existing` to join a
    /// running one (after `hivekeeper member add NAME=HOST:PORT` on it).
    #[arg(long, value_name = "STATE", requires = "name")]
    initial_cluster_state: Option<ClusterStateArg>,
    /// Listen for peers here instead of at this node's --initial-cluster address (e.g.
    /// 0.0.0.0:7401 while peers dial 10.0.0.5:7401).
    #[arg(long, value_name = "HOST:PORT", requires = "name", value_parser = serve::parse_listen)]
    peer_listen: Option<SocketAddr>,
    /// Requests a second one agent may send to this node (a token bucket per agent; past it
    /// the answer is `rate_limited`). 0 turns the limit off. Default 2000 (`[node]
    /// rate_per_s_max`).
    #[arg(long, value_name = "N")]
    rate_per_s_max: Option<u32>,
    /// Authentication and roles: agents connect with username = client id = agent id and
    /// their account's secret (`hivekeeper agent add`). The first start creates the `admin`
    /// account and writes its secret to <data-dir>/admin.secret (mode 0600). Same as
    /// `[auth] enabled = true` in the config file.
    #[arg(long)]
    auth: bool,
    /// Start even though a listener faces the network unprotected: the agent endpoint on a
    /// non-loopback address without --auth and TLS, the peer port without mutual TLS, or
    /// /metrics anywhere but loopback. Without it `serve` refuses, naming them; with it, it
    /// logs one WARN line naming them at every start (docs/SECURITY.md).
    #[arg(long)]
    insecure: bool,
    /// This member's PEM certificate for mutual TLS on the peer port (`peer_tls_cert`); it
    /// must name the member (--name) as its CN or a SAN DNS name, and peers dialling it check
    /// a SAN DNS name. Needs --peer-tls-key and --peer-ca.
    #[arg(long, value_name = "FILE", requires_all = ["name", "peer_tls_key", "peer_ca"])]
    peer_tls_cert: Option<PathBuf>,
    /// The PEM private key of --peer-tls-cert (`peer_tls_key`).
    #[arg(long, value_name = "FILE", requires = "peer_tls_cert")]
    peer_tls_key: Option<PathBuf>,
    /// The PEM CA of every member's peer certificate (`peer_ca`): a peer is accepted only with
    /// a certificate of this CA naming a member of the current configuration.
    #[arg(long, value_name = "FILE", requires = "peer_tls_cert")]
    peer_ca: Option<PathBuf>,
    /// The least severe log level written: error, warn, info, debug or trace. `RUST_LOG`, when
    /// set, overrides it (e.g. `RUST_LOG=info,openraft=debug`).
    #[arg(long, value_name = "LEVEL", value_enum, default_value_t = log::LogLevel::Info)]
    log_level: log::LogLevel,
    /// `text` (one line per event) or `json` (one JSON object per line). Either way a WARN or
    /// ERROR line that repeats is written once a minute, with a `suppressed` count of the rest.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = log::LogFormat::Text)]
    log_format: log::LogFormat,
}

/// `--initial-cluster-state`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ClusterStateArg {
    /// Form a new cluster.
    New,
    /// Join a running cluster.
    Existing,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The admin commands print their own one-line errors; the SDK's reconnect chatter would
    // only bury them. The bench runs thousands of SDK agents, each logging its session at info:
    // by default only warnings, so the report is not buried.
    let (default_filter, format) = match &cli.command {
        Command::Serve(args) => (log::serve_filter(args.log_level), args.log_format),
        Command::Bench(_) => ("warn".to_string(), log::LogFormat::Text),
        _ => ("error".to_string(), log::LogFormat::Text),
    };
    log::init(&default_filter, format);
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Status(args) => admin::status(args),
        Command::Inspect(args) => admin::inspect(args),
        Command::Ls(args) => admin::ls(args),
        Command::Leases(args) => admin::leases(args),
        Command::Revoke(args) => admin::revoke(args),
        Command::Member(args) => admin::member(args),
        Command::Agent(args) => admin::agent(args),
        Command::Kv(args) => admin::kv(args),
        Command::Elect(args) => admin::elect(args),
        Command::Barrier(args) => admin::barrier(args),
        Command::Lock(args) => admin::lock(args),
        Command::Snapshot(args) => admin::snapshot(args),
        // The failover scenario's members run this very binary.
        Command::Bench(args) => std::env::current_exe()
            .map_err(anyhow::Error::from)
            .and_then(|hivekeeper| Ok(hivekeeper_bench::run(args, &hivekeeper)?)),
        Command::Certs(args) => certs::run(args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "hivekeeper",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hivekeeper: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// `hivekeeper bench --help` names every scenario in its summary, and so does `--help`.
    #[test]
    fn the_bench_summary_names_every_scenario() {
        let cli = Cli::command();
        let bench = cli.find_subcommand("bench").expect("bench");
        let about = bench.get_about().expect("a summary").to_string();
        let scenarios: Vec<&str> = bench.get_subcommands().map(|s| s.get_name()).collect();
        assert!(scenarios.len() >= 11, "scenarios: {scenarios:?}");
        for scenario in scenarios {
            assert!(about.contains(scenario), "{scenario} missing from: {about}");
        }
    }

    /// Every command that takes credentials names both environment variables in its help:
    /// `--user` shows HIVEKEEPER_USER as clap shows an `env`, and `--password-file` names
    /// HIVEKEEPER_PASSWORD (its own flag stays hidden, so no secret is typed on a command line).
    #[test]
    fn every_command_with_credentials_names_their_environment_variables() {
        fn visit(command: &clap::Command, path: &str, found: &mut Vec<String>) {
            let path = format!("{path} {}", command.get_name());
            if let Some(user) = command.get_arguments().find(|arg| arg.get_id() == "user") {
                assert_eq!(
                    user.get_env().and_then(|env| env.to_str()),
                    Some("HIVEKEEPER_USER"),
                    "{path}"
                );
                assert!(!user.is_hide_env_set(), "{path}");
                let file = command
                    .get_arguments()
                    .find(|arg| arg.get_id() == "password_file")
                    .unwrap_or_else(|| panic!("{path}: --user without --password-file"));
                let help = file.get_help().map(ToString::to_string).unwrap_or_default();
                assert!(help.contains("HIVEKEEPER_PASSWORD"), "{path}: {help}");
                found.push(path.clone());
            }
            for sub in command.get_subcommands() {
                visit(sub, &path, found);
            }
        }
        let mut found = Vec::new();
        visit(&Cli::command(), "", &mut found);
        for command in [
            "status",
            "inspect",
            "ls",
            "leases",
            "revoke",
            "bench uncontended",
        ] {
            assert!(
                found
                    .iter()
                    .any(|path| path == &format!(" hivekeeper {command}")),
                "{command} takes no credentials? {found:?}"
            );
        }
    }

    /// `agent add --help` lists each role's ops from the protocol's one list, the observer's
    /// `admin.resources` included.
    #[test]
    fn agent_add_role_help_lists_the_ops_each_role_adds() {
        let cli = Cli::command();
        let add = cli
            .find_subcommand("agent")
            .and_then(|agent| agent.find_subcommand("add"))
            .expect("agent add");
        let role = add
            .get_arguments()
            .find(|arg| arg.get_id() == "role")
            .expect("--role");
        let help = role.get_help().expect("a help text").to_string();
        assert!(
            help.contains(
                "observer (also admin.status, admin.leases, admin.resources: watching the \
                 service, changing nothing; it reads keys and never writes them)"
            ),
            "{help}"
        );
        assert!(
            help.contains("admin (also admin.snapshot, admin.revoke,"),
            "{help}"
        );
    }

    /// The completion script knows the subcommands and the flags, in each shell asked for.
    #[test]
    fn completions_cover_the_commands_in_bash_zsh_and_fish() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "hivekeeper", &mut script);
            let script = String::from_utf8(script).expect("UTF-8");
            for word in [
                "serve",
                "ls",
                "inspect",
                "snapshot",
                "completions",
                "log-format",
                "brokers",
            ] {
                assert!(script.contains(word), "{shell}: no {word}");
            }
        }
    }
}
