//! Reading a process's metrics (Prometheus text format) as the harness scraped them.

/// The value of the sample `series` (name with its labels exactly as exported, e.g.
/// `protected_write_rejected_total{reason="lease"}`).
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_found_by_their_exact_series() {
        let text = "# TYPE x counter\nx{reason=\"lease\"} 4\nx{reason=\"state\"} 0\ny 1.5\n";
        assert_eq!(value(text, "x{reason=\"lease\"}"), Some(4.0));
        assert_eq!(value(text, "y"), Some(1.5));
        assert_eq!(value(text, "x{reason=\"revision\"}"), None);
    }
}
