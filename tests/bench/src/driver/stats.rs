//! Latency recording: HDR histograms in microseconds (1 µs to 1 h, 3 significant digits),
//! summarised as percentiles plus a sampled distribution for the plots.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

const MAX_MICROS: u64 = 3_600_000_000;

/// Quantiles sampled into [`Summary::cdf`]: even steps, then the tail.
fn cdf_quantiles() -> Vec<f64> {
    let mut q: Vec<f64> = (0..50).map(|i| f64::from(i) / 50.0).collect();
    q.extend([0.99, 0.995, 0.999, 0.9999, 1.0]);
    q
}

#[derive(Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        // Bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 * low, sigfig <= 5).
        Self(Histogram::new_with_bounds(1, MAX_MICROS, 3).unwrap_or_else(|_| unreachable!("valid bounds")))
    }
}

impl Latencies {
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(MAX_MICROS).clamp(1, MAX_MICROS);
        self.0.saturating_record(us);
    }

    pub fn add(&mut self, other: &Latencies) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn ms_at(&self, q: f64) -> f64 {
        self.0.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn summary(&self) -> Summary {
        if self.0.is_empty() {
            return Summary::default();
        }
        Summary {
            count: self.0.len(),
            mean_ms: self.0.mean() / 1000.0,
            p50_ms: self.ms_at(0.5),
            p90_ms: self.ms_at(0.9),
            p99_ms: self.ms_at(0.99),
            p999_ms: self.ms_at(0.999),
            max_ms: self.0.max() as f64 / 1000.0,
            cdf: cdf_quantiles().into_iter().map(|q| [self.ms_at(q), q]).collect(),
        }
    }
}

/// Percentiles in milliseconds; `cdf` holds `[latency_ms, quantile]` points.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub cdf: Vec<[f64; 2]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_out_in_milliseconds() {
        let mut l = Latencies::default();
        for ms in 1..=100u64 {
            l.record(Duration::from_millis(ms));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{}", s.p50_ms);
        assert!((s.max_ms - 100.0).abs() < 0.1);
        assert_eq!(s.cdf.last().map(|p| p[1]), Some(1.0));
        let mut m = Latencies::default();
        m.add(&l);
        assert_eq!(m.len(), 100);
        assert_eq!(Latencies::default().summary().count, 0);
    }
}
