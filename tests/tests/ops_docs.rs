#![allow(clippy::unwrap_used)]
//! The operator's documents (`docs/ops/`) stay true to the metrics the gateway exports: every
//! series the process registers is described in `metrics.md`, and every series the
//! dashboard, the alert rules or the catalogue name exists. A renamed metric fails here, not
//! on an operator's dashboard.

use std::collections::BTreeSet;

/// The metric families one process registers.
fn registered() -> BTreeSet<String> {
    gateway_services::Metrics::default().names().iter().map(|n| (*n).to_owned()).collect()
}

fn doc(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../docs/ops/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Every `gateway_…` series name mentioned in `text`, as written.
fn mentioned(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("gateway_") {
        let start = i + at;
        let before_ok = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end =
            start + text[start..].find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(text.len() - start);
        if before_ok {
            out.insert(text[start..end].to_owned());
        }
        i = end;
    }
    out
}

/// The family a series name belongs to (`_bucket`, `_count`, `_sum`, `_total` are samples).
fn family<'a>(series: &'a str, families: &BTreeSet<String>) -> Option<&'a str> {
    if families.contains(series) {
        return Some(series);
    }
    ["_bucket", "_count", "_sum", "_total"]
        .iter()
        .filter_map(|s| series.strip_suffix(s))
        .find(|f| families.contains(*f))
}

#[test]
fn every_registered_series_is_documented_and_every_documented_one_exists() {
    let families = registered();
    assert!(families.len() > 20, "{families:?}");
    let catalogue = doc("metrics.md");
    let mentions = mentioned(&catalogue);
    let documented: BTreeSet<&str> = mentions.iter().filter_map(|s| family(s, &families)).collect();
    let missing: Vec<&String> = families.iter().filter(|f| !documented.contains(f.as_str())).collect();
    assert!(missing.is_empty(), "registered but not in docs/ops/metrics.md: {missing:?}");
    for name in ["metrics.md", "alerts.yml", "grafana-dashboard.json", "production.md"] {
        let unknown: Vec<String> =
            mentioned(&doc(name)).into_iter().filter(|s| family(s, &families).is_none()).collect();
        assert!(unknown.is_empty(), "docs/ops/{name} names series the gateway does not export: {unknown:?}");
    }
}

#[test]
fn the_dashboard_is_valid_json_with_a_query_in_every_panel() {
    let dashboard: serde_json::Value = serde_json::from_str(&doc("grafana-dashboard.json")).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let graphs: Vec<&serde_json::Value> = panels.iter().filter(|p| p["type"] != "row").collect();
    assert!(graphs.len() >= 15, "{} panels", graphs.len());
    for p in graphs {
        let targets = p["targets"].as_array().unwrap();
        assert!(
            !targets.is_empty() && targets.iter().all(|t| t["expr"].as_str().is_some_and(|e| e.contains("gateway_"))),
            "{p}"
        );
    }
}
