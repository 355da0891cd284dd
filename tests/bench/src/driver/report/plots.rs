//! Which plots a run gets, drawn from its results into `docs/benchmarks/`.

use std::path::Path;

use crate::driver::error::Result;
use crate::driver::plot;
use crate::driver::results::Results;
use crate::driver::stats::Summary;

/// A plot file that was written: its file name and what it shows.
pub struct PlotFile {
    pub file: String,
    pub title: String,
}

pub fn plots(r: &Results, dir: &Path) -> Result<Vec<PlotFile>> {
    let mut out = Vec::new();
    let mut add = |file: &str, title: &str, drawn: bool| {
        if drawn {
            out.push(PlotFile { file: file.to_owned(), title: title.to_owned() });
        }
    };

    let mut ma: Vec<(String, &Summary)> = Vec::new();
    for c in &r.managed_agents {
        ma.push((format!("gateway ({})", c.engine.name()), &c.gateway.latency));
        ma.push((format!("bench-durable ({} run)", c.engine.name()), &c.baseline.latency));
    }
    let t = "(a) Managed Agents round trip, 16 clients";
    add("ma-latency.svg", t, plot::latency_cdf(&dir.join("ma-latency.svg"), t, &ma)?);

    let mut open: Vec<(String, &Summary)> = Vec::new();
    let mut sat: Vec<(String, &Summary)> = Vec::new();
    let mut direct_pts = Vec::new();
    let mut gw_series = Vec::new();
    for a in &r.a2a {
        let mut gw_pts = Vec::new();
        for c in &a.open_loop {
            let rate = c.gateway.offered_rate.unwrap_or_default();
            let done = |f: &crate::driver::results::Figures| format!("{:.0} % completed", f.completed_share() * 100.0);
            open.push((format!("gateway {}/s ({}): {}", rate, a.engine.name(), done(&c.gateway)), &c.gateway.latency));
            open.push((
                format!("direct {}/s ({} run): {}", rate, a.engine.name(), done(&c.baseline)),
                &c.baseline.latency,
            ));
            gw_pts.push((rate, c.gateway.throughput));
            direct_pts.push((rate, c.baseline.throughput));
        }
        let mut instant = Vec::new();
        if let Some(c) = &a.instant_half_load {
            let rate = c.gateway.offered_rate.unwrap_or_default();
            instant.push((rate, c.gateway.throughput));
            direct_pts.push((rate, c.baseline.throughput));
        }
        if let Some(o) = &a.overload {
            instant.push((o.offered_rate.unwrap_or_default(), o.goodput_in_window.unwrap_or(o.throughput)));
        }
        if !instant.is_empty() {
            gw_series.push((format!("gateway, instant remote, ½ and 2× capacity ({})", a.engine.name()), instant));
        }
        gw_series.push((format!("gateway, remote after {} ms ({})", a.remote_delay_ms, a.engine.name()), gw_pts));
        if let Some(c) = &a.saturation {
            sat.push((format!("gateway ({})", a.engine.name()), &c.gateway.latency));
            sat.push((format!("direct ({} run)", a.engine.name()), &c.baseline.latency));
        }
        if let Some(c) = &a.saturation_durable {
            sat.push((format!("durable baseline ({} run)", a.engine.name()), &c.baseline.latency));
        }
    }
    let delay = r.a2a.first().map(|a| a.remote_delay_ms).unwrap_or_default();
    let t = format!("(b) A2A SendMessage, open loop, remote after {delay} ms (completed requests)");
    add("a2a-open-latency.svg", &t, plot::latency_cdf(&dir.join("a2a-open-latency.svg"), &t, &open)?);
    let mut series = vec![("direct to the remote".to_owned(), dedup(direct_pts))];
    series.extend(gw_series);
    let t = "(b) A2A: completed vs offered rate";
    add("a2a-throughput.svg", t, plot::throughput(&dir.join("a2a-throughput.svg"), t, &series)?);
    let t = "(b) A2A saturation, 32 connections, 1 KiB, instant remote";
    add("a2a-saturation-latency.svg", t, plot::latency_cdf(&dir.join("a2a-saturation-latency.svg"), t, &sat)?);

    let mut acp: Vec<(String, &Summary)> = Vec::new();
    for c in &r.acp {
        acp.push((format!("gateway acp ({})", c.engine.name()), &c.gateway.latency));
        acp.push((format!("direct ({} run)", c.engine.name()), &c.baseline.latency));
    }
    let t = "(c) ACP prompt round trip";
    add("acp-latency.svg", t, plot::latency_cdf(&dir.join("acp-latency.svg"), t, &acp)?);

    let mut previews: Vec<(String, &Summary)> = Vec::new();
    if let Some(p) = &r.previews {
        previews.push(("added at A over B, per delta".to_owned(), &p.added));
        previews.push(("A's first delta before the committed message, per trial".to_owned(), &p.lead));
    }
    let t = "(f) Previews across processes (PostgreSQL)";
    add("previews-latency.svg", t, plot::latency_cdf(&dir.join("previews-latency.svg"), t, &previews)?);
    Ok(out)
}

/// One point per offered rate (the direct side is measured once per engine).
fn dedup(mut pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64, usize)> = Vec::new();
    for (x, y) in pts {
        match out.last_mut() {
            Some(last) if last.0 == x => {
                last.1 += y;
                last.2 += 1;
            }
            _ => out.push((x, y, 1)),
        }
    }
    out.into_iter().map(|(x, y, n)| (x, y / n as f64)).collect()
}
