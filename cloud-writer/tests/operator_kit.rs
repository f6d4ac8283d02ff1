//! The operator's kit against a running writer: every metric the Grafana dashboard
//! (`deploy/grafana/cloud-writer.json`) and the alert rules
//! (`deploy/prometheus/cloud-writer.rules.yml`) query is one that the writer exports at its
//! `/metrics` endpoint, read from a writer on the Event Hubs source against the local hub (so
//! that the Event Hubs metrics exist), and every alert has its runbook entry in the README.
//!
//! The expressions are read as PromQL: string literals, label matchers, range and subquery
//! brackets, grouping label lists (`by`, `without`, `on`, `ignoring`, `group_left`,
//! `group_right`), `offset` and Grafana variables are set aside; what remains is a function
//! or aggregation (followed by a parenthesis: it must be a known one), a keyword, a number or
//! a metric name. A metric name must be a sample name of a family the writer exposes:
//! `_total` of a counter, `_bucket`, `_sum` or `_count` of a histogram, a gauge's own name.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use test_harness::eventually;

use chrono::Utc;
use cloud_writer::DropReason;
use cloud_writer::Secret;
use common::*;
use cosmos_sim::CosmosSim;
use hub_sim::{AuthMethod, Incoming};
use hub_sim::{HubConfig, HubSim};
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

/// PromQL's functions (Prometheus 2 and 3) and aggregation operators.
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "deg",
    "delta",
    "deriv",
    "double_exponential_smoothing",
    "end",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "mad_over_time",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_by_label",
    "sort_by_label_desc",
    "sort_desc",
    "sqrt",
    "start",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "vector",
    "year", // aggregation operators:
    "avg",
    "bottomk",
    "count",
    "count_values",
    "group",
    "limit_ratio",
    "limitk",
    "max",
    "min",
    "quantile",
    "stddev",
    "stdvar",
    "sum",
    "topk",
];

/// PromQL keywords that are neither functions nor metric names (besides [`GROUPING`]).
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "atan2", "offset", "inf", "nan",
];

/// The grouping keywords, each followed by a label list (`group_left` and `group_right`
/// may stand alone).
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Replaces the spans `open ... close` of `text` with a space (no nesting, as in PromQL's
/// label matchers and range brackets).
fn blank_between(text: &str, open: char, close: char) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        match (inside, c) {
            (false, c) if c == open => inside = true,
            (true, c) if c == close => {
                inside = false;
                out.push(' ');
            }
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

/// Removes string literals ("...", '...' with escapes, `...` raw).
fn without_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                let quote = c;
                while let Some(d) = chars.next() {
                    if d == '\\' && quote != '`' {
                        chars.next();
                    } else if d == quote {
                        break;
                    }
                }
                out.push(' ');
            }
            c => out.push(c),
        }
    }
    out
}

/// Removes the label lists of grouping clauses (`by (...)`, `without (...)`, `on (...)`,
/// `ignoring (...)`, `group_left (...)`, `group_right (...)`) with their keyword, so that an
/// aggregation's name is followed by its parenthesis (`sum by (a) (x)` reads `sum (x)`).
fn without_grouping(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if !word_char(chars[i]) {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && word_char(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        if !GROUPING.contains(&word.to_ascii_lowercase().as_str()) {
            out.push_str(&word);
            continue;
        }
        let mut next = i;
        while next < chars.len() && chars[next].is_whitespace() {
            next += 1;
        }
        if chars.get(next) == Some(&'(') {
            while next < chars.len() && chars[next] != ')' {
                next += 1;
            }
            i = next + 1;
        }
        out.push(' ');
    }
    out
}

/// The metric names a PromQL expression reads; panics on a call of an unknown function.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let text = without_strings(expr);
    let text = blank_between(&text, '{', '}');
    let text = blank_between(&text, '[', ']');
    let text = without_grouping(&text);
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '$' {
            // A Grafana variable: `$name` or `${...}`.
            i += 1;
            if chars.get(i) == Some(&'{') {
                while i < chars.len() && chars[i] != '}' {
                    i += 1;
                }
                i += 1;
            } else {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            continue;
        }
        if c.is_ascii_digit() || c == '.' {
            // A number or a duration (`1e3`, `0x1f`, `5m`).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            if lower == "offset" {
                // Skip the duration.
                while next < chars.len()
                    && (chars[next].is_ascii_alphanumeric() || chars[next] == '-')
                {
                    next += 1;
                }
                i = next;
            } else if KEYWORDS.contains(&lower.as_str()) || GROUPING.contains(&lower.as_str()) {
                // `and (`, `or (`: an operator before a parenthesis.
            } else if chars.get(next) == Some(&'(') {
                assert!(
                    FUNCTIONS.contains(&lower.as_str()),
                    "`{word}(` in `{expr}` is not a PromQL function or aggregation"
                );
            } else {
                names.insert(word);
            }
            continue;
        }
        i += 1;
    }
    names
}

#[test]
fn promql_names_are_the_metric_identifiers_alone() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"sum by (range) (rate(cloud_writer_cosmos_throttled_total{job=~"$job", range!="a b"}[$__rate_interval]))"#
        ),
        ["cloud_writer_cosmos_throttled_total"]
    );
    assert_eq!(
        names(
            "histogram_quantile(0.99, sum without (instance) (rate(x_bucket[5m] offset 1h))) > 1e3"
        ),
        ["x_bucket"]
    );
    assert_eq!(
        names(
            "a == 0 unless max without (reason) (b) == 1 and on (job, instance) group_left (pod) c or bool (d)"
        ),
        ["a", "b", "c", "d"]
    );
    assert_eq!(
        names(r#"label_replace(up, "dst", "$1", "src", "(.*)") * ${factor}"#),
        ["up"]
    );
    assert_eq!(names("max_over_time(rate(m[5m])[1h:1m])"), ["m"]);
    let unknown = std::panic::catch_unwind(|| metric_names("summ(x)"));
    assert!(unknown.is_err(), "an unknown function must not pass");
}

/// Every metric sample name the exposition allows: `_total` of counters, `_bucket`, `_sum`
/// and `_count` of histograms, gauges by their name, and every sample line's name.
fn exported_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(family), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            for suffix in suffixes {
                names.insert(format!("{family}{suffix}"));
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The PromQL expressions of the dashboard: every panel target's `expr` (rows' nested panels
/// too) and the metrics of its `label_values` variables.
fn dashboard_expressions() -> Vec<String> {
    let path = repository().join("deploy/grafana/cloud-writer.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut exprs = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().unwrap_or_else(|| {
            panic!("panel {:?} has no queries", panel["title"]);
        });
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_else(|| {
                panic!("a query of panel {:?} has no expr", panel["title"]);
            });
            exprs.push(expr.to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["definition"].as_str().unwrap();
        // label_values(SELECTOR, label): the selector is PromQL, the label is not a metric.
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
            .unwrap_or_else(|| panic!("variable query {query:?} is not label_values(m, label)"))
            .0;
        exprs.push(inner.to_string());
    }
    exprs
}

/// The alert rules: (alert name, expression, runbook URL).
fn alert_rules() -> Vec<(String, String, String)> {
    let path = repository().join("deploy/prometheus/cloud-writer.rules.yml");
    let docs = YamlLoader::load_from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rules = Vec::new();
    for group in docs[0]["groups"].as_vec().unwrap() {
        for rule in group["rules"].as_vec().unwrap() {
            let text = |y: &Yaml| y.as_str().map(str::to_string);
            let name = text(&rule["alert"]).expect("every rule is an alert");
            let expr = text(&rule["expr"]).unwrap_or_else(|| panic!("{name} has no expr"));
            let runbook = text(&rule["annotations"]["runbook_url"])
                .unwrap_or_else(|| panic!("{name} has no runbook_url"));
            rules.push((name, expr, runbook));
        }
    }
    rules
}

#[test]
fn every_alert_has_its_runbook_entry() {
    let readme = std::fs::read_to_string(repository().join("cloud-writer/README.md")).unwrap();
    let rules = alert_rules();
    assert!(!rules.is_empty());
    for (name, _, runbook) in rules {
        assert_eq!(
            runbook,
            format!("cloud-writer/README.md#{}", name.to_lowercase()),
            "{name}"
        );
        assert!(
            readme.lines().any(|l| l == format!("### {name}")),
            "cloud-writer/README.md has no runbook section `### {name}`"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alert_rules_query_only_metrics_the_writer_exports() {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    // Metrics with labels appear once they have a value: the positions are throttled (10 RU/s
    // per range, a create costs about 6) and one message is invalid.
    sim.create_container("telemetry", "kit", "/deviceId")
        .unwrap();
    sim.set_ru_per_sec("telemetry", "kit", 20.0).unwrap();
    let drones = 20;
    let now = Utc::now();
    let mut messages: Vec<Incoming> = (0..drones)
        .map(|d| Incoming::new(&device(d), wire(&device(d), 1, now, 47.6, -122.3)))
        .collect();
    messages.push(Incoming::new(&device(drones), b"{not json".to_vec()));
    for mut message in messages {
        message.auth = AuthMethod::Sas;
        hub.partitions().route(message);
    }
    let mut settings = settings(&sim.endpoint(), "mqtt://unused:1883", "kit");
    settings.writer_source = Some(Secret::new(hub.eventhub_connection_string()));
    settings.eventhubs_start_position = Some("earliest".into());
    let writer = cloud_writer::Writer::start(settings.resolve().unwrap())
        .await
        .unwrap();
    eventually(
        "the positions to be written",
        Duration::from_secs(90),
        async || writer.counts(),
        |c| c.written == drones as u64 && c.dropped(DropReason::Invalid) == 1 && c.in_flight == 0,
    )
    .await;
    assert!(
        writer.metrics().throttled_total() > 0,
        "no write was throttled: the throttle metrics would be missing"
    );
    let addr = writer.metrics_addr().unwrap();
    let exposition = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let exported = exported_names(&exposition);

    let mut used: Vec<(String, String)> = Vec::new();
    for expr in dashboard_expressions() {
        used.extend(
            metric_names(&expr)
                .into_iter()
                .map(|n| (n, "the dashboard".to_string())),
        );
    }
    for (alert, expr, _) in alert_rules() {
        used.extend(
            metric_names(&expr)
                .into_iter()
                .map(|n| (n, format!("alert {alert}"))),
        );
    }
    assert!(used.len() > 20, "{used:?}");
    let missing: BTreeSet<String> = used
        .iter()
        .filter(|(name, _)| !exported.contains(name))
        .map(|(name, by)| format!("{name} (used by {by})"))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics queried but not exported by the writer:\n  {}\nexported: {exported:?}",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    writer.shutdown();
    writer.wait().await.unwrap();
    hub.shutdown().await;
}
