//! A node's metrics port: the Prometheus text of `/metrics` over a plain HTTP GET, one value
//! or the sum of a metric's series, waits until a value holds, and any other path
//! (`/health`, `/ready`) with its status code.

use std::time::Duration;

use super::eventually;

/// GET `path` of a node's metrics port (`/health`, `/ready`), with the status code (at most
/// 5 s; `None` if the node does not answer).
pub async fn http_get(port: u16, path: &str) -> Option<hivekeeper_loopback::HttpAnswer> {
    hivekeeper_loopback::http_get(port, path, Duration::from_secs(5)).await
}

/// Polls `path` of a node's metrics port until it answers `status` (at most `secs`); returns
/// that answer.
pub async fn wait_http_status(
    port: u16,
    path: &str,
    status: u16,
    secs: u64,
) -> hivekeeper_loopback::HttpAnswer {
    eventually(secs, &format!("{path} answers {status}"), || async {
        http_get(port, path)
            .await
            .filter(|answer| answer.status == status)
    })
    .await
}

/// GET /metrics (at most 5 s; `None` if the node does not answer).
pub async fn metrics_text(port: u16) -> Option<String> {
    hivekeeper_loopback::metrics_text(port, Duration::from_secs(5)).await
}

/// The value of an unlabelled counter or gauge in Prometheus text, `None` if absent.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !rest.starts_with(' ') {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Polls /metrics until `name` is present and satisfies `want`; returns its value.
pub async fn wait_metric(port: u16, name: &str, secs: u64, want: impl Fn(f64) -> bool) -> f64 {
    let want = &want;
    eventually(secs, &format!("metric {name}"), move || async move {
        let text = metrics_text(port).await?;
        metric(&text, name).filter(|value| want(*value))
    })
    .await
}

/// Polls /metrics until the sum of `name`'s series (all labels; 0 while none exists yet, as a
/// counter that has not moved is absent) satisfies `want`; returns it.
pub async fn wait_metric_sum(port: u16, name: &str, secs: u64, want: impl Fn(f64) -> bool) -> f64 {
    let want = &want;
    eventually(secs, &format!("metric {name}"), move || async move {
        let text = metrics_text(port).await?;
        Some(metric_sum(&text, name, &[])).filter(|value| want(*value))
    })
    .await
}

/// The sum of every series of `name` in Prometheus text whose labels include all of `labels`
/// (`name{a="x",b="y"} 3` matches `[("a", "x")]`); 0 when none does, as a counter that has
/// not moved yet is absent.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (series_labels, value) = match rest.strip_prefix('{') {
                Some(labelled) => {
                    let (inside, value) = labelled.split_once('}')?;
                    (inside, value)
                }
                None if rest.starts_with(' ') => ("", rest),
                None => return None,
            };
            let has_all = labels.iter().all(|(key, want)| {
                series_labels
                    .split(',')
                    .any(|pair| pair == format!("{key}=\"{want}\""))
            });
            if !has_all {
                return None;
            }
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}
