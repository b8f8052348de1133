//! Repeated warnings and errors, one line per kind per interval, with a count of the rest.
//!
//! A dead peer makes openraft log one ERROR per read request ("timeout while confirming
//! leadership for read request", hundreds a second under load), and any fault that repeats
//! (a refused dial, a failing disk) would do the same. [`Repeats`] wraps the line formatter:
//! a WARN or ERROR line of a kind already written in the last [`REPEAT_INTERVAL`] is not
//! written, only counted, and the next line of that kind written says how many were left out
//! (`suppressed=41` in text, `"suppressed":41` in JSON). INFO and below pass untouched.
//!
//! A kind is a call site and the peer the line is about (its `peer` or `target` field: openraft
//! names the peer `target`), so one dead peer's lines never hide another's. Lines of the
//! target `hivekeeper::cluster` (a peer lost or back, quorum lost or regained) are never held
//! back: each reports a change, once, and a flapping peer's second outage is news too.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber, callsite};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::registry::LookupSpan;

/// How long after writing a WARN or ERROR line the same kind of line is only counted.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(60);

/// The target whose lines are written every time (`hivekeeper_coordinator::raft::CLUSTER_TARGET`,
/// not imported: the binary's log set-up does not depend on the coordinator for a string).
const ALWAYS_WRITTEN_TARGET: &str = "hivekeeper::cluster";

/// Most kinds remembered at once: past it the oldest windows are forgotten (their next line
/// is written), so a flood of distinct peers cannot grow the map without bound.
const KINDS_MAX: usize = 1_024;

/// A line formatter `F` that writes repeated WARN and ERROR lines once per [`REPEAT_INTERVAL`].
pub struct Repeats<F> {
    /// The formatter of the lines that are written (text or JSON).
    inner: F,
    /// Whether `inner` writes JSON objects (the count goes inside the object).
    json: bool,
    /// Each kind's window: when its last line was written and how many were left out since.
    windows: Mutex<HashMap<Kind, Window>>,
    /// The window's length; [`REPEAT_INTERVAL`] except in tests.
    interval: Duration,
}

/// A call site and the peer its line is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Kind {
    /// The line's call site.
    callsite: callsite::Identifier,
    /// The value of its `peer` or `target` field, if it has one.
    peer: Option<String>,
}

/// One kind's state.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// When the last line of this kind was written.
    written_at: Instant,
    /// Lines of this kind left out since.
    suppressed: u64,
}

impl<F> Repeats<F> {
    /// Wraps `inner`; `json` says whether it writes JSON objects.
    pub fn new(inner: F, json: bool) -> Repeats<F> {
        Repeats::with_interval(inner, json, REPEAT_INTERVAL)
    }

    /// Like [`Repeats::new`] with another window length.
    pub fn with_interval(inner: F, json: bool, interval: Duration) -> Repeats<F> {
        Repeats {
            inner,
            json,
            windows: Mutex::new(HashMap::new()),
            interval,
        }
    }

    /// Whether a line of `kind` is written now, and how many of its kind were left out
    /// before it.
    fn admit(&self, kind: Kind, now: Instant) -> Option<u64> {
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(window) = windows.get_mut(&kind) {
            if now.duration_since(window.written_at) < self.interval {
                window.suppressed += 1;
                return None;
            }
            let suppressed = window.suppressed;
            *window = Window {
                written_at: now,
                suppressed: 0,
            };
            return Some(suppressed);
        }
        if windows.len() >= KINDS_MAX {
            let interval = self.interval;
            windows.retain(|_, window| now.duration_since(window.written_at) < interval);
            if windows.len() >= KINDS_MAX {
                windows.clear();
            }
        }
        windows.insert(
            kind,
            Window {
                written_at: now,
                suppressed: 0,
            },
        );
        Some(0)
    }
}

/// Finds the `peer` (or openraft's `target`) field of a line.
#[derive(Default)]
struct PeerField(Option<String>);

impl Visit for PeerField {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if matches!(field.name(), "peer" | "target") {
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if matches!(field.name(), "peer" | "target") {
            self.0 = Some(value.to_string());
        }
    }
}

impl<S, N, F> FormatEvent<S, N> for Repeats<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        if *metadata.level() > Level::WARN || metadata.target() == ALWAYS_WRITTEN_TARGET {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut peer = PeerField::default();
        event.record(&mut peer);
        let kind = Kind {
            callsite: metadata.callsite(),
            peer: peer.0,
        };
        // Left out: nothing is written (the fmt layer writes the empty line as no bytes).
        let Some(suppressed) = self.admit(kind, Instant::now()) else {
            return Ok(());
        };
        if suppressed == 0 {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        match body.strip_suffix('}') {
            Some(object) if self.json => writeln!(writer, "{object},\"suppressed\":{suppressed}}}"),
            _ => writeln!(writer, "{body} suppressed={suppressed}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format;

    use super::Repeats;

    /// Every line written, shared with the test.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("not poisoned").clone()).expect("utf-8")
        }
    }

    /// Logs `emit` through a text (or JSON) subscriber whose window is `interval`.
    fn logged(json: bool, interval: Duration, emit: impl FnOnce()) -> String {
        let lines = Lines::default();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(lines.clone())
            .with_ansi(false)
            .without_time();
        let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = if json {
            let format = format().json().without_time();
            Box::new(
                tracing_subscriber::registry().with(
                    layer
                        .json()
                        .event_format(Repeats::with_interval(format, true, interval)),
                ),
            )
        } else {
            let format = format().with_ansi(false).without_time();
            Box::new(
                tracing_subscriber::registry()
                    .with(layer.event_format(Repeats::with_interval(format, false, interval))),
            )
        };
        tracing::subscriber::with_default(subscriber, emit);
        lines.text()
    }

    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn a_repeated_error_is_written_once_per_window_then_with_its_count() {
        // One call site, as a flood from one line of code.
        let timeout = || tracing::error!(target: "t", target = "n3", "timeout");
        let text = logged(false, Duration::from_millis(200), || {
            for _ in 0..5 {
                timeout();
            }
            std::thread::sleep(Duration::from_millis(250));
            timeout();
        });
        assert_eq!(
            text,
            "ERROR t: timeout target=\"n3\"\nERROR t: timeout target=\"n3\" suppressed=4\n"
        );
    }

    #[test]
    fn another_peer_another_call_site_and_info_lines_are_not_held_back() {
        let text = logged(false, Duration::from_secs(60), || {
            for peer in ["n2", "n3", "n2"] {
                tracing::warn!(target: "t", peer, "peer unreachable");
            }
            tracing::warn!(target: "t", "other");
            for _ in 0..2 {
                tracing::info!(target: "t", "routine");
            }
        });
        assert_eq!(
            text,
            concat!(
                " WARN t: peer unreachable peer=\"n2\"\n",
                " WARN t: peer unreachable peer=\"n3\"\n",
                " WARN t: other\n",
                " INFO t: routine\n",
                " INFO t: routine\n",
            )
        );
    }

    #[test]
    fn cluster_changes_are_never_held_back() {
        let lost = || tracing::warn!(target: "hivekeeper::cluster", peer = "n3", "peer lost");
        let text = logged(false, Duration::from_secs(60), || {
            lost();
            lost();
        });
        assert_eq!(
            text,
            " WARN hivekeeper::cluster: peer lost peer=\"n3\"\n WARN hivekeeper::cluster: peer lost peer=\"n3\"\n"
        );
    }

    #[test]
    fn in_json_the_count_is_a_field_of_the_object() {
        let disk = || tracing::error!(target: "t", "disk");
        let text = logged(true, Duration::from_millis(100), || {
            disk();
            disk();
            std::thread::sleep(Duration::from_millis(150));
            disk();
        });
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON object"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0].get("suppressed"), None);
        assert_eq!(lines[1]["suppressed"], 1);
        assert_eq!(lines[1]["fields"]["message"], "disk");
        assert_eq!(lines[1]["level"], "ERROR");
    }
}
