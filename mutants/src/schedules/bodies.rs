//! The data schedules write: checkpoints and tool requests of several shapes, so that a worker
//! that rounds a number, mangles an escape or re-encodes text changes what it stores (and the
//! history check sees it), and a dispatcher that alters a request changes its digest.

use serde_json::{json, Value};

use super::ops::Body;

/// A JSON value of shape `body`, distinct per `n`.
pub fn value(body: Body, n: u32) -> Value {
    match body {
        Body::Plain => json!({ "n": n }),
        Body::Numbers => json!({
            "n": n,
            "half": n as f64 + 0.5,
            "tiny": 2.5e-8,
            "huge": 1.0e300,
            "negative": -0.125,
            "max_safe": 9_007_199_254_740_991_i64,
            "min": i64::MIN,
        }),
        Body::Escapes => json!({
            "n": n,
            "s": "quote \" backslash \\ slash / tab \t newline \n return \r bell \u{7} escape \u{1b}",
            "key \"with\" quotes": "'single' and `back`",
            "sql": "'); DROP TABLE agent_runs; --",
        }),
        Body::Unicode => json!({
            "n": n,
            "s": "Grüße, 東京, עברית, ε\u{301}, 👩\u{200d}💻, \u{feff}bom",
            "😀": "emoji key",
        }),
        Body::Nested => json!({
            "n": n,
            "a": [1, [2, [3, {"b": null, "": true, "c": []}]]],
            "o": {"p": {"q": {"r": [{}, {"s": false}]}}},
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_survives_a_json_round_trip() {
        for b in [Body::Plain, Body::Numbers, Body::Escapes, Body::Unicode, Body::Nested] {
            let v = value(b, 3);
            let back: Value = serde_json::from_str(&v.to_string()).unwrap();
            assert_eq!(v, back, "{b:?}");
            assert_ne!(value(b, 3), value(b, 4));
        }
    }
}
