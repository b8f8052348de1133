//! Logging: one subscriber for every command, set up once in `main`.
//!
//! ```text
//!  tracing event ─▶ EnvFilter (RUST_LOG, else the command's default at --log-level)
//!                ─▶ fmt layer: Repeats (repeats.rs: a WARN/ERROR kind once a minute, with a
//!                   count) around the text or JSON line format (--log-format)
//!                ─▶ stderr (ANSI colours only when stderr is a terminal and NO_COLOR is unset)
//! ```
//!
//! `serve`'s default filter keeps dependencies' chatter out of the operator's way: openraft's
//! per-RPC replication lines and rustls' per-handshake warnings are off (the transport reports
//! a lost peer once, and TLS failures are counted in metrics); everything else of openraft
//! shows from WARN up, rate-limited like every WARN and ERROR line.

mod repeats;

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use repeats::Repeats;

/// `--log-level`: the least severe level written (RUST_LOG, when set, overrides it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum LogLevel {
    /// Failures only.
    Error,
    /// Failures and what an operator should look at (a peer lost, quorum lost).
    Warn,
    /// Also what happened: start, leadership, membership changes, lease expiry counts, the
    /// admin audit lines.
    Info,
    /// Also routine events: agents connecting and disconnecting, refused CONNECTs.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The level's name in a filter directive.
    fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event: time, level, module, message, fields.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`), for a log shipper.
    Json,
}

/// The filter of `serve` at `level`: Hivekeeper's own lines from `level` up; openraft's from
/// WARN (or `level`, if stricter) up, without its per-RPC replication lines; rustls' errors
/// only.
pub fn serve_filter(level: LogLevel) -> String {
    let level_str = level.as_str();
    let openraft = level.min(LogLevel::Warn).as_str();
    format!(
        "{level_str},openraft={openraft},openraft::replication=off,\
         openraft::engine::handler::replication_handler=error,rustls=error"
    )
}

/// Installs the process's subscriber: `RUST_LOG` if set, else `default_filter`; lines in
/// `line_format` on stderr.
pub fn init(default_filter: &str, line_format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter);
    match line_format {
        LogFormat::Text => registry
            .with(layer.event_format(Repeats::new(format().with_ansi(ansi), false)))
            .init(),
        LogFormat::Json => registry
            .with(
                layer
                    .json()
                    .event_format(Repeats::new(format().json(), true)),
            )
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::{LogLevel, serve_filter};

    #[test]
    fn the_serve_filter_follows_the_level_and_never_lets_openraft_be_louder_than_warn() {
        assert_eq!(
            serve_filter(LogLevel::Info),
            "info,openraft=warn,openraft::replication=off,\
             openraft::engine::handler::replication_handler=error,rustls=error"
        );
        assert!(serve_filter(LogLevel::Debug).starts_with("debug,openraft=warn,"));
        assert!(serve_filter(LogLevel::Error).starts_with("error,openraft=error,"));
    }
}
