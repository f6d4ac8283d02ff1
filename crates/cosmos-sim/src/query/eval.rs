//! Evaluating expressions against a document, with the service's three-valued logic: an
//! expression may be *undefined* (a missing property, a comparison of different types), and a
//! filter keeps a document only when its predicate is `true`.

use super::ast::{BinOp, Expr, PathSeg};
use super::geo;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::cmp::Ordering;

/// Named parameters of a query (`@name` with its `@`).
pub type Params = [(String, Value)];

/// Evaluation context: the alias the document is bound to, the document, the parameters.
pub struct Scope<'a> {
    /// The `FROM` alias.
    pub alias: &'a str,
    /// The document.
    pub doc: &'a Value,
    /// The parameters.
    pub params: &'a Params,
}

/// Evaluates an expression; `None` is undefined.
pub fn eval<'a>(e: &'a Expr, s: &Scope<'a>) -> Option<Cow<'a, Value>> {
    match e {
        Expr::Lit(v) => Some(Cow::Borrowed(v)),
        Expr::Param(name) => s
            .params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| Cow::Borrowed(v)),
        Expr::Path(root, segs) => {
            if root != s.alias {
                return None;
            }
            let mut v = s.doc;
            for seg in segs {
                v = match seg {
                    PathSeg::Field(f) => v.get(f.as_str())?,
                    PathSeg::Index(i) => v.get(*i)?,
                };
            }
            Some(Cow::Borrowed(v))
        }
        Expr::Not(inner) => match eval(inner, s)?.as_ref() {
            Value::Bool(b) => Some(Cow::Owned(Value::Bool(!b))),
            _ => None,
        },
        Expr::Neg(inner) => {
            let n = eval(inner, s)?.as_f64()?;
            Some(Cow::Owned(number(-n)))
        }
        Expr::Binary(op, a, b) => binary(*op, a, b, s),
        Expr::In(needle, items) => {
            let needle = eval(needle, s)?;
            let hit = items
                .iter()
                .filter_map(|i| eval(i, s))
                .any(|v| compare(&needle, &v) == Some(Ordering::Equal));
            Some(Cow::Owned(Value::Bool(hit)))
        }
        Expr::Call(name, args) => call(name, args, s).map(Cow::Owned),
        Expr::Object(fields) => {
            let mut map = Map::new();
            for (k, e) in fields {
                if let Some(v) = eval(e, s) {
                    map.insert(k.clone(), v.into_owned());
                }
            }
            Some(Cow::Owned(Value::Object(map)))
        }
        Expr::Array(items) => Some(Cow::Owned(Value::Array(
            items
                .iter()
                .filter_map(|i| eval(i, s).map(Cow::into_owned))
                .collect(),
        ))),
    }
}

/// Whether a predicate holds (is exactly `true`).
pub fn holds(e: &Expr, s: &Scope<'_>) -> bool {
    matches!(eval(e, s).as_deref(), Some(Value::Bool(true)))
}

fn binary<'a>(op: BinOp, a: &'a Expr, b: &'a Expr, s: &Scope<'a>) -> Option<Cow<'a, Value>> {
    let boolean = |v: Option<Cow<'_, Value>>| match v.as_deref() {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    };
    match op {
        BinOp::And => {
            let l = boolean(eval(a, s));
            if l == Some(false) {
                return Some(Cow::Owned(Value::Bool(false)));
            }
            match (l, boolean(eval(b, s))) {
                (_, Some(false)) => Some(Cow::Owned(Value::Bool(false))),
                (Some(true), Some(true)) => Some(Cow::Owned(Value::Bool(true))),
                _ => None,
            }
        }
        BinOp::Or => {
            let l = boolean(eval(a, s));
            if l == Some(true) {
                return Some(Cow::Owned(Value::Bool(true)));
            }
            match (l, boolean(eval(b, s))) {
                (_, Some(true)) => Some(Cow::Owned(Value::Bool(true))),
                (Some(false), Some(false)) => Some(Cow::Owned(Value::Bool(false))),
                _ => None,
            }
        }
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let (l, r) = (eval(a, s)?, eval(b, s)?);
            let ord = compare(&l, &r)?;
            let result = match op {
                BinOp::Eq => ord == Ordering::Equal,
                BinOp::Ne => ord != Ordering::Equal,
                BinOp::Lt => ord == Ordering::Less,
                BinOp::Le => ord != Ordering::Greater,
                BinOp::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            };
            Some(Cow::Owned(Value::Bool(result)))
        }
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
            let (l, r) = (eval(a, s)?, eval(b, s)?);
            if let (BinOp::Add, Value::String(x), Value::String(y)) = (op, l.as_ref(), r.as_ref()) {
                return Some(Cow::Owned(Value::String(format!("{x}{y}"))));
            }
            let (x, y) = (l.as_f64()?, r.as_f64()?);
            let n = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div => x / y,
                _ => x % y,
            };
            n.is_finite().then(|| Cow::Owned(number(n)))
        }
    }
}

/// Compares two values of the same type; `None` (undefined) across types. Objects and arrays
/// compare only for equality.
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => {
            Some(if a == b {
                Ordering::Equal
            } else {
                Ordering::Less
            })
        }
        _ => None,
    }
}

fn compare_numbers(x: &Number, y: &Number) -> Option<Ordering> {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return Some(a.cmp(&b));
    }
    x.as_f64()?.partial_cmp(&y.as_f64()?)
}

/// The service's order across types for `ORDER BY`: null, booleans, numbers, strings.
pub fn sort_order(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            Value::Array(_) => 4,
            Value::Object(_) => 5,
        }
    }
    rank(a)
        .cmp(&rank(b))
        .then_with(|| compare(a, b).unwrap_or(Ordering::Equal))
}

fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

fn call(name: &str, args: &[Expr], s: &Scope<'_>) -> Option<Value> {
    let arg = |i: usize| args.get(i).and_then(|e| eval(e, s));
    match name {
        "ST_DISTANCE" => {
            let (a, b) = (geo::point(arg(0)?.as_ref())?, geo::point(arg(1)?.as_ref())?);
            Some(number(geo::haversine_m(a, b)))
        }
        "ST_WITHIN" => {
            let p = geo::point(arg(0)?.as_ref())?;
            let area = arg(1)?;
            Some(Value::Bool(geo::within(p, &area)?))
        }
        "IS_DEFINED" => Some(Value::Bool(arg(0).is_some())),
        "IS_NULL" => Some(Value::Bool(matches!(arg(0).as_deref(), Some(Value::Null)))),
        "IS_STRING" => Some(Value::Bool(matches!(
            arg(0).as_deref(),
            Some(Value::String(_))
        ))),
        "IS_NUMBER" => Some(Value::Bool(matches!(
            arg(0).as_deref(),
            Some(Value::Number(_))
        ))),
        "IS_BOOL" => Some(Value::Bool(matches!(
            arg(0).as_deref(),
            Some(Value::Bool(_))
        ))),
        "ARRAY_CONTAINS" => {
            let (arr, needle) = (arg(0)?, arg(1)?);
            Some(Value::Bool(
                arr.as_array()?.iter().any(|v| v == needle.as_ref()),
            ))
        }
        "ARRAY_LENGTH" => Some(Value::from(arg(0)?.as_array()?.len())),
        "CONTAINS" => Some(Value::Bool(arg(0)?.as_str()?.contains(arg(1)?.as_str()?))),
        "STARTSWITH" => Some(Value::Bool(
            arg(0)?.as_str()?.starts_with(arg(1)?.as_str()?),
        )),
        "ENDSWITH" => Some(Value::Bool(arg(0)?.as_str()?.ends_with(arg(1)?.as_str()?))),
        "LOWER" => Some(Value::String(arg(0)?.as_str()?.to_lowercase())),
        "UPPER" => Some(Value::String(arg(0)?.as_str()?.to_uppercase())),
        "LENGTH" => Some(Value::from(arg(0)?.as_str()?.chars().count())),
        "ABS" => Some(number(arg(0)?.as_f64()?.abs())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_condition;
    use super::*;
    use serde_json::json;

    fn check(cond: &str, doc: &Value) -> bool {
        let c = parse_condition(cond).unwrap();
        holds(
            &c.filter,
            &Scope {
                alias: &c.alias,
                doc,
                params: &[],
            },
        )
    }

    #[test]
    fn newest_wins_condition() {
        let cond = "from c where c.deviceTimeMs < 1700000000000 or (c.deviceTimeMs = 1700000000000 and c.seq < 42)";
        assert!(check(
            cond,
            &json!({"deviceTimeMs": 1699999999999_i64, "seq": 99})
        ));
        assert!(check(
            cond,
            &json!({"deviceTimeMs": 1700000000000_i64, "seq": 41})
        ));
        assert!(!check(
            cond,
            &json!({"deviceTimeMs": 1700000000000_i64, "seq": 42})
        ));
        assert!(!check(
            cond,
            &json!({"deviceTimeMs": 1700000000001_i64, "seq": 0})
        ));
        // Missing property: undefined, so the condition does not hold.
        assert!(!check(cond, &json!({"seq": 0})));
    }

    #[test]
    fn three_valued_logic() {
        let doc = json!({"a": 1, "s": "x"});
        assert!(!check("from c where c.a = 'x'", &doc));
        assert!(!check("from c where c.a != 'x'", &doc));
        assert!(check("from c where c.missing = 1 or c.a = 1", &doc));
        assert!(!check("from c where c.missing = 1 and c.a = 1", &doc));
        assert!(check("from c where not (c.a > 1)", &doc));
        assert!(check(
            "from c where c.a + 1 = 2 and c.s in ('y', 'x')",
            &doc
        ));
        assert!(check(
            "from c where IS_DEFINED(c.s) and not is_defined(c.nope)",
            &doc
        ));
    }
}
