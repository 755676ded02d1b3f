//! Evidence as data: a violation a checker found carries the commits it cites as numbers
//! ([`Found`]), so the report groups root causes from them and never from wording; and values are
//! rendered as a person reads them (`succeeded`, `none`), never as Rust's `Some("succeeded")`
//! ([`Shown`]); prose from outside the harness that still has such wrappers is [`unwrapped`] where
//! it becomes a check's evidence.

use std::fmt::Display;

use serde_json::Value;

/// One violation a checker found: the oracle commits it cites (sequence numbers), its sentence,
/// and, for a checker that judges several rules, the rule ids this violation breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub commits: Vec<i64>,
    pub text: String,
    pub rules: Vec<&'static str>,
}

impl Found {
    /// A violation at one commit.
    pub fn at(commit: i64, text: impl Into<String>) -> Found {
        Found { commits: vec![commit], text: text.into(), rules: Vec::new() }
    }

    /// A violation citing several commits (in the order the sentence names them).
    pub fn of(commits: impl IntoIterator<Item = i64>, text: impl Into<String>) -> Found {
        Found { commits: commits.into_iter().collect(), text: text.into(), rules: Vec::new() }
    }

    /// A violation that cites no commit (a transaction, an answer, a final state).
    pub fn text(text: impl Into<String>) -> Found {
        Found { commits: Vec::new(), text: text.into(), rules: Vec::new() }
    }

    /// This violation breaks rule `id` (of the catalogue) among those its checker judges.
    pub fn breaks(mut self, id: &'static str) -> Found {
        self.rules.push(id);
        self
    }
}

/// `commits` each once, in their first order.
pub fn distinct(commits: impl IntoIterator<Item = i64>) -> Vec<i64> {
    let mut out: Vec<i64> = Vec::new();
    for c in commits {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// A value as a person reads it: a string without quotes, a number as its digits, an absent
/// value (`None`, JSON `null`) as `none`, a pair as `(a, b)`, a list as `[a, b]`.
pub trait Shown {
    fn shown(&self) -> String;
}

macro_rules! shown_by_display {
    ($($t:ty),*) => {$(
        impl Shown for $t {
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

shown_by_display!(i32, i64, u32, u64, usize, bool, char, f64, str, String, uuid::Uuid, nix::unistd::Pid);

impl<T: Shown + ?Sized> Shown for &T {
    fn shown(&self) -> String {
        (**self).shown()
    }
}

impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> String {
        self.as_ref().map_or_else(|| "none".to_string(), Shown::shown)
    }
}

impl Shown for Value {
    fn shown(&self) -> String {
        shown_json(Some(self))
    }
}

impl<A: Shown, B: Shown> Shown for (A, B) {
    fn shown(&self) -> String {
        format!("({}, {})", self.0.shown(), self.1.shown())
    }
}

impl<T: Shown> Shown for [T] {
    fn shown(&self) -> String {
        format!("[{}]", self.iter().map(Shown::shown).collect::<Vec<_>>().join(", "))
    }
}

impl<T: Shown> Shown for Vec<T> {
    fn shown(&self) -> String {
        self.as_slice().shown()
    }
}

/// `v` as a person reads it ([`Shown`]).
pub fn shown<T: Shown>(v: T) -> String {
    v.shown()
}

/// A JSON value as a person reads it: a string without its quotes, `null` (or an absent field) as
/// `none`, anything else as its JSON.
pub fn shown_json(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "none".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// How a process ended, as a person reads it: `exit code 1`, `killed by a signal` (no code), or
/// why it was not seen to exit.
pub fn exited<E: Display>(code: &Result<Option<i32>, E>) -> String {
    match code {
        Ok(Some(c)) => format!("exit code {c}"),
        Ok(None) => "killed by a signal".to_string(),
        Err(e) => format!("not seen to exit: {e}"),
    }
}

/// Numbers as a person reads a list of them: `4, 5, 6` (`none` when empty).
pub fn listed<T: Display>(items: impl IntoIterator<Item = T>) -> String {
    let all: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    if all.is_empty() {
        "none".to_string()
    } else {
        all.join(", ")
    }
}

/// The length of the text before the `close` that balances an already opened `open` (quotes
/// respected), if it closes.
pub fn balanced(text: &str, open: char, close: char) -> Option<usize> {
    let (mut depth, mut quoted, mut escaped) = (1, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == open && !quoted => depth += 1,
            c if c == close && !quoted => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` with Rust's debug wrappers of a value (`Some(..)`, `String(..)`, `Number(..)`,
/// `Bool(..)`, at a word start) replaced by what they wrap. Only for prose built outside the
/// harness that still prints values with `{:?}` (the model's trace findings, `model/src/trace`),
/// where it becomes a check's evidence; the harness's checks render values with [`Shown`].
pub fn unwrapped(text: &str) -> String {
    ["Some(", "String(", "Number(", "Bool("].iter().fold(text.to_string(), |s, w| unwrap_calls(&s, w))
}

/// `text` with every `wrapper…)` (at a word start) replaced by what is inside the parentheses.
fn unwrap_calls(text: &str, wrapper: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(wrapper) {
        let word_start = rest[..at].chars().last().is_none_or(|c| !c.is_alphanumeric() && c != '_');
        let inner_from = at + wrapper.len();
        match balanced(&rest[inner_from..], '(', ')').filter(|_| word_start) {
            Some(len) => {
                out.push_str(&rest[..at]);
                out.push_str(&unwrap_calls(&rest[inner_from..inner_from + len], wrapper));
                rest = &rest[inner_from + len + 1..];
            }
            None => {
                out.push_str(&rest[..inner_from]);
                rest = &rest[inner_from..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_read_as_values() {
        assert_eq!(shown(Some("succeeded")), "succeeded");
        assert_eq!(shown(None::<i64>), "none");
        assert_eq!(shown(Some(4)), "4");
        assert_eq!(shown_json(Some(&json!("worker-b"))), "worker-b");
        assert_eq!(shown_json(Some(&json!(null))), "none");
        assert_eq!(shown_json(None), "none");
        assert_eq!(shown_json(Some(&json!({"step": 3}))), r#"{"step":3}"#);
        assert_eq!(shown((Some("succeeded"), Some(4))), "(succeeded, 4)");
        assert_eq!(shown(vec!["conflict".to_string(), "ok".to_string()]), "[conflict, ok]");
        assert_eq!(shown(Some(json!("write_rejected"))), "write_rejected");
        assert_eq!(listed([4, 5]), "4, 5");
        assert_eq!(exited::<String>(&Ok(Some(1))), "exit code 1");
        assert_eq!(exited::<String>(&Ok(None)), "killed by a signal");
        assert_eq!(listed(Vec::<i64>::new()), "none");
    }

    #[test]
    fn debug_wrappers_from_outside_the_harness_are_unwrapped() {
        let ev = r#"commit #9 by a at revision Some(4) while the lease was Some("worker-b")/epoch Some(2)"#;
        assert_eq!(unwrapped(ev), r#"commit #9 by a at revision 4 while the lease was "worker-b"/epoch 2"#);
        let ev = r#"after (String("b"), Number(2), Object {"by": String("a (stale)"), "step": Number(3)})"#;
        assert_eq!(unwrapped(ev), r#"after ("b", 2, Object {"by": "a (stale)", "step": 3})"#);
        assert_eq!(unwrapped("HasSome(3) stays"), "HasSome(3) stays");
    }

    #[test]
    fn distinct_keeps_the_first_order() {
        assert_eq!(distinct([9, 7, 9, 8, 7]), vec![9, 7, 8]);
    }
}
