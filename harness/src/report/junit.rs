//! JUnit XML for CI systems: one testcase per experiment, failures carrying the failed checks.

use std::fmt::Write as _;

use super::{Matrix, Outcome};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn render(m: &Matrix) -> String {
    let failures = m.results.iter().filter(|r| r.outcome == Outcome::Fail).count();
    let errors = m.results.iter().filter(|r| r.outcome == Outcome::Error).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuite name=\"fenceproof\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{:.3}\">",
        m.results.len(),
        m.duration_ms as f64 / 1000.0
    );
    for r in &m.results {
        let _ = write!(
            s,
            "  <testcase classname=\"fenceproof.{}\" name=\"{} {}\" time=\"{:.3}\"",
            esc(&m.backend),
            esc(&r.id),
            esc(&r.title),
            r.duration_ms as f64 / 1000.0
        );
        let failed: Vec<String> =
            r.checks.iter().filter(|c| !c.passed()).map(|c| format!("{}: {}", c.name, c.evidence)).collect();
        match r.outcome {
            Outcome::Pass => s.push_str("/>\n"),
            Outcome::Fail => {
                let _ = writeln!(
                    s,
                    ">\n    <failure message=\"{}\">{}</failure>\n  </testcase>",
                    esc(&failed.join("; ")),
                    esc(&r.reproduce)
                );
            }
            Outcome::Error => {
                let _ = writeln!(
                    s,
                    ">\n    <error message=\"{}\">{}</error>\n  </testcase>",
                    esc(r.error.as_deref().unwrap_or("no verdict")),
                    esc(&r.reproduce)
                );
            }
        }
    }
    s.push_str("</testsuite>\n");
    s
}
