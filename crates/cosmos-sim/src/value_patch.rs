//! Partial document update: applying `add`, `set`, `replace`, `remove` and `incr` operations
//! (JSON-pointer paths) to a document.

use cosmos_wire::resources::PatchOperation;
use serde_json::Value;

/// Why a patch could not apply (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patch operation {index} ({op} {path}): {reason}")]
pub struct PatchError {
    /// Position of the failing operation.
    pub index: usize,
    /// Its `op`.
    pub op: String,
    /// Its `path`.
    pub path: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// Applies the operations in order to `doc`. On error `doc` may be partly changed: apply to a copy.
pub fn apply(
    doc: &mut Value,
    ops: &[PatchOperation],
    pk_path: &[String],
) -> Result<(), PatchError> {
    for (index, op) in ops.iter().enumerate() {
        let err = |reason| PatchError {
            index,
            op: op.op.clone(),
            path: op.path.clone(),
            reason,
        };
        let segs: Vec<String> = op
            .path
            .strip_prefix('/')
            .ok_or_else(|| err("the path must start with '/'"))?
            .split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        if segs.iter().any(String::is_empty) {
            return Err(err("empty path segment"));
        }
        if segs[0] == "id" || segs[0].starts_with('_') && segs.len() == 1 {
            return Err(err("the id and system properties cannot be patched"));
        }
        if pk_path.iter().zip(&segs).all(|(a, b)| a == b) && segs.len() <= pk_path.len() {
            return Err(err("the partition key cannot be patched"));
        }
        let (last, parents) = segs.split_last().expect("at least one segment");
        let parent = parents
            .iter()
            .try_fold(&mut *doc, |v, seg| child_mut(v, seg))
            .ok_or_else(|| err("the parent of the path does not exist"))?;
        let value = || {
            op.value
                .clone()
                .ok_or_else(|| err("the operation has no value"))
        };
        match op.op.to_ascii_lowercase().as_str() {
            "set" | "add" => {
                let v = value()?;
                match parent {
                    Value::Object(map) => {
                        map.insert(last.clone(), v);
                    }
                    Value::Array(arr) => {
                        let i = if last == "-" {
                            arr.len()
                        } else {
                            last.parse().map_err(|_| err("not an array index"))?
                        };
                        if i > arr.len() {
                            return Err(err("array index out of bounds"));
                        }
                        if op.op.eq_ignore_ascii_case("set") && i < arr.len() {
                            arr[i] = v;
                        } else {
                            arr.insert(i, v);
                        }
                    }
                    _ => return Err(err("the parent is not an object or array")),
                }
            }
            "replace" => {
                let v = value()?;
                *child_mut(parent, last).ok_or_else(|| err("the path does not exist"))? = v;
            }
            "remove" => {
                let removed = match parent {
                    Value::Object(map) => map.remove(last).is_some(),
                    Value::Array(arr) => match last.parse::<usize>() {
                        Ok(i) if i < arr.len() => {
                            arr.remove(i);
                            true
                        }
                        _ => false,
                    },
                    _ => false,
                };
                if !removed {
                    return Err(err("the path does not exist"));
                }
            }
            "incr" => {
                let by = value()?;
                let target =
                    child_mut(parent, last).ok_or_else(|| err("the path does not exist"))?;
                *target = match (target.as_i64(), by.as_i64()) {
                    (Some(a), Some(b)) => Value::from(a.saturating_add(b)),
                    _ => {
                        let (a, b) = (
                            target
                                .as_f64()
                                .ok_or_else(|| err("the target is not a number"))?,
                            by.as_f64()
                                .ok_or_else(|| err("the value is not a number"))?,
                        );
                        Value::from(a + b)
                    }
                };
            }
            _ => {
                return Err(err(
                    "unknown operation (use add, set, replace, remove or incr)",
                ));
            }
        }
    }
    Ok(())
}

fn child_mut<'a>(v: &'a mut Value, seg: &str) -> Option<&'a mut Value> {
    match v {
        Value::Object(map) => map.get_mut(seg),
        Value::Array(arr) => arr.get_mut(seg.parse::<usize>().ok()?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(op: &str, path: &str, value: Option<Value>) -> PatchOperation {
        PatchOperation {
            op: op.into(),
            path: path.into(),
            value,
        }
    }

    #[test]
    fn applies_each_kind() {
        let mut doc = json!({"id":"a","deviceId":"d","n":1,"loc":{"x":1},"arr":[1,2]});
        let pk = vec!["deviceId".to_string()];
        apply(
            &mut doc,
            &[
                op("set", "/loc", Some(json!({"type":"Point"}))),
                op("add", "/new", Some(json!(5))),
                op("replace", "/n", Some(json!(2))),
                op("incr", "/n", Some(json!(3))),
                op("add", "/arr/-", Some(json!(3))),
                op("remove", "/arr/0", None),
            ],
            &pk,
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"id":"a","deviceId":"d","n":5,"loc":{"type":"Point"},"new":5,"arr":[2,3]})
        );
    }

    #[test]
    fn refuses_what_the_service_refuses() {
        let pk = vec!["deviceId".to_string()];
        let mut doc = json!({"id":"a","deviceId":"d"});
        assert!(apply(&mut doc, &[op("replace", "/missing", Some(json!(1)))], &pk).is_err());
        assert!(apply(&mut doc, &[op("remove", "/missing", None)], &pk).is_err());
        assert!(apply(&mut doc, &[op("set", "/deviceId", Some(json!("e")))], &pk).is_err());
        assert!(apply(&mut doc, &[op("set", "/id", Some(json!("e")))], &pk).is_err());
        assert!(apply(&mut doc, &[op("set", "/a/b", Some(json!(1)))], &pk).is_err());
        assert!(apply(&mut doc, &[op("move", "/x", Some(json!(1)))], &pk).is_err());
        assert_eq!(doc, json!({"id":"a","deviceId":"d"}));
    }
}
