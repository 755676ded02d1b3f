//! A small lexical view of PL/pgSQL text: which bytes are code (not inside a string literal or a
//! comment), the parenthesis depth at each byte, and whole-word keyword search. Enough to find
//! conditions and clauses without a full SQL parser.

/// Per byte of `text`: whether it is code, and its parenthesis depth.
pub struct Scan<'a> {
    pub text: &'a str,
    pub code: Vec<bool>,
    pub depth: Vec<i32>,
}

impl<'a> Scan<'a> {
    pub fn new(text: &'a str) -> Scan<'a> {
        let b = text.as_bytes();
        let mut code = vec![true; b.len()];
        let mut depth = vec![0; b.len()];
        let (mut i, mut d) = (0, 0i32);
        while i < b.len() {
            if b[i] == b'\'' {
                let start = i;
                i += 1;
                while i < b.len() && !(b[i] == b'\'' && b.get(i + 1) != Some(&b'\'')) {
                    i += if b[i] == b'\'' { 2 } else { 1 };
                }
                for k in start..=i.min(b.len() - 1) {
                    code[k] = false;
                    depth[k] = d;
                }
                i += 1;
                continue;
            }
            if b[i] == b'-' && b.get(i + 1) == Some(&b'-') {
                while i < b.len() && b[i] != b'\n' {
                    code[i] = false;
                    depth[i] = d;
                    i += 1;
                }
                continue;
            }
            if b[i] == b'(' {
                depth[i] = d;
                d += 1;
            } else if b[i] == b')' {
                d -= 1;
                depth[i] = d;
            } else {
                depth[i] = d;
            }
            i += 1;
        }
        Scan { text, code, depth }
    }

    /// Byte offsets where the whole word `word` (case-sensitive) starts in code.
    pub fn words(&self, word: &str) -> Vec<usize> {
        let b = self.text.as_bytes();
        let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
        self.text
            .match_indices(word)
            .map(|(i, _)| i)
            .filter(|&i| self.code[i])
            .filter(|&i| i == 0 || !is_ident(b[i - 1]))
            .filter(|&i| b.get(i + word.len()).is_none_or(|&c| !is_ident(c)))
            .collect()
    }

    /// Byte offsets in code of the exact text `s`.
    pub fn finds(&self, s: &str) -> Vec<usize> {
        self.text.match_indices(s).map(|(i, _)| i).filter(|&i| self.code[i]).collect()
    }

    /// Split `start..end` at the whole word `sep` where it stands at the depth of `start`; returns
    /// the parts as (start, end) ranges, trimmed of whitespace.
    pub fn split_top(&self, start: usize, end: usize, sep: &str) -> Vec<(usize, usize)> {
        let d0 = self.depth.get(start).copied().unwrap_or(0);
        let mut cuts = vec![start];
        for i in self.words(sep) {
            if i > start && i < end && self.depth[i] == d0 {
                cuts.push(i);
            }
        }
        let mut parts = Vec::new();
        for (n, &c) in cuts.iter().enumerate() {
            let from = if n == 0 { c } else { c + sep.len() };
            let to = cuts.get(n + 1).copied().unwrap_or(end);
            let (s, e) = self.trim(from, to);
            parts.push((s, e));
        }
        parts
    }

    /// `start..end` without leading and trailing whitespace.
    pub fn trim(&self, mut start: usize, mut end: usize) -> (usize, usize) {
        let b = self.text.as_bytes();
        while start < end && b[start].is_ascii_whitespace() {
            start += 1;
        }
        while end > start && b[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        (start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_comments_are_not_code_and_depth_follows_parentheses() {
        let s = Scan::new("a AND (b OR 'x AND y') -- AND z\nAND c");
        assert_eq!(s.words("AND"), vec![2, 32]);
        assert_eq!(s.depth[s.text.find('b').unwrap()], 1);
        let parts = s.split_top(0, s.text.len(), "AND");
        let texts: Vec<&str> = parts.iter().map(|&(a, b)| &s.text[a..b]).collect();
        assert_eq!(texts, vec!["a", "(b OR 'x AND y') -- AND z", "c"]);
    }
}
