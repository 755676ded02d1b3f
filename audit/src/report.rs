//! The audit table: one row per library and experiment, with the three checks, how many times the
//! job body ran, and where the evidence is; as text for the terminal, JSON, Markdown and an HTML
//! page whose cells open their checks' evidence and the harness's timeline (A held, B's takeover,
//! A back, every committed write of the job row).

use std::fmt::Write as _;

use fenceproof_harness::check::audit::{CONCURRENT, CURRENT_OUTCOME, STALE_CHECKPOINT, STALE_WRITE};

use super::cell::{CellResult, Outcome};
use super::experiments::EXPERIMENTS;
use super::libraries::LIBRARIES;
use super::settings::Settings;

/// The checks' short column names, in order.
const COLUMNS: &[(&str, &str)] = &[
    (STALE_WRITE, "stale write accepted"),
    (CONCURRENT, "concurrent executions"),
    (CURRENT_OUTCOME, "current outcome lost"),
    (STALE_CHECKPOINT, "stale checkpoint accepted"),
];

/// A check's cell: "no" when it passed, "YES" when it failed (the column names a failure), "-"
/// when it was not judged.
fn mark(r: &CellResult, check: &str) -> &'static str {
    match r.check(check) {
        Some(c) if c.passed() => "no",
        Some(_) => "YES",
        None => "-",
    }
}

fn duplicate(r: &CellResult) -> String {
    match (r.verdict, r.executions) {
        (Outcome::Error | Outcome::NotApplicable | Outcome::NoTakeover, _) => "-".into(),
        (_, n) if n > 1 => format!("yes ({n})"),
        (_, n) => format!("no ({n})"),
    }
}

/// The table as Markdown (also what the terminal shows).
pub fn markdown(results: &[CellResult]) -> String {
    let mut s = String::new();
    s.push_str("| library | experiment | verdict | body ran twice |");
    for (_, col) in COLUMNS {
        let _ = write!(s, " {col} |");
    }
    s.push_str(" evidence |\n|---|---|---|---|");
    s.push_str(&"---|".repeat(COLUMNS.len()));
    s.push_str("---|\n");
    for r in results {
        let _ = write!(
            s,
            "| {} {} | {} | {} | {} |",
            r.library,
            if r.control { "(control)" } else { r.version.as_str() },
            r.experiment,
            r.verdict.label(),
            duplicate(r),
        );
        for (check, _) in COLUMNS {
            let _ = write!(s, " {} |", mark(r, check));
        }
        let _ = writeln!(s, " {} |", r.evidence);
    }
    s
}

/// What went wrong, cell by cell: each failed check's evidence, each error, and how to reproduce.
pub fn findings(results: &[CellResult]) -> String {
    let mut s = String::new();
    for r in results.iter().filter(|r| r.verdict != Outcome::Pass) {
        let _ = writeln!(s, "{} {} / {}:", r.verdict.label(), r.library, r.experiment);
        if let Some(e) = &r.error {
            let _ = writeln!(s, "  error: {e}");
        }
        if let Some(why) = &r.not_applicable {
            let _ = writeln!(s, "  does not apply: {why}");
        }
        for c in r.checks.iter().filter(|c| !c.passed()) {
            let _ = writeln!(s, "  {}: {}", c.name, c.evidence);
        }
        let _ = writeln!(s, "  evidence: {}/  reproduce: {}", r.evidence, r.reproduce);
    }
    s
}

/// The short name of a check in the results matrix.
fn short(check: &str) -> &'static str {
    match check {
        STALE_WRITE => "stale write",
        CONCURRENT => "concurrent",
        CURRENT_OUTCOME => "outcome lost",
        STALE_CHECKPOINT => "stale checkpoint",
        _ => "other",
    }
}

/// The run's results, compact: what `docs/audit/results.json` keeps and the docs' matrix is made
/// from (so the published table is a run's own output, never retyped).
pub fn summary(results: &[CellResult]) -> serde_json::Value {
    let cells: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let failed: Vec<&str> = r.checks.iter().filter(|c| !c.passed()).map(|c| short(&c.name)).collect();
            serde_json::json!({
                "library": r.library,
                "version": r.version,
                "experiment": r.experiment,
                "settings": r.settings,
                "verdict": r.verdict.label(),
                "executions": r.executions,
                "failed": failed,
                "note": r.not_applicable.clone().or_else(|| r.error.clone()).or_else(|| r.observed.clone()),
                "evidence": r.evidence,
                "paused_s": r.paused_ms.map(|ms| (ms as f64 / 100.0).round() / 10.0),
            })
        })
        .collect();
    serde_json::Value::Array(cells)
}

/// One cell of the matrix: the verdict, the failed checks, and `x2` when the body ran twice.
fn summary_cell(c: &serde_json::Value) -> String {
    let verdict = c["verdict"].as_str().unwrap_or("?");
    let failed: Vec<&str> =
        c["failed"].as_array().map(|a| a.iter().filter_map(|f| f.as_str()).collect()).unwrap_or_default();
    let mut s = if failed.is_empty() { verdict.to_string() } else { format!("{verdict}: {}", failed.join(", ")) };
    let n = c["executions"].as_u64().unwrap_or(0);
    if n > 1 && matches!(verdict, "PASS" | "FAIL") {
        let _ = write!(s, " (x{n})");
    }
    // A FAIL says the pause that produced it (A held from its first pause to its resume).
    if let (true, Some(p)) = (verdict == "FAIL", c["paused_s"].as_f64()) {
        let _ = write!(s, " after a {p:.1} s pause");
    }
    s
}

/// The results as a matrix, one row per library and one column per experiment (from a summary).
pub fn summary_markdown(summary: &serde_json::Value) -> String {
    let cells = summary.as_array().cloned().unwrap_or_default();
    let mut libs: Vec<(String, String)> = Vec::new();
    let mut exps: Vec<String> = Vec::new();
    for c in &cells {
        let lib = (c["library"].as_str().unwrap_or("").to_string(), c["version"].as_str().unwrap_or("").to_string());
        if !libs.contains(&lib) {
            libs.push(lib);
        }
        let e = c["experiment"].as_str().unwrap_or("").to_string();
        if !exps.contains(&e) {
            exps.push(e);
        }
    }
    // The columns in the experiments' own order (a run of a few cells lists them as its first
    // library has them); an experiment the code no longer has goes last.
    let rank = |e: &String| EXPERIMENTS.iter().position(|x| x.id == e.as_str()).unwrap_or(EXPERIMENTS.len());
    exps.sort_by_key(rank);
    let mut s = String::from("| library |");
    for e in &exps {
        let _ = write!(s, " `{e}` |");
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(exps.len()));
    s.push('\n');
    for (lib, version) in &libs {
        let _ = write!(s, "| {lib} {version} |");
        for e in &exps {
            let c = cells.iter().find(|c| c["library"] == lib.as_str() && c["experiment"] == e.as_str());
            let _ = write!(s, " {} |", c.map(summary_cell).unwrap_or_else(|| "-".into()));
        }
        s.push('\n');
    }
    s
}

/// One library's cells of a summary, one line per experiment with its verdict, what failed, how
/// many times the body ran, and the note (why N/A, or what was observed instead of a verdict).
pub fn summary_library_markdown(summary: &serde_json::Value, library: &str) -> String {
    let mut s = String::from(
        "| experiment | verdict | body ran | failed checks | A held (s) | note | evidence folder |\n|---|---|---|---|---|---|---|\n",
    );
    for c in summary.as_array().into_iter().flatten().filter(|c| c["library"] == library) {
        let failed: Vec<&str> =
            c["failed"].as_array().map(|a| a.iter().filter_map(|f| f.as_str()).collect()).unwrap_or_default();
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | `{}/` |",
            c["experiment"].as_str().unwrap_or(""),
            c["verdict"].as_str().unwrap_or(""),
            c["executions"].as_u64().unwrap_or(0),
            if failed.is_empty() { "-".to_string() } else { failed.join(", ") },
            c["paused_s"].as_f64().map(|p| format!("{p:.1}")).unwrap_or_else(|| "-".into()),
            c["note"].as_str().unwrap_or("").replace('|', "\\|").replace('\n', " "),
            c["evidence"].as_str().unwrap_or("")
        );
    }
    s
}

/// Why each N/A cell of a summary does not apply, one line each.
pub fn summary_notes(summary: &serde_json::Value) -> String {
    let mut s = String::new();
    for c in
        summary.as_array().into_iter().flatten().filter(|c| !matches!(c["verdict"].as_str(), Some("PASS" | "FAIL")))
    {
        let _ = writeln!(
            s,
            "- {} `{}` ({}): {}",
            c["library"].as_str().unwrap_or(""),
            c["experiment"].as_str().unwrap_or(""),
            c["verdict"].as_str().unwrap_or(""),
            c["note"].as_str().unwrap_or("").replace('\n', " ")
        );
    }
    s
}

/// How each library was configured at `settings` (versions, the numbers of its stall recovery, how
/// it recovers, what guards its completion).
pub fn settings_markdown(names: &[&str], settings: Settings) -> String {
    let mut s = format!(
        "| library | version | threshold, heartbeat, sweep (s) at {} settings | stall recovery | completion guarded by |\n|---|---|---|---|---|\n",
        settings.name()
    );
    for l in LIBRARIES.iter().filter(|l| names.contains(&l.name)) {
        let t = l.timing(settings);
        let how = match settings {
            Settings::Fast => l.recovery,
            Settings::Production => l.production.defaults,
        };
        let _ = writeln!(
            s,
            "| {} | {} | {}, {}, {} | {} | {} |",
            l.name, l.version, t.stall_s, t.heartbeat_s, t.sweep_s, how, l.completion_guard
        );
    }
    s
}

/// A verdict as a CSS class name (the labels "N/A" and "NO TAKEOVER" are not names).
fn css_class(v: Outcome) -> &'static str {
    match v {
        Outcome::Pass => "PASS",
        Outcome::Fail => "FAIL",
        Outcome::Error => "ERROR",
        Outcome::NotApplicable => "NA",
        Outcome::NoTakeover => "NOTAKEOVER",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The HTML page: the table, then each cell's checks, writes and timeline.
pub fn html(results: &[CellResult], title: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html><meta charset=utf-8><title>{t}</title><style>body{{font:14px system-ui;margin:2em}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}\
         .PASS{{background:#dfd}}.FAIL{{background:#fdd}}.ERROR{{background:#ffd}}.NA,.NOTAKEOVER{{background:#eee}}.YES{{color:#b00;font-weight:bold}}\
         pre{{background:#f6f6f6;padding:6px;white-space:pre-wrap}}</style><h1>{t}</h1>",
        t = esc(title)
    );
    html_matrix(&mut s, results);
    html_table(&mut s, results);
    for (i, r) in results.iter().enumerate() {
        html_cell(&mut s, i, r);
    }
    s
}

/// The matrix: one row per system, one column per experiment; each cell its verdict, what failed,
/// the pause behind it, and links to its section, its evidence folder and its timeline.
fn html_matrix(s: &mut String, results: &[CellResult]) {
    let mut libs: Vec<&str> = Vec::new();
    let mut exps: Vec<&str> = Vec::new();
    for r in results {
        if !libs.contains(&r.library.as_str()) {
            libs.push(&r.library);
        }
        if !exps.contains(&r.experiment.as_str()) {
            exps.push(&r.experiment);
        }
    }
    s.push_str("<h2>Systems × experiments</h2><table><tr><th>system</th>");
    for e in &exps {
        let _ = write!(s, "<th>{}</th>", esc(e));
    }
    s.push_str("</tr>");
    for lib in &libs {
        let _ = write!(s, "<tr><th>{}</th>", esc(lib));
        for e in &exps {
            let Some((i, r)) = results.iter().enumerate().find(|(_, r)| r.library == *lib && r.experiment == *e) else {
                s.push_str("<td>-</td>");
                continue;
            };
            let failed: Vec<&str> = r.checks.iter().filter(|c| !c.passed()).map(|c| short(&c.name)).collect();
            let pause = r.paused_ms.map(|ms| format!(" · A held {:.1} s", ms as f64 / 1000.0)).unwrap_or_default();
            let _ = write!(
                s,
                "<td class=\"{c}\"><a href=\"#c{i}\">{v}</a>{f}<br><small>ran {n}{pause} · <a href=\"{ev}/\">evidence</a> · \
                 <a href=\"{ev}/timeline.json\">timeline</a></small></td>",
                c = css_class(r.verdict),
                v = r.verdict.label(),
                f = if failed.is_empty() { String::new() } else { format!(": {}", esc(&failed.join(", "))) },
                n = r.executions,
                ev = esc(&r.evidence)
            );
        }
        s.push_str("</tr>");
    }
    s.push_str("</table><h2>Cells</h2>");
}

/// The table: one row per cell, its verdict and a mark per judged column.
fn html_table(s: &mut String, results: &[CellResult]) {
    s.push_str("<table><tr><th>library</th><th>experiment</th><th>verdict</th><th>body ran twice</th>");
    for (_, col) in COLUMNS {
        let _ = write!(s, "<th>{col}</th>");
    }
    s.push_str("</tr>");
    for (i, r) in results.iter().enumerate() {
        let _ = write!(
            s,
            "<tr><td>{} {}</td><td><a href=\"#c{i}\">{}</a></td><td class=\"{c}\">{v}</td><td>{}</td>",
            esc(&r.library),
            esc(if r.control { "(control)" } else { &r.version }),
            esc(&r.experiment),
            esc(&duplicate(r)),
            v = r.verdict.label(),
            c = css_class(r.verdict)
        );
        for (check, _) in COLUMNS {
            let m = mark(r, check);
            let _ = write!(s, "<td class={m}>{m}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
}

/// One cell's section: its title and evidence, its error or its checks, and its timeline.
fn html_cell(s: &mut String, i: usize, r: &CellResult) {
    let title = EXPERIMENTS.iter().find(|e| e.id == r.experiment).map(|e| e.title).unwrap_or("");
    let _ = write!(
        s,
        "<h2 id=c{i}>{} / {} <span class=\"{c}\">{v}</span></h2><p>{}</p><p>evidence: <a href=\"{e}/\">{e}/</a> \
         (cell.json, commits.json, tools-ledger.jsonl, timeline.json, adapter-*.log) · reproduce: <code>{}</code></p>",
        esc(&r.library),
        esc(&r.experiment),
        esc(title),
        esc(&r.reproduce),
        v = r.verdict.label(),
        c = css_class(r.verdict),
        e = esc(&r.evidence)
    );
    if let Some(e) = &r.error {
        let _ = write!(s, "<pre>error: {}</pre>", esc(e));
    }
    if let Some(why) = &r.not_applicable {
        let _ = write!(s, "<p>does not apply: {}</p>", esc(why));
    }
    for c in &r.checks {
        let _ = write!(
            s,
            "<p><b>{}</b> {}</p><pre>{}</pre>",
            if c.passed() { "pass" } else { "FAIL" },
            esc(&c.name),
            esc(&c.evidence)
        );
    }
    s.push_str("<pre>");
    for (t, what) in cell_timeline(r) {
        let _ = writeln!(s, "{t}  {}", esc(&what));
    }
    s.push_str("</pre>");
}

/// One timeline: the harness's steps, the executions and the committed writes, and what the
/// workers said of themselves, by wall clock.
fn cell_timeline(r: &CellResult) -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = r
        .timeline
        .iter()
        .map(|e| (e.wall.format("%H:%M:%S%.3f").to_string(), format!("harness {} {}", e.action, e.target)))
        .collect();
    if let Some(h) = &r.history {
        for e in &h.executions {
            lines.push((e.start.format("%H:%M:%S%.3f").to_string(), format!("{} START (tools' ledger)", e.worker)));
            if let Some(end) = e.end {
                lines.push((end.format("%H:%M:%S%.3f").to_string(), format!("{} END (tools' ledger)", e.worker)));
            }
        }
        for w in &h.writes {
            lines.push((
                w.at.format("%H:%M:%S%.3f").to_string(),
                format!(
                    "commit #{} {} by {}: {} -> {}",
                    w.seq,
                    w.op,
                    w.writer,
                    w.status_before.as_deref().unwrap_or("-"),
                    w.status_after.as_deref().unwrap_or("(deleted)")
                ),
            ));
        }
    }
    for e in &r.worker_events {
        let (Some(at), Some(ev)) = (e["at"].as_f64(), e["event"].as_str()) else { continue };
        if !matches!(ev, "written" | "refused" | "lease_lost" | "recovered") {
            continue;
        }
        let Some(t) = chrono::DateTime::from_timestamp_micros((at * 1e6) as i64) else { continue };
        let detail = [e["write"].as_str(), e["outcome"].as_str()].into_iter().flatten().collect::<Vec<_>>().join(" ");
        lines.push((
            t.format("%H:%M:%S%.3f").to_string(),
            format!("{} says {ev} {detail} (its own word)", e["worker"].as_str().unwrap_or("?")),
        ));
    }
    lines.sort();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn summary_of_two() -> serde_json::Value {
        json!([
            {"library": "q", "version": "1.0", "experiment": "e1", "verdict": "FAIL", "executions": 2,
             "failed": ["stale write", "outcome lost"], "note": null, "evidence": "q-e1", "paused_s": 3.4},
            {"library": "q", "version": "1.0", "experiment": "e2", "verdict": "N/A", "executions": 0,
             "failed": [], "note": "no such thing | here", "evidence": "q-e2"},
            {"library": "r", "version": "2", "experiment": "e1", "verdict": "PASS", "executions": 1,
             "failed": [], "note": null, "evidence": "r-e1"}
        ])
    }

    #[test]
    fn the_matrix_orders_its_columns_as_the_experiments_are_declared() {
        let s = json!([
            {"library": "reference", "version": "p", "experiment": "kill-control", "verdict": "PASS", "executions": 2},
            {"library": "q", "version": "1", "experiment": "pause-early-fail", "verdict": "FAIL", "executions": 2,
             "failed": ["stale write"], "paused_s": 30.8},
            {"library": "q", "version": "1", "experiment": "pause-early-success", "verdict": "FAIL", "executions": 2,
             "failed": ["stale write"], "paused_s": 31.2}
        ]);
        let m = summary_markdown(&s);
        assert_eq!(m.lines().next(), Some("| library | `pause-early-success` | `pause-early-fail` | `kill-control` |"));
        assert!(m.contains("| q 1 | FAIL: stale write (x2) after a 31.2 s pause | FAIL: stale write (x2) after a 30.8 s pause | - |"), "{m}");
    }

    #[test]
    fn the_matrix_has_a_row_per_library_and_a_column_per_experiment() {
        let m = summary_markdown(&summary_of_two());
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(lines[0], "| library | `e1` | `e2` |");
        assert_eq!(lines[2], "| q 1.0 | FAIL: stale write, outcome lost (x2) after a 3.4 s pause | N/A |");
        assert_eq!(lines[3], "| r 2 | PASS | - |", "a cell the run did not have is a dash");
    }

    #[test]
    fn notes_name_every_cell_without_a_verdict_and_library_tables_escape_pipes() {
        let s = summary_of_two();
        let notes = summary_notes(&s);
        assert_eq!(notes.lines().count(), 1);
        assert!(notes.contains("q `e2` (N/A): no such thing"), "{notes}");
        let t = summary_library_markdown(&s, "q");
        assert!(t.contains("no such thing \\| here"), "{t}");
        assert_eq!(t.lines().count(), 4, "{t}");
    }

    fn cell(library: &str, experiment: &str, verdict: Outcome) -> CellResult {
        CellResult {
            library: library.into(),
            version: "1".into(),
            experiment: experiment.into(),
            settings: "fast".into(),
            control: false,
            verdict,
            executions: 2,
            checks: Vec::new(),
            error: None,
            duration_ms: 0,
            evidence: format!("{library}-{experiment}"),
            reproduce: String::new(),
            history: None,
            timeline: Vec::new(),
            worker_events: Vec::new(),
            not_applicable: None,
            paused_ms: Some(3400),
            observed: None,
        }
    }

    #[test]
    fn the_html_matrix_has_a_cell_per_system_and_experiment_linking_its_evidence_and_timeline() {
        let rs = [cell("q", "e1", Outcome::Fail), cell("q", "e2", Outcome::Pass), cell("r", "e2", Outcome::Pass)];
        let page = html(&rs, "t");
        let matrix = &page[page.find("<h2>Systems").unwrap()..page.find("<h2>Cells").unwrap()];
        assert_eq!(matrix.matches("<tr><th>").count(), 3, "the header and a row per system: {matrix}");
        assert!(matrix.contains("<a href=\"q-e1/timeline.json\">timeline</a>"), "{matrix}");
        assert!(matrix.contains("A held 3.4 s") && matrix.contains("<td>-</td>"), "r has no e1: {matrix}");
    }
}
