//! What the apiserver says it did, from its own `/metrics`: requests by verb and resource (with
//! the time it spent on them and the bodies it read), and watch events sent by resource (with
//! their bytes). A phase's difference of two scrapes says where the apiserver's CPU went: on 2
//! cores the apiserver is the bottleneck, so work it does for the operator that it does not do
//! for a plain client is the distance between the two.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One scrape: every counter this module reads, by its key (`requests PATCH statefulsets`).
#[derive(Clone, Debug, Default)]
pub struct ApiserverCounts(BTreeMap<String, f64>);

/// What one request line or watch line adds up to.
#[derive(Debug, Default)]
struct Line {
    count: f64,
    seconds: f64,
    bytes: f64,
}

impl ApiserverCounts {
    pub async fn scrape(client: &kube::Client) -> anyhow::Result<ApiserverCounts> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = client.request_text(request).await?;
        Ok(ApiserverCounts::parse(&text))
    }

    fn parse(text: &str) -> ApiserverCounts {
        let mut counts = BTreeMap::new();
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let label = |key: &str| {
                let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
                let end = labels[start..].find('"')? + start;
                Some(labels[start..end].to_string())
            };
            let resource = || {
                let resource = label("resource").unwrap_or_default();
                match label("subresource").unwrap_or_default() {
                    sub if sub.is_empty() => resource,
                    sub => format!("{resource}/{sub}"),
                }
            };
            let what = match name {
                "apiserver_request_total" => "requests",
                "apiserver_request_duration_seconds_sum" => "seconds",
                "apiserver_request_body_size_bytes_sum" => "body",
                "apiserver_watch_events_total" => "events",
                "apiserver_watch_events_sizes_sum" => "event-bytes",
                _ => continue,
            };
            let key = match what {
                "events" | "event-bytes" => format!("{what} WATCH {}", resource()),
                _ => format!(
                    "{what} {} {}",
                    label("verb").unwrap_or_default().to_uppercase(),
                    resource()
                ),
            };
            *counts.entry(key).or_insert(0.0) += value;
        }
        ApiserverCounts(counts)
    }

    /// The write requests (create, update, patch, apply, delete) to `resources` since `before`,
    /// answered or refused: what a controller sent them. Their subresources are not counted
    /// (the controller-manager writes StatefulSets' status, not a controller).
    #[allow(dead_code)] // Not every benchmark counts writes from here.
    pub fn writes_since(&self, before: &ApiserverCounts, resources: &[&str]) -> f64 {
        const WRITES: &[&str] = &[
            "POST",
            "PUT",
            "PATCH",
            "APPLY",
            "DELETE",
            "DELETECOLLECTION",
        ];
        self.0
            .iter()
            .filter(|(key, _)| {
                let mut parts = key.splitn(3, ' ');
                parts.next() == Some("requests")
                    && parts.next().is_some_and(|verb| WRITES.contains(&verb))
                    && parts
                        .next()
                        .is_some_and(|resource| resources.contains(&resource))
            })
            .map(|(key, now)| now - before.0.get(key).copied().unwrap_or(0.0))
            .sum::<f64>()
            // An empty float sum is -0.0, printed "-0".
            + 0.0
    }

    /// What happened since `before`, as a few lines: the request kinds and watched types that
    /// took the most apiserver time or bytes, largest first.
    pub fn since(&self, before: &ApiserverCounts) -> String {
        let mut lines: BTreeMap<(String, String), Line> = BTreeMap::new();
        for (key, now) in &self.0 {
            let delta = now - before.0.get(key).copied().unwrap_or(0.0);
            if delta <= 0.0 {
                continue;
            }
            let mut parts = key.splitn(3, ' ');
            let (Some(what), Some(verb), Some(resource)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            // Health checks and discovery are no one's work.
            if resource.is_empty() || resource.starts_with('/') {
                continue;
            }
            let line = lines
                .entry((verb.to_string(), resource.to_string()))
                .or_default();
            match what {
                "requests" | "events" => line.count += delta,
                "seconds" => line.seconds += delta,
                _ => line.bytes += delta,
            }
        }
        let total_requests: f64 = lines
            .iter()
            .filter(|((verb, _), _)| verb != "WATCH")
            .map(|(_, line)| line.count)
            .sum();
        let total_events: f64 = lines
            .iter()
            .filter(|((verb, _), _)| verb == "WATCH")
            .map(|(_, line)| line.count)
            .sum();
        let mut sorted: Vec<_> = lines
            .into_iter()
            .filter(|(_, line)| line.count > 0.0)
            .collect();
        sorted.sort_by(|(_, a), (_, b)| {
            (b.seconds + b.bytes / 1e6).total_cmp(&(a.seconds + a.bytes / 1e6))
        });
        // `+ 0.0`: an empty float sum is -0.0, printed "-0".
        let mut out = format!(
            "apiserver: {:.0} requests, {:.0} watch events sent; ",
            total_requests + 0.0,
            total_events + 0.0
        );
        let parts: Vec<String> = sorted
            .iter()
            .take(8)
            .map(|((verb, resource), line)| {
                let mut part = format!("{verb} {resource} {:.0}", line.count);
                if line.seconds > 0.0 {
                    let _ = write!(part, " ({:.2} s", line.seconds);
                    if line.bytes > 0.0 {
                        let _ = write!(part, ", {:.1} MB in", line.bytes / 1e6);
                    }
                    part.push(')');
                } else if line.bytes > 0.0 {
                    let _ = write!(part, " ({:.1} MB out)", line.bytes / 1e6);
                }
                part
            })
            .collect();
        out.push_str(&parts.join(", "));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_is_the_difference_of_two_scrapes_by_verb_and_resource() {
        let before = ApiserverCounts::parse(
            r#"apiserver_request_total{code="200",group="apps",resource="statefulsets",subresource="",verb="PATCH"} 10
apiserver_request_duration_seconds_sum{group="apps",resource="statefulsets",subresource="",verb="PATCH"} 1.5
apiserver_watch_events_total{group="apps",resource="statefulsets",version="v1"} 5
apiserver_request_total{code="200",resource="",subresource="/readyz",verb="GET"} 3
"#,
        );
        let after = ApiserverCounts::parse(
            r#"apiserver_request_total{code="200",group="apps",resource="statefulsets",subresource="",verb="PATCH"} 30
apiserver_request_total{code="409",group="apps",resource="statefulsets",subresource="",verb="PATCH"} 2
apiserver_request_duration_seconds_sum{group="apps",resource="statefulsets",subresource="",verb="PATCH"} 4.0
apiserver_watch_events_total{group="apps",resource="statefulsets",version="v1"} 45
apiserver_watch_events_sizes_sum{group="apps",resource="statefulsets",version="v1"} 2000000
apiserver_request_total{code="200",resource="",subresource="/readyz",verb="GET"} 9
"#,
        );
        let text = after.since(&before);
        assert!(
            text.starts_with("apiserver: 22 requests, 40 watch events sent; "),
            "{text}"
        );
        assert!(text.contains("PATCH statefulsets 22 (2.50 s)"), "{text}");
        assert!(
            text.contains("WATCH statefulsets 40 (2.0 MB out)"),
            "{text}"
        );
        assert!(!text.contains("readyz"), "{text}");
    }

    #[test]
    fn writes_are_the_write_verbs_to_the_resources_named_not_their_subresources() {
        let before = ApiserverCounts::parse(
            r#"apiserver_request_total{code="200",group="apps",resource="statefulsets",subresource="",verb="PATCH"} 10
apiserver_request_total{code="201",resource="services",subresource="",verb="POST"} 1
"#,
        );
        let after = ApiserverCounts::parse(
            r#"apiserver_request_total{code="200",group="apps",resource="statefulsets",subresource="",verb="PATCH"} 30
apiserver_request_total{code="409",group="apps",resource="statefulsets",subresource="",verb="PATCH"} 2
apiserver_request_total{code="200",group="apps",resource="statefulsets",subresource="status",verb="PUT"} 7
apiserver_request_total{code="200",group="apps",resource="statefulsets",subresource="",verb="GET"} 50
apiserver_request_total{code="201",resource="services",subresource="",verb="POST"} 4
apiserver_request_total{code="200",resource="services",subresource="",verb="APPLY"} 3
apiserver_request_total{code="201",resource="endpointslices",subresource="",verb="POST"} 9
"#,
        );
        assert_eq!(after.writes_since(&before, &["statefulsets"]), 22.0);
        assert_eq!(after.writes_since(&before, &["services"]), 6.0);
        assert_eq!(
            after.writes_since(&before, &["statefulsets", "services"]),
            28.0
        );
    }
}
