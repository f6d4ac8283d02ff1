//! Reading Prometheus text exposition: the cloud writer's metrics as the load generator
//! scrapes them over HTTP from a writer in another process.
//!
//! Owns the parser ([`Scrape::parse`]), label matching, sums over label sets, and the
//! quantile estimate from a histogram's cumulative buckets (also over the difference of
//! two scrapes, for "p99 of the last second"); the demo applies the same quantile to the
//! buckets it reads from its in-process writers (`cloud_writer::Snapshot`).

use std::collections::BTreeMap;

/// One sample: metric name, labels (sorted), value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name, e.g. `writer_documents_written_total`.
    pub name: String,
    /// The labels, sorted by name.
    pub labels: BTreeMap<String, String>,
    /// The value.
    pub value: f64,
}

/// Why a line of exposition text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}: {text:?}")]
pub struct ParseError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: &'static str,
    /// The line.
    pub text: String,
}

/// All samples of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    samples: Vec<Sample>,
}

impl Scrape {
    /// Parses exposition text (format 0.0.4). Comments and blank lines are skipped;
    /// timestamps after the value are ignored.
    pub fn parse(text: &str) -> Result<Scrape, ParseError> {
        let mut samples = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |reason| ParseError {
                line: index + 1,
                reason,
                text: raw.to_owned(),
            };
            let name_end = line
                .find(|c: char| c == '{' || c.is_whitespace())
                .ok_or_else(|| error("no value"))?;
            let name = &line[..name_end];
            let mut rest = &line[name_end..];
            let mut labels = BTreeMap::new();
            if let Some(body) = rest.strip_prefix('{') {
                let (parsed, after) = parse_labels(body).ok_or_else(|| error("bad labels"))?;
                labels = parsed;
                rest = after;
            }
            let value = rest
                .split_whitespace()
                .next()
                .ok_or_else(|| error("no value"))?;
            let value = parse_value(value).ok_or_else(|| error("bad value"))?;
            samples.push(Sample {
                name: name.to_owned(),
                labels,
                value,
            });
        }
        Ok(Scrape { samples })
    }

    /// Every sample.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The sum of every sample of `name` whose labels include all of `matching`
    /// (0 when there is none).
    pub fn sum(&self, name: &str, matching: &[(&str, &str)]) -> f64 {
        self.select(name, matching).map(|s| s.value).sum()
    }

    /// Sums of `name` grouped by the value of label `label` (samples lacking it are skipped).
    pub fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for sample in self.select(name, &[]) {
            if let Some(value) = sample.labels.get(label) {
                *out.entry(value.clone()).or_insert(0.0) += sample.value;
            }
        }
        out
    }

    /// The cumulative buckets of histogram `name` (`name_bucket` samples, summed over
    /// other labels), sorted by upper bound.
    pub fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut by_le: BTreeMap<OrderedF64, f64> = BTreeMap::new();
        for sample in self.select(&bucket, &[]) {
            if let Some(le) = sample.labels.get("le").and_then(|le| parse_value(le)) {
                *by_le.entry(OrderedF64(le)).or_insert(0.0) += sample.value;
            }
        }
        by_le.into_iter().map(|(le, n)| (le.0, n)).collect()
    }

    fn select<'a>(
        &'a self,
        name: &'a str,
        matching: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && matching
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).is_some_and(|have| have == v))
        })
    }
}

/// The `q` quantile (0..=1) of a histogram given by cumulative buckets `(upper bound,
/// count)`, interpolating linearly inside the bucket as Prometheus' `histogram_quantile`
/// does. `None` when the histogram is empty. A quantile in the `+Inf` bucket reports the
/// largest finite bound.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, count) in buckets {
        if count >= rank && count > below {
            if le.is_infinite() {
                return Some(lower);
            }
            let fraction = (rank - below) / (count - below);
            return Some(lower + (le - lower) * fraction);
        }
        if le.is_finite() {
            lower = le;
        }
        below = count;
    }
    Some(lower)
}

/// The buckets of `now` minus those of `before` (same bounds expected; a bound missing
/// before counts as zero), for quantiles over an interval.
pub fn bucket_delta(now: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    now.iter()
        .map(|&(le, n)| {
            let old = before
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, n)| *n);
            (le, (n - old).max(0.0))
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct OrderedF64(f64);

impl PartialEq for OrderedF64 {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for OrderedF64 {}

impl PartialOrd for OrderedF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderedF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

/// Parses `name="value",...}` (after the opening brace); returns the labels and the text
/// after the closing brace.
fn parse_labels(mut body: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        body = body.trim_start_matches([' ', ',']);
        if let Some(after) = body.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = body.find('=')?;
        let name = body[..eq].trim().to_owned();
        body = body[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = body.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                other => value.push(other),
            }
        };
        labels.insert(name, value);
        body = &body[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
# HELP writer_dropped_total Positions dropped, by reason.
# TYPE writer_dropped_total counter
writer_dropped_total{reason="stale"} 12
writer_dropped_total{reason="invalid",detail="json"} 3
writer_dropped_total{reason="invalid",detail="a \"quoted\" \\ one"} 1
writer_written_total 1.5e3
lateness_seconds_bucket{le="0.1"} 10
lateness_seconds_bucket{le="1"} 90
lateness_seconds_bucket{le="10"} 100
lateness_seconds_bucket{le="+Inf"} 100
lateness_seconds_sum 42 1700000000000
lateness_seconds_count 100
"#;

    #[test]
    fn parses_names_labels_values_and_escapes() {
        let scrape = Scrape::parse(TEXT).unwrap();
        assert_eq!(scrape.sum("writer_written_total", &[]), 1500.0);
        assert_eq!(scrape.sum("writer_dropped_total", &[]), 16.0);
        assert_eq!(
            scrape.sum("writer_dropped_total", &[("reason", "invalid")]),
            4.0
        );
        let by_reason = scrape.by_label("writer_dropped_total", "reason");
        assert_eq!(by_reason["stale"], 12.0);
        assert_eq!(by_reason["invalid"], 4.0);
        assert!(
            scrape
                .samples()
                .iter()
                .any(|s| s.labels.get("detail").map(String::as_str) == Some("a \"quoted\" \\ one"))
        );
        assert_eq!(scrape.sum("lateness_seconds_sum", &[]), 42.0);
    }

    #[test]
    fn rejects_malformed_lines_with_their_number() {
        let err = Scrape::parse("ok 1\nbroken{le=\"1\" 2\n").unwrap_err();
        assert_eq!(err.line, 2);
        let err = Scrape::parse("a notanumber").unwrap_err();
        assert_eq!(err.reason, "bad value");
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket() {
        let scrape = Scrape::parse(TEXT).unwrap();
        let buckets = scrape.buckets("lateness_seconds");
        assert_eq!(buckets.len(), 4);
        // rank 50 lies in (0.1, 1]: 10 below, 80 inside -> 0.1 + 0.9 * 40/80.
        let p50 = quantile(&buckets, 0.5).unwrap();
        assert!((p50 - 0.55).abs() < 1e-9, "{p50}");
        // rank 99 lies in (1, 10]: 90 below, 10 inside -> 1 + 9 * 9/10.
        let p99 = quantile(&buckets, 0.99).unwrap();
        assert!((p99 - 9.1).abs() < 1e-9, "{p99}");
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
        // Everything above the largest finite bound reports that bound.
        assert_eq!(
            quantile(&[(1.0, 0.0), (f64::INFINITY, 5.0)], 0.5),
            Some(1.0)
        );
    }

    #[test]
    fn quantiles_of_an_interval_use_the_bucket_difference() {
        let before = [(1.0, 10.0), (10.0, 10.0), (f64::INFINITY, 10.0)];
        let now = [(1.0, 10.0), (10.0, 20.0), (f64::INFINITY, 20.0)];
        let delta = bucket_delta(&now, &before);
        assert_eq!(delta, vec![(1.0, 0.0), (10.0, 10.0), (f64::INFINITY, 10.0)]);
        let p50 = quantile(&delta, 0.5).unwrap();
        assert!((p50 - 5.5).abs() < 1e-9, "{p50}");
    }
}
