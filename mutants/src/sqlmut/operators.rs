//! The mutation operators, applied to one function body. Each finds its sites lexically (see
//! [`super::scan`]) and returns one mutant per site: a set of byte edits of the body.

use serde::{Deserialize, Serialize};

use super::scan::Scan;

/// A standard mutation operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Operator {
    /// Drop one conjunct of a WHERE condition, or one disjunct of an IF guard's rejection (or one
    /// conjunct of an IF's acceptance).
    DropConjunct,
    /// Drop a FOR UPDATE / FOR SHARE clause.
    DropLock,
    /// Drop SKIP LOCKED from a locking clause.
    DropSkipLocked,
    /// clock_timestamp() in a comparison becomes now().
    ClockNow,
    /// clock_timestamp() in a comparison becomes statement_timestamp().
    ClockStatement,
    /// < and <=, > and >= swapped.
    FlipComparison,
    /// A JOIN dropped together with the filters on its table.
    DropJoin,
    /// `epoch + 1` / `revision + 1` loses its `+ 1`.
    DropIncrement,
    /// An IF / ELSIF guard whose branch returns early never fires.
    DropGuard,
}

impl Operator {
    pub const ALL: &'static [Operator] = &[
        Operator::DropConjunct,
        Operator::DropLock,
        Operator::DropSkipLocked,
        Operator::ClockNow,
        Operator::ClockStatement,
        Operator::FlipComparison,
        Operator::DropJoin,
        Operator::DropIncrement,
        Operator::DropGuard,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operator::DropConjunct => "drop-conjunct",
            Operator::DropLock => "drop-lock",
            Operator::DropSkipLocked => "drop-skip-locked",
            Operator::ClockNow => "clock-now",
            Operator::ClockStatement => "clock-statement",
            Operator::FlipComparison => "flip-comparison",
            Operator::DropJoin => "drop-join",
            Operator::DropIncrement => "drop-increment",
            Operator::DropGuard => "drop-guard",
        }
    }
}

/// One replacement of `start..end` of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub start: usize,
    pub end: usize,
    pub with: String,
}

/// The body with `edits` applied (they must not overlap).
pub fn apply(body: &str, edits: &[Edit]) -> String {
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| std::cmp::Reverse(e.start));
    let mut out = body.to_string();
    for e in sorted {
        out.replace_range(e.start..e.end, &e.with);
    }
    out
}

/// Every mutant `op` yields on `body`, as edit sets, in body order.
pub fn sites(op: Operator, body: &str) -> Vec<Vec<Edit>> {
    sites_focused(op, body).into_iter().map(|(_, e)| e).collect()
}

/// As [`sites`], each with the body offset of what it changes (the dropped part itself, where
/// an edit starts earlier to take a separator with it).
pub fn sites_focused(op: Operator, body: &str) -> Vec<(usize, Vec<Edit>)> {
    let s = Scan::new(body);
    match op {
        Operator::DropConjunct => return drop_conjuncts(&s),
        Operator::DropLock => locks(&s, false),
        Operator::DropSkipLocked => locks(&s, true),
        Operator::ClockNow => clocks(&s, "now()"),
        Operator::ClockStatement => clocks(&s, "statement_timestamp()"),
        Operator::FlipComparison => flips(&s),
        Operator::DropJoin => joins(&s),
        Operator::DropIncrement => increments(&s),
        Operator::DropGuard => guards(&s),
    }
    .into_iter()
    .map(|e| (e.iter().map(|x| x.start).min().unwrap_or(0), e))
    .collect()
}

const WHERE_ENDS: &[&str] = &["RETURNING", "ORDER", "FOR", "LIMIT", "GROUP", "INTO"];

/// The condition of each WHERE: from after the keyword to the first clause keyword, `;` or closing
/// parenthesis at its depth.
fn where_regions(s: &Scan) -> Vec<(usize, usize)> {
    let b = s.text.as_bytes();
    s.words("WHERE")
        .into_iter()
        .map(|w| {
            let start = w + "WHERE".len();
            let d0 = s.depth[w];
            let mut i = start;
            while i < b.len() {
                if s.code[i] {
                    if (b[i] == b')' && s.depth[i] < d0) || (b[i] == b';' && s.depth[i] == d0) {
                        break;
                    }
                    if s.depth[i] == d0 && starts_word(s, i) {
                        break;
                    }
                }
                i += 1;
            }
            (start, i)
        })
        .collect()
}

/// Whether a clause keyword that ends a WHERE starts as a whole word at `i`.
fn starts_word(s: &Scan, i: usize) -> bool {
    let b = s.text.as_bytes();
    (i == 0 || b[i - 1].is_ascii_whitespace())
        && WHERE_ENDS.iter().any(|k| {
            s.text[i..].starts_with(k) && b.get(i + k.len()).is_none_or(|c| !c.is_ascii_alphanumeric() && *c != b'_')
        })
}

/// Each IF / ELSIF condition: (keyword start, condition start, condition end = THEN).
fn if_conditions(s: &Scan) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let thens = s.words("THEN");
    let mut kws: Vec<(usize, usize)> = s.words("ELSIF").into_iter().map(|i| (i, i + 5)).collect();
    for i in s.words("IF") {
        if !s.text[..i].trim_end().ends_with("END") {
            kws.push((i, i + 2));
        }
    }
    kws.sort();
    for (k, c) in kws {
        if let Some(&t) = thens.iter().find(|&&t| t > c) {
            let (a, b) = s.trim(c, t);
            out.push((k, a, b));
        }
    }
    out
}

/// The removal of part `i` of `parts` (with its separator) from a list joined by `sep`.
fn drop_part(s: &Scan, parts: &[(usize, usize)], i: usize) -> Edit {
    if i == 0 {
        Edit { start: parts[0].0, end: parts[1].0, with: String::new() }
    } else {
        // From the end of the previous part (keeping its text) to the end of this one.
        let _ = s;
        Edit { start: parts[i - 1].1, end: parts[i].1, with: String::new() }
    }
}

fn drop_conjuncts(s: &Scan) -> Vec<(usize, Vec<Edit>)> {
    let mut out = Vec::new();
    let mut regions: Vec<(usize, usize, &str)> = where_regions(s).into_iter().map(|(a, b)| (a, b, "AND")).collect();
    for (_, a, b) in if_conditions(s) {
        let sep = if s.split_top(a, b, "OR").len() > 1 { "OR" } else { "AND" };
        regions.push((a, b, sep));
    }
    regions.sort();
    for (a, b, sep) in regions {
        let (a, b) = s.trim(a, b);
        let parts = s.split_top(a, b, sep);
        if parts.len() < 2 {
            continue;
        }
        for i in 0..parts.len() {
            out.push((parts[i].0, vec![drop_part(s, &parts, i)]));
        }
    }
    out
}

fn locks(s: &Scan, skip_only: bool) -> Vec<Vec<Edit>> {
    let b = s.text.as_bytes();
    let mut out = Vec::new();
    for f in s.words("FOR") {
        let rest = &s.text[f..];
        let Some(kind) = ["FOR UPDATE", "FOR SHARE"].into_iter().find(|k| rest.starts_with(k)) else { continue };
        let mut end = f + kind.len();
        if s.text[end..].starts_with(" OF ") {
            end += 4;
            while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                end += 1;
            }
        }
        let skip = s.text[end..].starts_with(" SKIP LOCKED");
        if skip_only {
            if skip {
                out.push(vec![Edit { start: end, end: end + " SKIP LOCKED".len(), with: String::new() }]);
            }
            continue;
        }
        if skip {
            end += " SKIP LOCKED".len();
        }
        let mut start = f;
        while start > 0 && b[start - 1] == b' ' {
            start -= 1;
        }
        // A clause alone on its line leaves the line blank rather than joining two lines.
        out.push(vec![Edit { start, end, with: String::new() }]);
    }
    out
}

fn clocks(s: &Scan, with: &str) -> Vec<Vec<Edit>> {
    let call = "clock_timestamp()";
    let cmp = |t: &str| t.ends_with('<') || t.ends_with('>') || t.ends_with("<=") || t.ends_with(">=");
    s.finds(call)
        .into_iter()
        .filter(|&i| {
            let before = s.text[..i].trim_end();
            let after = s.text[i + call.len()..].trim_start();
            cmp(before) || after.starts_with('<') || after.starts_with('>')
        })
        .map(|i| vec![Edit { start: i, end: i + call.len(), with: with.to_string() }])
        .collect()
}

fn flips(s: &Scan) -> Vec<Vec<Edit>> {
    let b = s.text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if !s.code[i] || (c != b'<' && c != b'>') {
            i += 1;
            continue;
        }
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        let next = b.get(i + 1).copied().unwrap_or(b' ');
        // Not <>, ->, ->>, =>, <<, >>.
        if (c == b'<' && next == b'>') || prev == b'-' || prev == b'=' || prev == b'<' || next == c {
            i += 2;
            continue;
        }
        if c == b'>' && prev == b'<' {
            i += 1;
            continue;
        }
        if next == b'=' {
            out.push(vec![Edit { start: i, end: i + 2, with: (c as char).to_string() }]);
            i += 2;
        } else {
            out.push(vec![Edit { start: i, end: i + 1, with: format!("{}=", c as char) }]);
            i += 1;
        }
    }
    out
}

fn joins(s: &Scan) -> Vec<Vec<Edit>> {
    let b = s.text.as_bytes();
    let mut out = Vec::new();
    let wheres = where_regions(s);
    for j in s.words("JOIN") {
        // JOIN <table> <alias> ON <cond>, ended by the next WHERE at the same depth.
        let words: Vec<&str> = s.text[j..].split_whitespace().take(4).collect();
        if words.len() < 4 || words[3] != "ON" {
            continue;
        }
        let alias = format!("{}.", words[2]);
        let Some(&(wa, wb)) = wheres.iter().find(|(a, _)| *a > j) else { continue };
        let where_kw = wa - "WHERE".len();
        let mut start = j;
        while start > 0 && b[start - 1].is_ascii_whitespace() {
            start -= 1;
        }
        let mut edits = vec![Edit { start, end: s.trim(j, where_kw).1, with: String::new() }];
        let (ta, tb) = s.trim(wa, wb);
        let parts = s.split_top(ta, tb, "AND");
        let mentions: Vec<usize> =
            (0..parts.len()).filter(|&i| s.text[parts[i].0..parts[i].1].contains(&alias)).collect();
        if mentions.len() == parts.len() || mentions.is_empty() {
            out.push(edits);
            continue;
        }
        for &i in mentions.iter().rev() {
            edits.push(drop_part(s, &parts, i));
        }
        out.push(edits);
    }
    out
}

fn increments(s: &Scan) -> Vec<Vec<Edit>> {
    s.finds(" + 1")
        .into_iter()
        .filter(|&i| {
            let before = &s.text[..i];
            (before.ends_with("epoch") || before.ends_with("revision"))
                && !s.text[i + 4..].starts_with(|c: char| c.is_ascii_digit())
        })
        .map(|i| vec![Edit { start: i, end: i + 4, with: String::new() }])
        .collect()
}

fn guards(s: &Scan) -> Vec<Vec<Edit>> {
    // Nesting-aware branch ends: the first ELSIF / ELSE / END IF at the same IF level.
    let mut marks: Vec<(usize, &str)> = Vec::new();
    for i in s.words("IF") {
        if s.text[..i].trim_end().ends_with("END") {
            marks.push((i, "END IF"));
        } else {
            marks.push((i, "IF"));
        }
    }
    marks.extend(s.words("ELSIF").into_iter().map(|i| (i, "ELSIF")));
    marks.extend(s.words("ELSE").into_iter().map(|i| (i, "ELSE")));
    marks.sort();
    let mut out = Vec::new();
    for (k, a, b) in if_conditions(s) {
        let mut level = 0;
        let mut end = s.text.len();
        for &(i, m) in marks.iter().filter(|(i, _)| *i > b) {
            match (m, level) {
                ("IF", _) => level += 1,
                ("END IF", 0) | ("ELSIF", 0) | ("ELSE", 0) => {
                    end = i;
                    break;
                }
                ("END IF", _) => level -= 1,
                _ => {}
            }
        }
        let _ = k;
        if s.words("RETURN").iter().any(|&r| r > b && r < end) {
            out.push(vec![Edit { start: a, end: b, with: "false".into() }]);
        }
    }
    out
}
