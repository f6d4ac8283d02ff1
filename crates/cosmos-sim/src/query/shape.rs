//! Patch conditions parsed once per shape. A writer's condition carries the position's own
//! numbers (`FROM c WHERE c.deviceTimeMs < 1795338902500 OR ...`), so no two texts are alike;
//! their shape is: the text with each number literal lifted out as a parameter (`@0`, `@1`,
//! ...). The shape is parsed once and kept; each condition is then evaluated with its numbers
//! as the parameters' values.
//!
//! A number after a `-` stays in the shape (the parser folds `-5` into one literal), and a
//! shape that does not parse (a number where the grammar wants one, as an index `[0]`) is
//! remembered as such: those conditions, and any with a parameter of its own, are parsed whole
//! each time, as before.

use super::ast::Condition;
use super::lex::SyntaxError;
use super::parse::parse_condition;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde_json::{Number, Value};
use std::sync::{Arc, LazyLock};

/// Distinct shapes kept at the most; when full, the cache starts over.
const MAX_SHAPES: usize = 256;

/// A condition with more number literals than this is parsed whole.
const MAX_SLOTS: usize = 8;

/// The parameter names the lifted numbers take, in order.
const SLOTS: [&str; MAX_SLOTS] = ["@0", "@1", "@2", "@3", "@4", "@5", "@6", "@7"];

/// A condition ready to evaluate: its syntax tree and the parameters it reads.
#[derive(Debug)]
pub struct Prepared {
    /// The parsed condition (of the shape, or of the text itself).
    pub condition: Arc<Condition>,
    /// The lifted numbers, as `@0`, `@1`, ...
    pub params: Vec<(String, Value)>,
}

/// Parses `src` as a patch condition through the process's cache of shapes (a shape's syntax
/// tree depends on its text alone, so every container shares it).
pub fn prepare(src: &str) -> Result<Prepared, SyntaxError> {
    static SHAPES: LazyLock<ConditionCache> = LazyLock::new(ConditionCache::default);
    SHAPES.prepare(src)
}

/// The parsed shapes of the conditions seen, `None` for a shape that does not parse.
#[derive(Debug, Default)]
pub struct ConditionCache {
    shapes: Mutex<FxHashMap<String, Option<Arc<Condition>>>>,
}

impl ConditionCache {
    /// Parses `src` as a patch condition, through its shape when it has one.
    pub fn prepare(&self, src: &str) -> Result<Prepared, SyntaxError> {
        let whole = || {
            Ok(Prepared {
                condition: Arc::new(parse_condition(src)?),
                params: Vec::new(),
            })
        };
        let Some((shape, numbers)) = shape(src) else {
            return whole();
        };
        let cached = self.shapes.lock().get(&shape).cloned();
        let parsed = match cached {
            Some(parsed) => parsed,
            None => {
                let parsed = parse_condition(&shape).ok().map(Arc::new);
                let mut shapes = self.shapes.lock();
                if shapes.len() >= MAX_SHAPES {
                    shapes.clear();
                }
                shapes.insert(shape, parsed.clone());
                parsed
            }
        };
        let Some(condition) = parsed else {
            return whole();
        };
        Ok(Prepared {
            condition,
            params: SLOTS
                .iter()
                .zip(numbers)
                .map(|(name, n)| ((*name).to_owned(), Value::Number(n)))
                .collect(),
        })
    }
}

/// The shape of a condition and the numbers lifted out of it, scanning as the lexer does
/// ([`super::lex::lex`]); `None` if the text has a parameter of its own, a number the lexer
/// would refuse or one followed by a name, an unterminated string, or more than [`MAX_SLOTS`]
/// numbers to lift.
fn shape(src: &str) -> Option<(String, Vec<Number>)> {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut numbers = Vec::new();
    let (mut i, mut copied) = (0, 0);
    // The last byte before `i` that is not whitespace.
    let mut last = 0u8;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
        } else if c == b'@' {
            return None;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len()
                && (b[i].is_ascii_digit()
                    || matches!(b[i], b'.' | b'e' | b'E')
                    || (matches!(b[i], b'-' | b'+') && matches!(b[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            // `1abc` lexes as a number and a name; `@0abc` would be one parameter.
            if b.get(i)
                .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
            {
                return None;
            }
            if last != b'-' {
                let n = serde_json::from_str::<Number>(&src[start..i]).ok()?;
                if numbers.len() == MAX_SLOTS {
                    return None;
                }
                out.push_str(&src[copied..start]);
                out.push_str(SLOTS[numbers.len()]);
                copied = i;
                numbers.push(n);
            }
        } else if c == b'\'' || c == b'"' {
            i += 1;
            loop {
                match b.get(i)? {
                    b'\\' => i += 2,
                    &q if q == c => break,
                    _ => i += 1,
                }
            }
            i += 1;
        } else {
            i += 1;
        }
        if !b[i - 1].is_ascii_whitespace() {
            last = b[i - 1];
        }
    }
    out.push_str(&src[copied..]);
    Some((out, numbers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::eval::{Scope, holds};
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn lifts_the_numbers_of_a_writers_condition() {
        let (shape, numbers) =
            shape("FROM c WHERE c.t < 1795338902500 OR (c.t = 1795338902500 AND c.seq < 9)")
                .unwrap();
        assert_eq!(shape, "FROM c WHERE c.t < @0 OR (c.t = @1 AND c.seq < @2)");
        assert_eq!(
            numbers,
            [1795338902500u64.into(), 1795338902500u64.into(), 9.into()]
        );
    }

    #[test]
    fn keeps_what_is_not_a_lone_number() {
        for (src, want) in [
            (
                "FROM c WHERE c.x1 = 'a 5' AND c.y = -5",
                "FROM c WHERE c.x1 = 'a 5' AND c.y = -5",
            ),
            ("FROM c WHERE c.a[0] = 2.5e3", "FROM c WHERE c.a[@0] = @1"),
            (
                "FROM c WHERE c.s = \"q\\\"7\" OR c.n - 1 > 0",
                "FROM c WHERE c.s = \"q\\\"7\" OR c.n - 1 > @0",
            ),
        ] {
            assert_eq!(shape(src).unwrap().0, want, "{src}");
        }
        assert!(shape("FROM c WHERE c.a = @mine").is_none());
        assert!(shape("FROM c WHERE c.a = 1abc").is_none());
        assert!(shape("FROM c WHERE c.s = 'open").is_none());
        assert!(shape("FROM c WHERE c.a IN (1,2,3,4,5,6,7,8,9)").is_none());
    }

    #[test]
    fn a_shape_is_parsed_once_and_an_index_falls_back_to_the_text() {
        let cache = ConditionCache::default();
        let a = cache.prepare("FROM c WHERE c.t < 5 AND c.s = 1").unwrap();
        let b = cache.prepare("FROM c WHERE c.t < 6 AND c.s = 2").unwrap();
        assert!(Arc::ptr_eq(&a.condition, &b.condition));
        assert_eq!(
            b.params,
            [("@0".to_owned(), json!(6)), ("@1".to_owned(), json!(2))]
        );
        let indexed = cache.prepare("FROM c WHERE c.a[1] = 3").unwrap();
        assert!(indexed.params.is_empty());
        let doc = json!({"a": [0, 3]});
        let scope = Scope {
            alias: &indexed.condition.alias,
            doc: &doc,
            params: &[],
        };
        assert!(holds(&indexed.condition.filter, &scope));
        assert!(cache.prepare("FROM c WHERE c.t < 5 AND").is_err());
    }

    fn verdict(cond: &Prepared, doc: &Value) -> bool {
        let scope = Scope {
            alias: &cond.condition.alias,
            doc,
            params: &cond.params,
        };
        holds(&cond.condition.filter, &scope)
    }

    proptest! {
        /// Through its shape a condition holds for exactly the documents it holds for when
        /// parsed whole.
        #[test]
        fn the_shape_decides_as_the_text(
            t in -3i64..3_000_000_000_000,
            seq in 0u64..1_000,
            neg in 0u32..100,
            frac in 0.0f64..1e6,
            doc_t in -3i64..3_000_000_000_000,
            doc_seq in 0u64..1_000,
            doc_f in 0.0f64..1e6,
        ) {
            let src = format!(
                "FROM c WHERE c.t < {t} OR (c.t = {t} AND c.seq < {seq}) OR c.f >= {frac} OR c.n = -{neg}"
            );
            let cache = ConditionCache::default();
            cache.prepare("FROM c WHERE c.t < 1 OR (c.t = 1 AND c.seq < 1) OR c.f >= 1.5 OR c.n = -1").unwrap();
            let cached = cache.prepare(&src).unwrap();
            let whole = Prepared { condition: Arc::new(parse_condition(&src).unwrap()), params: Vec::new() };
            for doc in [
                json!({"t": doc_t, "seq": doc_seq, "f": doc_f, "n": -i64::from(neg)}),
                json!({"t": t, "seq": doc_seq, "f": doc_f, "n": 0}),
                json!({"t": "text", "seq": seq}),
            ] {
                prop_assert_eq!(verdict(&cached, &doc), verdict(&whole, &doc), "{} on {}", src, doc);
            }
        }
    }
}
