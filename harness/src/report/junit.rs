//! JUnit XML for CI systems: one testcase per experiment. The suite's properties name the worker
//! under test and the conformance report; a failure's message names the first broken check and the
//! rule it broke, its body the line that reproduces the row.

use std::fmt::Write as _;

use super::{ExperimentResult, Matrix, Outcome};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The suite's properties: the worker under test and the conformance report.
fn properties(m: &Matrix) -> String {
    let mut s = String::from("  <properties>\n");
    let mut prop = |name: &str, value: &str| {
        let _ = writeln!(s, "    <property name=\"{name}\" value=\"{}\"/>", esc(value));
    };
    prop("worker", &m.worker.path);
    prop("worker.sha256", &m.worker.sha256);
    prop("worker.reference", if m.worker.reference { "true" } else { "false" });
    prop("conformance_report", m.conformance_report.as_deref().unwrap_or("none (the gate did not run)"));
    s.push_str("  </properties>\n");
    s
}

/// "CHECK broke RULE (§S): EVIDENCE" for a failed row (every rule of the first broken check).
fn failure_message(r: &ExperimentResult) -> String {
    let Some(c) = r.broken_checks().next() else { return r.evidence_sentence() };
    let rules: Vec<String> = c.rules.iter().map(|x| format!("{} (§{})", x.id, x.section)).collect();
    let broke = if rules.is_empty() { String::new() } else { format!(" broke {}", rules.join(", ")) };
    let more = r.broken_checks().count() - 1;
    let more = if more > 0 { format!(" (and {more} more failed check(s))") } else { String::new() };
    format!("{}{broke}: {}{more}", c.name, r.evidence_sentence())
}

pub fn render(m: &Matrix) -> String {
    let failures = m.results.iter().filter(|r| r.outcome == Outcome::Fail).count();
    let errors = m.results.iter().filter(|r| matches!(r.outcome, Outcome::Error | Outcome::Starved)).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuite name=\"fenceproof\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{:.3}\">",
        m.results.len(),
        m.duration_ms as f64 / 1000.0
    );
    s.push_str(&properties(m));
    for r in &m.results {
        let _ = write!(
            s,
            "  <testcase classname=\"fenceproof.{}\" name=\"{} {}\" time=\"{:.3}\"",
            esc(&m.backend),
            esc(&r.id),
            esc(&r.title),
            r.duration_ms as f64 / 1000.0
        );
        let (tag, message) = match r.outcome {
            Outcome::Pass => {
                s.push_str("/>\n");
                continue;
            }
            Outcome::Fail => ("failure", failure_message(r)),
            Outcome::Error => {
                ("error", r.error.as_deref().map(|e| super::one_line(e, 400)).unwrap_or("no verdict".into()))
            }
            // No verdict either, for a reason that is the machine's: an error named so.
            Outcome::Starved => (
                "error",
                format!("STARVED: {}", r.error.as_deref().map(|e| super::one_line(e, 400)).unwrap_or_default()),
            ),
        };
        let _ = writeln!(
            s,
            ">\n    <{tag} message=\"{}\">reproduce: {}</{tag}>\n  </testcase>",
            esc(&message),
            esc(&r.reproduce)
        );
    }
    s.push_str("</testsuite>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::failing_matrix;

    #[test]
    fn a_failure_names_its_check_rule_and_reproduce_line_and_the_suite_its_worker() {
        let xml = render(&failing_matrix());
        assert!(xml.contains("tests=\"3\" failures=\"1\" errors=\"1\""), "{xml}");
        assert!(xml.contains("<property name=\"worker\" value=\"/tmp/broken/worker.py\"/>"), "{xml}");
        assert!(xml.contains("<property name=\"worker.sha256\" value=\"0123456789abcdef"), "{xml}");
        assert!(xml.contains("<property name=\"conformance_report\" value=\"/elsewhere/conformance.txt\"/>"), "{xml}");
        assert!(
            xml.contains("<failure message=\"old owner writes nothing broke commit.lease-owner-epoch-live (§06): worker a committed #7 after the takeover"),
            "{xml}"
        );
        assert!(
            xml.contains(">reproduce: fenceproof verify --only X-stop --worker-bin /tmp/broken/worker.py</failure>"),
            "{xml}"
        );
        assert!(xml.contains("<error message=\"the worker exited\">"), "{xml}");
    }
}
