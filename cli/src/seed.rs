//! `--seed`: decimal or 0x-hex, random when absent (and printed either way by the callers).

/// `s` as a seed (decimal or 0x-hex).
pub fn parse(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("bad --seed '{s}' (decimal or 0x-hex)"))
}

/// The seed given (decimal or 0x-hex), else a random one; a bad one is a usage error.
pub fn or_random(seed: Option<&str>) -> Result<u64, u8> {
    match seed.map(parse) {
        None => Ok(random()),
        Some(Ok(s)) => Ok(s),
        Some(Err(msg)) => Err(crate::fail::usage(msg)),
    }
}

fn random() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_and_hex_seeds_parse_and_junk_is_named() {
        assert_eq!(super::parse("42"), Ok(42));
        assert_eq!(super::parse("0x2a"), Ok(42));
        assert!(super::parse("0xzz").unwrap_err().contains("'0xzz'"));
        assert!(super::parse("-1").is_err());
    }
}
