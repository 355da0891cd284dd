//! SVG plots for docs/benchmarks.md (plotters' SVG backend: no fonts or native libraries
//! needed, and the files diff as text). Two kinds: latency distributions (cumulative, log
//! latency axis, so a median and a tail two orders apart both stay readable) and throughput
//! against offered rate.

use std::path::Path;

use plotters::prelude::*;

use super::error::{BenchError, Result};
use super::stats::Summary;

const SIZE: (u32, u32) = (900, 520);
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn err(path: &Path) -> impl Fn(String) -> BenchError + '_ {
    move |e| BenchError::Plot(path.display().to_string(), e)
}

/// A latency tick label without trailing zeros (`0.05`, `2`, `150`).
fn short(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Cumulative latency distributions; series without samples are left out. `Ok(false)` when
/// nothing was left to draw.
pub fn latency_cdf(path: &Path, title: &str, series: &[(String, &Summary)]) -> Result<bool> {
    let series: Vec<&(String, &Summary)> = series.iter().filter(|(_, s)| s.count > 0 && !s.cdf.is_empty()).collect();
    if series.is_empty() {
        return Ok(false);
    }
    let lat = series.iter().flat_map(|(_, s)| s.cdf.iter().map(|p| p[0]));
    let (lo, hi) = lat.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = ((lo * 0.8).max(0.001), (hi * 1.25).max(lo * 10.0).max(0.01));
    let e = err(path);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_labels(14)
        .x_label_formatter(&|v| short(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .x_desc("latency (ms, log scale)")
        .y_desc("fraction of requests at or below")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = s.cdf.iter().map(|p| (p[0].max(lo), p[1])).collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))?;
    Ok(true)
}

/// Completed requests per second against offered requests per second, with the line a
/// server that completes everything would follow.
pub fn throughput(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)]) -> Result<bool> {
    let series: Vec<&(String, Vec<(f64, f64)>)> = series.iter().filter(|(_, p)| !p.is_empty()).collect();
    if series.is_empty() {
        return Ok(false);
    }
    let max = series.iter().flat_map(|(_, p)| p.iter().map(|(x, y)| x.max(*y))).fold(1f64, f64::max) * 1.1;
    let e = err(path);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..max, 0f64..max)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(238, 238, 238))
        .x_desc("offered (requests/s)")
        .y_desc("completed (requests/s)")
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let grey = RGBColor(170, 170, 170);
    chart
        .draw_series(LineSeries::new(vec![(0.0, 0.0), (max, max)], grey.stroke_width(1)))
        .map_err(|x| e(x.to_string()))?
        .label("everything completed")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts = points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled()))).map_err(|x| e(x.to_string()))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))?;
    Ok(true)
}
