//! `index.html`: one self-contained file (inline CSS and SVG, no network) with the matrix and, for
//! each experiment, its checks and a timeline drawn in the spirit of spec section 01 — one lane per
//! process (workers, dispatchers, the control plane, the tools) plus the database, showing pauses
//! and kills, commands, each worker's answers (accepted or rejected), the commits the oracle saw
//! (with the epochs they carried) and the side effects the tools really performed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::{ExperimentResult, Matrix, Outcome};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
        .unwrap_or_default()
}

fn wall_ms(v: &Value) -> Option<f64> {
    let s = v.as_str()?;
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros() as f64 / 1000.0);
    }
    s.parse::<f64>().ok().map(|secs| secs * 1000.0)
}

/// One mark on a lane.
struct Mark {
    lane: String,
    at: f64,
    kind: &'static str,
    title: String,
    label: Option<String>,
}

struct Band {
    lane: String,
    from: f64,
    to: Option<f64>,
}

fn timeline_svg(dir: &Path) -> Option<String> {
    let timeline = lines(&dir.join("timeline.jsonl"));
    let first = timeline.first()?;
    let origin = wall_ms(&first["wall"])? - first["at_ms"].as_f64().unwrap_or(0.0);
    let (mut marks, bands, owner_lane) = harness_marks(&timeline);
    marks.extend(worker_marks(dir, origin));
    marks.extend(commit_marks(dir, origin, &owner_lane));
    marks.extend(tool_marks(dir, origin));
    Some(draw(&marks, &bands))
}

/// What the harness recorded: pauses as bands, everything else as marks on the target's lane; and
/// which lane each owner id spawned on.
fn harness_marks(timeline: &[Value]) -> (Vec<Mark>, Vec<Band>, BTreeMap<String, String>) {
    let mut owner_lane: BTreeMap<String, String> = BTreeMap::new();
    let mut marks = Vec::new();
    let mut bands: Vec<Band> = Vec::new();
    for e in timeline {
        let at = e["at_ms"].as_f64().unwrap_or(0.0);
        let target = e["target"].as_str().unwrap_or("?").to_string();
        let action = e["action"].as_str().unwrap_or("?");
        if action == "spawn" {
            if let Some(o) = e["detail"]["owner"].as_str() {
                owner_lane.insert(o.to_string(), target.clone());
            }
        }
        match action {
            // A partition by the worker's proxy is drawn like a pause: the process runs, but nothing
            // it sends reaches the server.
            "sigstop" | "freeze" | "partition injected" => bands.push(Band { lane: target, from: at, to: None }),
            "sigcont" | "thaw" | "partition healed" => {
                if let Some(b) = bands.iter_mut().rev().find(|b| b.lane == target && b.to.is_none()) {
                    b.to = Some(at);
                }
            }
            "stopped" | "exited" => {}
            _ => {
                let proxy = e["actor"].as_str().is_some_and(|a| a.starts_with("proxy:"));
                let kind = match action {
                    "sigkill" | "fence" => "kill",
                    "command" => "command",
                    "spawn" => "spawn",
                    _ if proxy => "network",
                    _ => "harness",
                };
                let what = if action == "command" {
                    e["detail"]["cmd"].as_str().unwrap_or("command").to_string()
                } else {
                    action.to_string()
                };
                marks.push(Mark { lane: target, at, kind, title: format!("{what}: {}", e["detail"]), label: None });
            }
        }
    }
    (marks, bands, owner_lane)
}

/// What each worker said about itself (its events file), accepted or rejected.
fn worker_marks(dir: &Path, origin: f64) -> Vec<Mark> {
    let mut marks = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return marks };
    for f in rd.flatten() {
        let name = f.file_name().to_string_lossy().to_string();
        let Some(worker) = name.strip_prefix("worker-").and_then(|n| n.strip_suffix(".events.jsonl")) else {
            continue;
        };
        for ev in lines(&f.path()) {
            let Some(t) = wall_ms(&ev["time"]) else { continue };
            let event = ev["event"].as_str().unwrap_or("?");
            if event == "ready" {
                continue;
            }
            let outcome = ev["outcome"].as_str().unwrap_or("?");
            let kind = if outcome == "ok" { "ok" } else { "rejected" };
            marks.push(Mark {
                lane: worker.to_string(),
                at: t - origin,
                kind,
                title: format!("{event}: {outcome} (epoch {}, revision {})", ev["epoch"], ev["revision"]),
                label: None,
            });
        }
    }
    marks
}

/// What the database committed (the oracle), on the writer's lane; a takeover labelled with its epoch.
fn commit_marks(dir: &Path, origin: f64, owner_lane: &BTreeMap<String, String>) -> Vec<Mark> {
    let oracle: Vec<Value> = std::fs::read_to_string(dir.join("oracle.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let mut marks = Vec::new();
    for c in &oracle {
        let Some(t) = wall_ms(&c["committed_at"]) else { continue };
        let writer = c["writer"].as_str().unwrap_or("?");
        let lane = owner_lane.get(writer).cloned().unwrap_or_else(|| {
            if writer.contains("control") {
                "control".into()
            } else {
                writer.to_string()
            }
        });
        let (old, new) = (&c["old_row"], &c["new_row"]);
        let takeover = c["table_name"] == "worker_leases" && c["op"] == "UPDATE" && old["epoch"] != new["epoch"];
        let label = takeover.then(|| format!("e{}", new["epoch"]));
        let title = format!(
            "commit #{} {} {}: revision {} epoch {} status {}",
            c["seq"],
            c["op"].as_str().unwrap_or(""),
            c["table_name"].as_str().unwrap_or(""),
            new["revision"],
            new["epoch"],
            new["status"]
        );
        marks.push(Mark { lane, at: t - origin, kind: "commit", title, label });
    }
    marks
}

/// The side effects the tools performed or refused (their ledger).
fn tool_marks(dir: &Path, origin: f64) -> Vec<Mark> {
    let mut marks = Vec::new();
    for e in lines(&dir.join("tools-ledger.jsonl")) {
        let Some(t) = wall_ms(&e["at"]) else { continue };
        let kind = if e["kind"] == "created" { "effect" } else { "rejected" };
        marks.push(Mark {
            lane: "tools".into(),
            at: t - origin,
            kind,
            title: format!("{} {} {}", e["kind"], e["tool"], e["operation_id"]),
            label: None,
        });
    }
    marks
}

/// The SVG: one lane per process (the database, the tools and the control plane last), the pause
/// bands, then the marks.
fn draw(marks: &[Mark], bands: &[Band]) -> String {
    let mut lanes: Vec<String> = Vec::new();
    for l in bands.iter().map(|b| &b.lane).chain(marks.iter().map(|m| &m.lane)) {
        if !lanes.contains(l) {
            lanes.push(l.clone());
        }
    }
    lanes.sort_by_key(|l| (matches!(l.as_str(), "database" | "tools" | "control") as u8, l.clone()));
    let end = marks.iter().map(|m| m.at).chain(bands.iter().filter_map(|b| b.to)).fold(1.0_f64, f64::max);
    let (left, width, lane_h) = (110.0, 960.0, 30.0);
    let x = |t: f64| left + (t.max(0.0) / end) * width;
    let y = |lane: &str| 30.0 + lanes.iter().position(|l| l == lane).unwrap_or(0) as f64 * lane_h;
    let height = 40.0 + lanes.len() as f64 * lane_h;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" class=\"timeline\">",
        left + width + 20.0
    );
    for (i, l) in lanes.iter().enumerate() {
        let ly = 30.0 + i as f64 * lane_h;
        let _ = write!(s, "<text x=\"4\" y=\"{}\" class=\"lane\">{}</text><line x1=\"{left}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" class=\"lane\"/>", ly + 4.0, esc(l), left + width);
    }
    for b in bands {
        let (x0, x1) = (x(b.from), x(b.to.unwrap_or(end)));
        let _ = write!(s, "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"18\" class=\"pause\"><title>paused (SIGSTOP)</title></rect>", y(&b.lane) - 9.0, (x1 - x0).max(2.0));
    }
    for m in marks {
        draw_mark(&mut s, m, x(m.at), y(&m.lane));
    }
    let _ = write!(s, "<text x=\"{left}\" y=\"{:.1}\" class=\"axis\">0 ms</text><text x=\"{:.1}\" y=\"{:.1}\" class=\"axis\">{end:.0} ms</text></svg>", height - 4.0, left + width - 60.0, height - 4.0);
    s
}

/// One mark at (`cx`, `cy`): a square for a commit, a cross for a kill, a triangle for a side
/// effect, a dot for the rest; with its label (a takeover's epoch) above it.
fn draw_mark(s: &mut String, m: &Mark, cx: f64, cy: f64) {
    let title = format!("<title>{:.0} ms: {}</title>", m.at, esc(&m.title));
    let _ = match m.kind {
        "commit" => write!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"8\" height=\"8\" class=\"commit\">{title}</rect>",
            cx - 4.0,
            cy - 4.0
        ),
        "kill" => write!(s, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"kill\">✕{title}</text>", cx - 5.0, cy + 5.0),
        "effect" => write!(
            s,
            "<polygon points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" class=\"effect\">{title}</polygon>",
            cx,
            cy - 6.0,
            cx - 6.0,
            cy + 5.0,
            cx + 6.0,
            cy + 5.0
        ),
        k => write!(
            s,
            "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"{}\" class=\"{k}\">{title}</circle>",
            if k == "command" || k == "spawn" { 2.5 } else { 4.0 }
        ),
    };
    if let Some(l) = &m.label {
        let _ = write!(s, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"epoch\">{}</text>", cx - 6.0, cy - 8.0, esc(l));
    }
}

fn section(r: &ExperimentResult, run_dir: &Path) -> String {
    let dir = run_dir.join(&r.evidence);
    let mut s = format!(
        "<section id=\"exp-{id}\"><h2>{id} <span class=\"v {c}\">{v}</span></h2><p class=\"title\">{t}</p><p>{o}</p>",
        id = esc(&r.id),
        c = r.outcome.label().to_lowercase(),
        v = r.outcome.label(),
        t = esc(&r.title),
        o = esc(&r.observations)
    );
    if let Some(svg) = timeline_svg(&dir) {
        s.push_str(&svg);
        s.push_str("<p class=\"legend\"><span class=\"k commit\">■</span> commit seen by the oracle (eN: new epoch) <span class=\"k ok\">●</span> answer ok <span class=\"k rejected\">●</span> rejected / unknown <span class=\"k command\">●</span> harness command <span class=\"k pause\">▬</span> paused or partitioned <span class=\"k network\">●</span> network fault (the worker's proxy) <span class=\"k kill\">✕</span> killed / fenced <span class=\"k effect\">▲</span> real side effect (tools' ledger)</p>");
    }
    if let Some(e) = &r.error {
        let _ = write!(s, "<p class=\"error\">error: {}</p>", esc(e));
    }
    s.push_str("<ul class=\"checks\">");
    for c in &r.checks {
        let _ = write!(
            s,
            "<li class=\"{}\"><b>{}</b> {} {}</li>",
            if c.passed() { "pass" } else { "fail" },
            esc(&c.name),
            esc(&c.evidence),
            c.rules
                .iter()
                .map(|r| format!("<a class=\"rule\" href=\"#rule-{0}\">{0} (§{1})</a>", esc(&r.id), esc(&r.section)))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    let links: Vec<String> =
        files.iter().map(|f| format!("<a href=\"{}/{}\">{}</a>", esc(&r.evidence), esc(f), esc(f))).collect();
    let _ = write!(
        s,
        "</ul><p class=\"files\">evidence: {} · reproduce: <code>{}</code></p></section>",
        links.join(" "),
        esc(&r.reproduce)
    );
    s
}

/// Render the report of `m`, whose evidence lives under `run_dir`.
pub fn render(m: &Matrix, run_dir: &Path) -> String {
    let passed = m.results.iter().filter(|r| r.outcome == Outcome::Pass).count();
    let mut s = String::from("<!doctype html><html><head><meta charset=\"utf-8\"><title>fenceproof ");
    s.push_str(&esc(&m.run_id));
    s.push_str("</title><style>");
    s.push_str(CSS);
    let _ = write!(
        s,
        "</style></head><body><h1>fenceproof run <code>{}</code></h1><p>{} backend, {} · {passed}/{} passed · {:.1} s · <a href=\"postgres.log\">postgres.log</a> · <a href=\"matrix.json\">matrix.json</a></p>",
        esc(&m.run_id),
        esc(&m.backend),
        esc(&m.server_version),
        m.results.len(),
        m.duration_ms as f64 / 1000.0
    );
    s.push_str(
        "<table class=\"matrix\"><tr><th>experiment</th><th>verdict</th><th>time</th><th>key observations</th></tr>",
    );
    for r in &m.results {
        let _ = write!(
            s,
            "<tr><td><a href=\"#exp-{id}\">{id}</a></td><td class=\"v {c}\">{v}</td><td>{:.1}s</td><td>{}</td></tr>",
            r.duration_ms as f64 / 1000.0,
            esc(&r.observations),
            id = esc(&r.id),
            c = r.outcome.label().to_lowercase(),
            v = r.outcome.label()
        );
    }
    s.push_str("</table>");
    for r in &m.results {
        s.push_str(&section(r, run_dir));
    }
    s.push_str("<section id=\"rules\"><h2>Rules</h2><p>The spec's rules each check above judges (`fenceproof rules`).</p><ul class=\"rules\">");
    let mut rules: Vec<&crate::check::rule::RuleRef> =
        m.results.iter().flat_map(|r| &r.checks).flat_map(|c| &c.rules).collect();
    rules.sort_by(|a, b| a.id.cmp(&b.id));
    rules.dedup_by(|a, b| a.id == b.id);
    for r in rules {
        let _ = write!(
            s,
            "<li id=\"rule-{id}\"><b>{id}</b> §{sec}: {st}</li>",
            id = esc(&r.id),
            sec = esc(&r.section),
            st = esc(&r.statement)
        );
    }
    s.push_str("</ul></section></body></html>\n");
    s
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:24px;color:#222}code{background:#f3f3f3;padding:1px 4px}\
table.matrix{border-collapse:collapse;margin:12px 0}table.matrix td,table.matrix th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;font-size:13px}\
.v.pass{color:#0a0;font-weight:bold}.v.fail{color:#c00;font-weight:bold}.v.error{color:#c60;font-weight:bold}\
section{border-top:1px solid #ddd;margin-top:18px;padding-top:6px}.title{color:#555;margin:0}\
svg.timeline{background:#fafafa;border:1px solid #eee}line.lane{stroke:#ddd}text.lane{font-size:11px;fill:#333}text.axis{font-size:10px;fill:#888}\
rect.commit{fill:#1a7f37}circle.ok{fill:#2da44e}circle.rejected{fill:#cf222e}circle.command{fill:#0969da}circle.spawn{fill:#999}circle.harness{fill:#8250df}circle.network{fill:#e16f24}\
rect.pause{fill:#bbb;opacity:.6}text.kill{fill:#cf222e;font-size:14px;font-weight:bold}polygon.effect{fill:#d4a72c}text.epoch{font-size:10px;fill:#1a7f37}\
.legend{font-size:12px;color:#555}.k.commit{color:#1a7f37}.k.ok{color:#2da44e}.k.rejected{color:#cf222e}.k.command{color:#0969da}.k.pause{color:#999}.k.kill{color:#cf222e}.k.effect{color:#d4a72c}.k.network{color:#e16f24}\
ul.checks{font-size:13px}a.rule{font-size:11px;color:#36c;margin-left:4px}ul.rules{font-size:12px}li.pass::marker{content:'✓ ';color:#0a0}li.fail{color:#c00}li.fail::marker{content:'✗ '}.files{font-size:12px;color:#555}.error{color:#c60}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Check;
    use serde_json::json;

    #[test]
    fn the_report_has_the_matrix_and_a_timeline_from_the_evidence() {
        let dir = std::env::temp_dir().join(format!("html-test-{}", uuid::Uuid::new_v4()));
        let ev = dir.join("B");
        std::fs::create_dir_all(&ev).unwrap();
        let t0 = "2026-01-01T00:00:00Z";
        std::fs::write(
            ev.join("timeline.jsonl"),
            [
                json!({"at_ms": 0.0, "wall": t0, "actor": "harness", "action": "spawn", "target": "a", "detail": {"owner": "worker-a-1"}}),
                json!({"at_ms": 10.0, "wall": "2026-01-01T00:00:00.010Z", "actor": "harness", "action": "sigstop", "target": "a", "detail": {}}),
                json!({"at_ms": 50.0, "wall": "2026-01-01T00:00:00.050Z", "actor": "harness", "action": "sigcont", "target": "a", "detail": {}}),
            ]
            .iter()
            .map(|v| v.to_string() + "\n")
            .collect::<String>(),
        )
        .unwrap();
        let commit = json!([{"seq": 1, "table_name": "worker_leases", "op": "UPDATE", "writer": "worker-a-1", "committed_at": "2026-01-01T00:00:00.005Z",
            "old_row": {"epoch": 0}, "new_row": {"epoch": 1}}]);
        std::fs::write(ev.join("oracle.json"), commit.to_string()).unwrap();
        std::fs::write(
            ev.join("worker-a.events.jsonl"),
            json!({"time": "2026-01-01T00:00:00.060Z", "event": "save", "outcome": "lease_lost"}).to_string() + "\n",
        )
        .unwrap();
        let m = Matrix {
            run_id: "r1".into(),
            backend: "native".into(),
            server_version: "15".into(),
            started_at: chrono::Utc::now(),
            duration_ms: 10,
            worker: crate::report::WorkerUnderTest { path: "w".into(), sha256: "ab".into(), reference: false },
            conformance_report: None,
            results: vec![ExperimentResult {
                id: "B".into(),
                title: "t".into(),
                outcome: Outcome::Fail,
                duration_ms: 5,
                observations: "obs <x>".into(),
                checks: vec![Check::fail("a check", "evidence")],
                error: None,
                reproduce: "fenceproof verify --only B".into(),
                evidence: "B".into(),
            }],
        };
        let html = render(&m, &dir);
        assert!(html.contains("<a href=\"#exp-B\">B</a></td><td class=\"v fail\">FAIL"), "the matrix row");
        assert!(html.contains("obs &lt;x&gt;"), "escaped observations");
        assert!(html.contains("class=\"pause\""), "the SIGSTOP..SIGCONT band");
        assert!(html.contains("class=\"commit\"") && html.contains(">e1<"), "the oracle commit with its epoch");
        assert!(html.contains("circle") && html.contains("class=\"rejected\""), "the worker's rejected answer");
        assert!(html.contains("li class=\"fail\""), "the failed check");
        assert!(
            !html.contains("http://") || html.matches("http://").count() == 1,
            "no external resources but the SVG namespace"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
