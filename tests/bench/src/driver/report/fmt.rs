//! Number formatting for the tables: milliseconds with sensible precision, ratios as `0.11×`.

use std::collections::BTreeMap;

/// Milliseconds: three decimals below 1 ms, two below 10 ms, one below 1 s, none above.
pub fn ms(v: f64) -> String {
    if v <= 0.0 {
        "–".into()
    } else if v < 1.0 {
        format!("{v:.3}")
    } else if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A difference in milliseconds, signed: `+1.30`, `−0.412`, `0`.
pub fn signed_ms(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    format!("{}{}", if v > 0.0 { "+" } else { "−" }, ms(v.abs()))
}

pub fn rate(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

pub fn ratio(v: Option<f64>) -> String {
    match v {
        Some(r) if r < 0.1 => format!("{r:.3}×"),
        Some(r) => format!("{r:.2}×"),
        None => "–".into(),
    }
}

pub fn opt_ms(v: Option<f64>) -> String {
    v.map(ms).unwrap_or_else(|| "–".into())
}

pub fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// `3 × timeout, 2 × jsonrpc -32603`, or `none`.
pub fn errors(e: &BTreeMap<String, u64>) -> String {
    if e.is_empty() {
        return "none".into();
    }
    e.iter().map(|(k, v)| format!("{v} × {k}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(ms(0.0321), "0.032");
        assert_eq!(ms(53.24), "53.2");
        assert_eq!(ms(1503.0), "1503");
        assert_eq!(signed_ms(1.3), "+1.30");
        assert_eq!(signed_ms(-0.4123), "−0.412");
        assert_eq!(signed_ms(0.0), "0");
        assert_eq!(ratio(Some(0.0123)), "0.012×");
        assert_eq!(ratio(Some(0.5)), "0.50×");
        assert_eq!(ratio(None), "–");
        let mut e = BTreeMap::new();
        assert_eq!(errors(&e), "none");
        e.insert("timeout".to_owned(), 3);
        assert_eq!(errors(&e), "3 × timeout");
    }
}
