//! `index.html`: one self-contained file (inline CSS and SVG, no network). It opens with the worker
//! under test and, when anything failed, "What broke": per failing row the rules it broke, the
//! evidence in a sentence and the line that reproduces it. Then the matrix and, for each experiment
//! (failing ones first, broken checks above the passing ones), its checks and a timeline drawn in the spirit of spec section 01 — one lane per
//! process (workers, dispatchers, the control plane, the tools) plus the database, showing pauses
//! and kills, commands, each worker's answers (accepted or rejected), the commits the oracle saw
//! (with the epochs they carried) and the side effects the tools really performed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::{ExperimentResult, Matrix, Outcome};
use crate::check::rule::RuleRef;
use crate::check::Check;

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
    /// What began it, as a sentence.
    what: String,
}

/// A JSON value as plain text: strings unquoted, arrays space-separated, objects `(k=v, k=v)`.
fn plain(v: &Value) -> String {
    match v {
        // Control characters spelled as JSON escapes, so a value never breaks the line.
        Value::String(s) if s.chars().any(char::is_control) => v.to_string().trim_matches('"').to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(plain).collect::<Vec<_>>().join(" "),
        Value::Object(_) => format!("({})", fields(v, &[])),
        other => other.to_string(),
    }
}

/// An object's fields as `k=v, k=v` (but those in `skip` and nulls); empty for anything else.
fn fields(v: &Value, skip: &[&str]) -> String {
    let Some(o) = v.as_object() else { return String::new() };
    o.iter()
        .filter(|(k, x)| !skip.contains(&k.as_str()) && !x.is_null())
        .map(|(k, x)| format!("{k}={}", super::one_line(&plain(x), 80)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `head` followed by ` (fields)` when there are any.
fn with_fields(head: String, detail: &Value, skip: &[&str]) -> String {
    let f = fields(detail, skip);
    if f.is_empty() {
        head
    } else {
        format!("{head} ({f})")
    }
}

/// A harness timeline entry as a sentence ("harness SIGSTOPped worker a (pid 7)"); an action it
/// does not know reads "actor action target: k=v, k=v". `workers` are the lanes spawned as workers.
fn event_sentence(e: &Value, workers: &BTreeSet<String>) -> String {
    let actor = e["actor"].as_str().unwrap_or("?");
    let action = e["action"].as_str().unwrap_or("?");
    let raw = e["target"].as_str().unwrap_or("?");
    let target = if workers.contains(raw) { format!("worker {raw}") } else { raw.to_string() };
    let d = &e["detail"];
    let sentence = match action {
        "sigstop" => with_fields(format!("{actor} SIGSTOPped {target}"), d, &[]),
        "sigcont" => with_fields(format!("{actor} resumed {target} (SIGCONT)"), d, &[]),
        "sigkill" => with_fields(format!("{actor} SIGKILLed {target}"), d, &[]),
        "freeze" => with_fields(format!("{actor} froze {target}"), d, &[]),
        "thaw" => with_fields(format!("{actor} thawed {target}"), d, &[]),
        "fence" => with_fields(format!("{actor} fenced {target}"), d, &[]),
        "spawn" => with_fields(format!("{actor} spawned {target}"), d, &["args"]),
        "exited" => with_fields(format!("{target} exited"), d, &[]),
        "command" => {
            let cmd = d["cmd"].as_str().unwrap_or("a command");
            with_fields(format!("{actor} sent {cmd} to {target}"), d, &["cmd"])
        }
        "observed" if d["condition"].is_string() => format!("{actor} observed {}", plain(&d["condition"])),
        _ => {
            let f = fields(d, &[]);
            let head = format!("{actor} {action} {target}");
            if f.is_empty() {
                head
            } else {
                format!("{head}: {f}")
            }
        }
    };
    super::one_line(&sentence, 300)
}

/// The timeline of the row whose evidence is in `dir`; the commits its failed checks name
/// (`failing`) are drawn red.
fn timeline_svg(dir: &Path, failing: &BTreeSet<i64>) -> Option<String> {
    let timeline = lines(&dir.join("timeline.jsonl"));
    let first = timeline.first()?;
    let origin = wall_ms(&first["wall"])? - first["at_ms"].as_f64().unwrap_or(0.0);
    let (mut marks, bands, owner_lane) = harness_marks(&timeline);
    marks.extend(worker_marks(dir, origin));
    marks.extend(commit_marks(dir, origin, &owner_lane, failing));
    marks.extend(tool_marks(dir, origin));
    Some(draw(&marks, &bands))
}

/// What the harness recorded: pauses as bands, everything else as marks on the target's lane; and
/// which lane each owner id spawned on.
fn harness_marks(timeline: &[Value]) -> (Vec<Mark>, Vec<Band>, BTreeMap<String, String>) {
    let mut owner_lane: BTreeMap<String, String> = BTreeMap::new();
    for e in timeline.iter().filter(|e| e["action"] == "spawn") {
        if let (Some(o), Some(t)) = (e["detail"]["owner"].as_str(), e["target"].as_str()) {
            owner_lane.insert(o.to_string(), t.to_string());
        }
    }
    let workers: BTreeSet<String> = owner_lane.values().cloned().collect();
    let mut marks = Vec::new();
    let mut bands: Vec<Band> = Vec::new();
    for e in timeline {
        let at = e["at_ms"].as_f64().unwrap_or(0.0);
        let target = e["target"].as_str().unwrap_or("?").to_string();
        let action = e["action"].as_str().unwrap_or("?");
        let title = event_sentence(e, &workers);
        match action {
            // A partition by the worker's proxy is drawn like a pause: the process runs, but nothing
            // it sends reaches the server.
            "sigstop" | "freeze" | "partition injected" => {
                bands.push(Band { lane: target, from: at, to: None, what: title })
            }
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
                marks.push(Mark { lane: target, at, kind, title, label: None });
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
            let title = answer_sentence(worker, &ev);
            marks.push(Mark { lane: worker.to_string(), at: t - origin, kind, title, label: None });
        }
    }
    marks
}

/// A worker's event as a sentence: "worker b: save answered lease_lost (epoch 2, revision 3): why".
fn answer_sentence(worker: &str, ev: &Value) -> String {
    let event = ev["event"].as_str().unwrap_or("?");
    let outcome = ev["outcome"].as_str().unwrap_or("?");
    let verb = if ev["id"].is_null() { "reported" } else { "answered" };
    let at: Vec<String> = ["epoch", "revision"]
        .iter()
        .filter(|k| !ev[**k].is_null())
        .map(|k| format!("{k} {}", plain(&ev[*k])))
        .collect();
    let mut s = format!("worker {worker}: {event} {verb} {outcome}");
    if !at.is_empty() {
        s.push_str(&format!(" ({})", at.join(", ")));
    }
    if let Some(d) = ev["detail"].as_str().filter(|d| !d.is_empty()) {
        s.push_str(&format!(": {}", super::one_line(d, 160)));
    }
    s
}

/// What the database committed (the oracle), on the writer's lane; a takeover labelled with its
/// epoch, a commit a failed check names (`failing`) red and labelled with its number.
fn commit_marks(dir: &Path, origin: f64, owner_lane: &BTreeMap<String, String>, failing: &BTreeSet<i64>) -> Vec<Mark> {
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
        let broke = c["seq"].as_i64().is_some_and(|n| failing.contains(&n));
        let label = match (broke, takeover) {
            (true, _) => Some(format!("FAIL #{}", c["seq"])),
            (false, true) => Some(format!("e{}", new["epoch"])),
            (false, false) => None,
        };
        let state: Vec<String> = ["revision", "epoch", "status"]
            .iter()
            .filter(|k| !new[**k].is_null())
            .map(|k| format!("{k} {}", plain(&new[*k])))
            .collect();
        let title = format!(
            "{}database committed #{} by {writer}: {} {}{}",
            if broke { "FAILING COMMIT: " } else { "" },
            c["seq"],
            c["op"].as_str().unwrap_or(""),
            c["table_name"].as_str().unwrap_or(""),
            if state.is_empty() { String::new() } else { format!(" ({})", state.join(", ")) }
        );
        let kind = if broke { "failing" } else { "commit" };
        marks.push(Mark { lane, at: t - origin, kind, title, label });
    }
    marks
}

/// The side effects the tools performed or refused (their ledger).
fn tool_marks(dir: &Path, origin: f64) -> Vec<Mark> {
    let mut marks = Vec::new();
    for e in lines(&dir.join("tools-ledger.jsonl")) {
        let Some(t) = wall_ms(&e["at"]) else { continue };
        // An `answered` call (a replay, a conflict, a query) made no effect: a plain dot.
        let kind = match e["kind"].as_str() {
            Some("created") => "effect",
            Some("answered") => "command",
            _ => "rejected",
        };
        marks.push(Mark {
            lane: "tools".into(),
            at: t - origin,
            kind,
            title: format!(
                "tools: {} {} for operation {}",
                plain(&e["tool"]),
                plain(&e["kind"]),
                plain(&e["operation_id"])
            ),
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
        let _ = write!(
            s,
            "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"18\" class=\"pause\"><title>{}</title></rect>",
            y(&b.lane) - 9.0,
            (x1 - x0).max(2.0),
            esc(&format!("{} ({:.0}–{:.0} ms)", b.what, b.from, b.to.unwrap_or(end)))
        );
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
        "failing" => write!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" class=\"commit failing\">{title}</rect>",
            cx - 6.0,
            cy - 6.0
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
        let class = if m.kind == "failing" { "epoch failing" } else { "epoch" };
        let _ = write!(s, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"{class}\">{}</text>", cx - 6.0, cy - 8.0, esc(l));
    }
}

/// A rule as a link to its entry in the page's rules section: "id §section".
fn rule_link(r: &RuleRef) -> String {
    format!("<a class=\"rule\" href=\"#rule-{0}\">{0} (§{1})</a>", esc(&r.id), esc(&r.section))
}

/// One check as a list item, with the rules it judges; a failed one as its short sentence, its
/// whole evidence folded under it.
fn check_item(c: &Check) -> String {
    if !c.passed() {
        return format!(
            "<li class=\"fail\"><details><summary><b>{}</b> {} {}</summary><pre class=\"evidence\">{}</pre></details></li>",
            esc(&c.name),
            esc(&super::broken::observed(&c.evidence, 200)),
            c.rules.iter().map(rule_link).collect::<Vec<_>>().join(" "),
            esc(&c.evidence)
        );
    }
    format!(
        "<li class=\"{}\"><b>{}</b> {} {}</li>",
        if c.passed() { "pass" } else { "fail" },
        esc(&c.name),
        esc(&c.evidence),
        c.rules.iter().map(rule_link).collect::<Vec<_>>().join(" ")
    )
}

/// The checks of a row: the broken ones in the open, the passing ones folded below them.
fn checks_html(r: &ExperimentResult) -> String {
    let mut s = String::new();
    let broken: Vec<String> = r.broken_checks().map(check_item).collect();
    if !broken.is_empty() {
        let _ = write!(s, "<ul class=\"checks broken\">{}</ul>", broken.concat());
    }
    let passing: Vec<String> = r.checks.iter().filter(|c| c.passed()).map(check_item).collect();
    if !passing.is_empty() {
        let _ = write!(
            s,
            "<details class=\"passing\"><summary>{} passing check(s)</summary><ul class=\"checks\">{}</ul></details>",
            passing.len(),
            passing.concat()
        );
    }
    s
}

/// The evidence files of a row, linked.
fn files_html(r: &ExperimentResult, dir: &Path) -> String {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    let links: Vec<String> =
        files.iter().map(|f| format!("<a href=\"{}/{}\">{}</a>", esc(&r.evidence), esc(f), esc(f))).collect();
    format!(
        "<p class=\"files\">evidence: {} · reproduce: <code class=\"copy\">{}</code></p>",
        links.join(" "),
        esc(&r.reproduce)
    )
}

const LEGEND: &str = "<p class=\"legend\"><span class=\"k commit\">■</span> commit seen by the oracle (eN: new epoch) <span class=\"k failing\">■</span> a commit a failed check names <span class=\"k ok\">●</span> answer ok <span class=\"k rejected\">●</span> rejected / unknown <span class=\"k command\">●</span> harness command <span class=\"k pause\">▬</span> paused or partitioned <span class=\"k network\">●</span> network fault (the worker's proxy) <span class=\"k kill\">✕</span> killed / fenced <span class=\"k effect\">▲</span> real side effect (tools' ledger) · hover a mark for what happened</p>";

/// One row's section: verdict, what went wrong (error, broken checks), the timeline, the passing
/// checks folded, the evidence files and the reproduce line.
fn section(r: &ExperimentResult, run_dir: &Path) -> String {
    let dir = run_dir.join(&r.evidence);
    let mut s = format!(
        "<section id=\"exp-{id}\" class=\"row {c}\"><h2>{id} <span class=\"v {c}\">{v}</span></h2><p class=\"title\">{t}</p><p>{o}</p>",
        id = esc(&r.id),
        c = r.outcome.label().to_lowercase(),
        v = r.outcome.label(),
        t = esc(&r.title),
        o = esc(&r.observations)
    );
    if let Some(e) = &r.error {
        let _ = write!(s, "<p class=\"error\">error: {}</p>", esc(e));
    }
    s.push_str(&checks_html(r));
    let failing: BTreeSet<i64> = r.broken_checks().flat_map(|c| c.commits.iter().copied()).collect();
    if let Some(svg) = timeline_svg(&dir, &failing) {
        s.push_str(&svg);
        s.push_str(LEGEND);
    }
    s.push_str(&files_html(r, &dir));
    s.push_str("</section>");
    s
}

/// The header: the run, the worker under test and the conformance report.
fn header(m: &Matrix, run_dir: &Path) -> String {
    let short: String = m.worker.sha256.chars().take(12).collect();
    let reference = if m.worker.reference { " <span class=\"ref\">reference worker</span>" } else { "" };
    let conformance = match (&m.conformance_report, m.conformance_link(run_dir)) {
        (Some(_), Some(link)) => format!("<a href=\"{}\">conformance report</a>", esc(&link)),
        (Some(path), None) => format!("conformance report <code>{}</code>", esc(path)),
        (None, _) => "no conformance report (the gate did not run)".into(),
    };
    let passed = m.results.iter().filter(|r| r.outcome == Outcome::Pass).count();
    let interrupted = match &m.interrupted {
        Some(why) => format!(
            "<p class=\"v error\"><strong>INTERRUPTED</strong>: {}; only the rows below finished.</p>",
            esc(why)
        ),
        None => String::new(),
    };
    format!(
        "<header><h1>fenceproof run <code>{}</code></h1><p class=\"worker\">Worker under test: <code>{}</code>{reference} · sha256 <code title=\"{}\">{short}</code> · {conformance}</p><p>{} backend, {} · {passed}/{} passed · {:.1} s · <a href=\"postgres.log\">postgres.log</a> · <a href=\"matrix.json\">matrix.json</a> · <a href=\"matrix.md\">matrix.md</a></p>{interrupted}</header>",
        esc(&m.run_id),
        esc(&m.worker.path),
        esc(&m.worker.sha256),
        esc(&m.backend),
        esc(&m.server_version),
        m.results.len(),
        m.duration_ms as f64 / 1000.0
    )
}

/// One entry of "What broke": the row, the rules it broke, the evidence, the reproduce line.
fn broke_entry(r: &ExperimentResult) -> String {
    let c = r.outcome.label().to_lowercase();
    let mut s = format!(
        "<li class=\"{c}\"><div class=\"head\"><a href=\"#exp-{id}\"><b>{id}</b></a> <span class=\"v {c}\">{v}</span> {t}</div>",
        id = esc(&r.id),
        v = r.outcome.label(),
        t = esc(&r.title)
    );
    for rule in r.broken_rules() {
        let _ = write!(
            s,
            "<div class=\"broke-rule\">broke <a href=\"#rule-{id}\"><code>{id}</code></a> §{sec}: {st}</div>",
            id = esc(&rule.id),
            sec = esc(&rule.section),
            st = esc(&rule.statement)
        );
    }
    let what = match super::broken::root_check(r) {
        Some(c) => format!("<b>{}</b>: ", esc(&c.name)),
        None => "no verdict: ".into(),
    };
    let _ = write!(s, "<div class=\"evidence\">{what}{}</div>", esc(&r.evidence_sentence()));
    let grouped = super::broken::lines(r);
    if grouped.len() > 1 {
        let _ = write!(s, "<pre class=\"grouped\">{}</pre>", esc(&grouped.join("\n")));
    }
    let _ = write!(s, "<div class=\"repro\">reproduce: <code class=\"copy\">{}</code></div></li>", esc(&r.reproduce));
    s
}

/// "What broke", when anything did: one entry per FAIL row, then per ERROR row.
fn what_broke(m: &Matrix) -> String {
    let broken = m.broken_rows();
    if broken.is_empty() {
        return String::new();
    }
    format!(
        "<section id=\"what-broke\"><h2>What broke: {} of {} row(s)</h2><ol class=\"broke\">{}</ol></section>",
        broken.len(),
        m.results.len(),
        broken.iter().map(|r| broke_entry(r)).collect::<String>()
    )
}

/// The matrix table, failing rows first.
fn matrix_table(m: &Matrix) -> String {
    let mut s = String::from(
        "<table class=\"matrix\"><tr><th>experiment</th><th>verdict</th><th>time</th><th>key observations</th></tr>",
    );
    for r in m.rows_failing_first() {
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
    s
}

/// The rules the checks judge, each with its anchor.
fn rules_section(m: &Matrix) -> String {
    let mut s = String::from("<section id=\"rules\"><h2>Rules</h2><p>The spec's rules each check above judges (<code>fenceproof rules</code>).</p><ul class=\"rules\">");
    let mut rules: Vec<&RuleRef> = m.results.iter().flat_map(|r| &r.checks).flat_map(|c| &c.rules).collect();
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
    s.push_str("</ul></section>");
    s
}

/// Render the report of `m`, whose evidence lives under `run_dir`.
pub fn render(m: &Matrix, run_dir: &Path) -> String {
    let mut s = String::from("<!doctype html><html><head><meta charset=\"utf-8\"><title>fenceproof ");
    s.push_str(&esc(&m.run_id));
    s.push_str("</title><style>");
    s.push_str(CSS);
    s.push_str("</style></head><body>");
    s.push_str(&header(m, run_dir));
    s.push_str(&what_broke(m));
    s.push_str(&matrix_table(m));
    for r in m.rows_failing_first() {
        s.push_str(&section(r, run_dir));
    }
    s.push_str(&rules_section(m));
    s.push_str("</body></html>\n");
    s
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:24px;color:#222}code{background:#f3f3f3;padding:1px 4px}\
table.matrix{border-collapse:collapse;margin:12px 0}table.matrix td,table.matrix th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;font-size:13px}\
.v.pass{color:#0a0;font-weight:bold}.v.fail{color:#c00;font-weight:bold}.v.error{color:#c60;font-weight:bold}\
section{border-top:1px solid #ddd;margin-top:18px;padding-top:6px}.title{color:#555;margin:0}\
svg.timeline{background:#fafafa;border:1px solid #eee}line.lane{stroke:#ddd}text.lane{font-size:11px;fill:#333}text.axis{font-size:10px;fill:#888}\
rect.commit{fill:#1a7f37}rect.commit.failing{fill:#d00;stroke:#600;stroke-width:2}text.epoch.failing{fill:#d00;font-weight:bold}pre.grouped{font-size:12px;white-space:pre-wrap;margin:2px 0}pre.evidence{white-space:pre-wrap;font-size:12px;background:#fff5f5;padding:4px}circle.ok{fill:#2da44e}circle.rejected{fill:#cf222e}circle.command{fill:#0969da}circle.spawn{fill:#999}circle.harness{fill:#8250df}circle.network{fill:#e16f24}\
rect.pause{fill:#bbb;opacity:.6}text.kill{fill:#cf222e;font-size:14px;font-weight:bold}polygon.effect{fill:#d4a72c}text.epoch{font-size:10px;fill:#1a7f37}\
.legend{font-size:12px;color:#555}.k.commit{color:#1a7f37}.k.failing{color:#d00}.k.ok{color:#2da44e}.k.rejected{color:#cf222e}.k.command{color:#0969da}.k.pause{color:#999}.k.kill{color:#cf222e}.k.effect{color:#d4a72c}.k.network{color:#e16f24}\
header h1{margin-bottom:4px}p.worker{font-size:15px;margin:4px 0}.ref{background:#ddf4ff;border-radius:3px;padding:0 4px}\
#what-broke{border:2px solid #cf222e;border-radius:6px;background:#fff5f5;padding:4px 16px 8px;margin:12px 0}#what-broke h2{color:#cf222e;margin:8px 0}\
ol.broke>li{margin:8px 0 12px}ol.broke .head{font-size:15px}.broke-rule{font-size:13px;margin:2px 0}.broke-rule code{color:#36c}\
.evidence{font-size:13px;margin:2px 0;color:#333}.repro{font-size:13px}code.copy{user-select:all;cursor:text;background:#eee;border:1px solid #ddd}\
details.passing{font-size:13px;margin:4px 0}details.passing summary{cursor:pointer;color:#0a0}ul.checks{font-size:13px}a.rule{font-size:11px;color:#36c;margin-left:4px}ul.rules{font-size:12px}li.pass::marker{content:'✓ ';color:#0a0}li.fail{color:#c00}li.fail::marker{content:'✗ '}.files{font-size:12px;color:#555}.error{color:#c60}";

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
            worker: crate::report::WorkerUnderTest {
                path: "w".into(),
                sha256: "ab".into(),
                files: 1,
                reference: false,
                folder: None,
            },
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
            interrupted: None,
        };
        let html = render(&m, &dir);
        assert!(html.contains("<a href=\"#exp-B\">B</a></td><td class=\"v fail\">FAIL"), "the matrix row");
        assert!(!html.contains("INTERRUPTED"), "a run that ended on its own");
        let stopped = Matrix { interrupted: Some("interrupted by SIGINT at noon".into()), ..m.clone() };
        assert!(render(&stopped, &dir).contains("<strong>INTERRUPTED</strong>: interrupted by SIGINT at noon"));
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

    /// The `<title>` tooltips of the page (not the page's own title).
    fn tooltips(html: &str) -> Vec<&str> {
        html.split("<title>").skip(2).filter_map(|t| t.split("</title>").next()).collect()
    }

    #[test]
    fn a_failing_report_says_what_broke_first() {
        let dir = std::env::temp_dir().join(format!("html-broke-{}", uuid::Uuid::new_v4()));
        let (run, conf) = (dir.join("reports/run1"), dir.join("reports/conf1"));
        std::fs::create_dir_all(run.join("X-stop")).unwrap();
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(conf.join("conformance.txt"), "ok").unwrap();
        let timeline = [
            json!({"at_ms": 0.0, "wall": "2026-01-01T00:00:00Z", "actor": "harness", "action": "spawn", "target": "a", "detail": {"owner": "worker-a-1", "pid": 7, "args": ["--x"]}}),
            json!({"at_ms": 5.0, "wall": "2026-01-01T00:00:00.005Z", "actor": "harness", "action": "command", "target": "a", "detail": {"cmd": "save", "id": 3, "checkpoint": {"step": 1, "memo": "a\nb"}}}),
            json!({"at_ms": 10.0, "wall": "2026-01-01T00:00:00.010Z", "actor": "harness", "action": "sigstop", "target": "a", "detail": {"pid": 7, "state": "T"}}),
            json!({"at_ms": 20.0, "wall": "2026-01-01T00:00:00.020Z", "actor": "harness", "action": "barrier_hold", "target": "database", "detail": {"key": 2, "point": "before_commit"}}),
        ];
        let lines: String = timeline.iter().map(|v| v.to_string() + "\n").collect();
        std::fs::write(run.join("X-stop/timeline.jsonl"), lines).unwrap();
        let answer = json!({"time": "2026-01-01T00:00:00.030Z", "event": "save", "id": 3, "outcome": "lease_lost", "epoch": null, "revision": 3});
        std::fs::write(run.join("X-stop/worker-a.events.jsonl"), answer.to_string() + "\n").unwrap();
        let commit = |seq: i64, at: &str| json!({"seq": seq, "writer": "worker-a-1", "committed_at": at, "table_name": "agent_runs", "op": "UPDATE", "old_row": {}, "new_row": {"revision": seq}});
        let oracle = json!([commit(6, "2026-01-01T00:00:00.006Z"), commit(7, "2026-01-01T00:00:00.040Z")]);
        std::fs::write(run.join("X-stop/oracle.json"), oracle.to_string()).unwrap();
        let mut m = crate::report::tests::failing_matrix();
        let html = render(&m, &run);
        let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("{needle:?} missing:\n{html}"));
        // The header names the worker; the conformance report outside the reports folder is text.
        assert!(at("/tmp/broken/worker.py") < at("id=\"what-broke\""));
        at(">0123456789ab</code>");
        at("conformance report <code>/elsewhere/conformance.txt</code>");
        // What broke comes first: rule (linked to the rules section), evidence, reproduce.
        assert!(at("id=\"what-broke\"") < at("<table class=\"matrix\">"));
        assert!(at("<table class=\"matrix\">") < at("<section id=\"exp-"));
        let entry = at("<li class=\"fail\"><div class=\"head\"><a href=\"#exp-X-stop\">");
        assert!(entry < at("<li class=\"error\"><div class=\"head\"><a href=\"#exp-C\">"), "FAIL before ERROR");
        assert!(entry < at("broke <a href=\"#rule-commit.lease-owner-epoch-live\"><code>commit.lease-owner-epoch-live</code></a> §06: a protected write"));
        assert!(entry < at("<b>old owner writes nothing</b>: worker a committed #7 after the takeover</div>"));
        at("reproduce: <code class=\"copy\">fenceproof verify --only X-stop --worker-bin /tmp/broken/worker.py</code>");
        at("no verdict: the worker exited</div>");
        at("<li id=\"rule-commit.lease-owner-epoch-live\">");
        // Failing sections before passing ones; broken checks above the (folded) passing ones.
        assert!(at("id=\"exp-X-stop\"") < at("id=\"exp-C\"") && at("id=\"exp-C\"") < at("id=\"exp-A\""));
        let b = &html[at("id=\"exp-X-stop\"")..at("id=\"exp-C\"")];
        assert!(b.find("old owner writes nothing").unwrap() < b.find("<details class=\"passing").unwrap());
        assert!(b.find("<details class=\"passing").unwrap() < b.find("epochs only grow").unwrap());
        // The failed check's whole evidence is folded under its sentence.
        at("<summary><b>old owner writes nothing</b> worker a committed #7 after the takeover <a class=\"rule\"");
        at("<pre class=\"evidence\">  worker a committed #7 after the takeover\nmore</pre></details>");
        // The commit the failed check names is red on the timeline; the others are not.
        let red = &html[at("class=\"commit failing\"")..];
        assert!(
            red.starts_with("class=\"commit failing\"><title>")
                && red.contains("FAILING COMMIT: database committed #7 by worker-a-1"),
            "{red}"
        );
        assert_eq!(html.matches("class=\"commit failing\"").count(), 1, "{html}");
        at("class=\"epoch failing\">FAIL #7</text>");
        // Tooltips are sentences, never JSON.
        let tips = tooltips(&html);
        assert!(tips.len() >= 4, "{tips:?}");
        assert!(tips.iter().all(|t| !t.contains("{\"") && !t.contains("{&quot;")), "{tips:?}");
        for want in [
            "harness spawned worker a (owner=worker-a-1, pid=7)",
            "harness sent save to worker a (checkpoint=(memo=a\\nb, step=1), id=3)",
            "harness SIGSTOPped worker a (pid=7, state=T)",
            "harness barrier_hold database: key=2, point=before_commit",
            "worker a: save answered lease_lost (revision 3)",
        ] {
            assert!(tips.iter().any(|t| t.contains(want)), "{want:?} not in {tips:?}");
        }
        // A conformance report inside the run folder is a relative link; one outside it is text.
        m.conformance_report = Some(conf.join("conformance.txt").display().to_string());
        assert!(!render(&m, &run).contains("href=\"../"), "no link leaves the run folder");
        std::fs::write(run.join("conformance.txt"), "ok").unwrap();
        m.conformance_report = Some(run.join("conformance.txt").display().to_string());
        assert!(render(&m, &run).contains("<a href=\"conformance.txt\">conformance report</a>"));
        m.worker.reference = true;
        assert!(render(&m, &run).contains("reference worker"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
