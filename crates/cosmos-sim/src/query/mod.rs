//! The SQL subset the project reads with: `SELECT *`, `VALUE` and projections, `WHERE` with
//! comparisons, `AND`/`OR`/`NOT`, `IN`, arithmetic, parameters, `ST_DISTANCE`, `ST_WITHIN` and a
//! few scalar functions, `ORDER BY` one expression, `TOP`, `OFFSET ... LIMIT`.
//!
//! A query runs over the documents of one logical partition or one range; results are paged by
//! an offset carried in the continuation token.

pub mod ast;
pub mod eval;
pub mod geo;
pub mod lex;
pub mod parse;
pub mod shape;

use crate::store::Doc;
use ast::{Projection, Query};
use eval::{Params, Scope, holds, sort_order};
use serde_json::{Map, Value};
use std::sync::Arc;

/// One result: a whole stored document (answered from its serialized form) or a projection.
#[derive(Debug, Clone)]
pub enum Item {
    /// `SELECT *`.
    Doc(Arc<Doc>),
    /// A projection or `VALUE`.
    Value(Value),
}

/// One page of results.
#[derive(Debug)]
pub struct Page {
    /// The results.
    pub items: Vec<Item>,
    /// Documents examined.
    pub scanned: usize,
    /// Offset of the next page, if there is one.
    pub next: Option<usize>,
}

/// Runs a query over documents and returns the page starting at result `start` with at most
/// `max_items` results.
pub fn execute<'a>(
    q: &Query,
    params: &Params,
    docs: impl Iterator<Item = &'a Arc<Doc>>,
    start: usize,
    max_items: usize,
) -> Page {
    let mut scanned = 0;
    let mut hits: Vec<(Option<Value>, &Arc<Doc>)> = Vec::new();
    for d in docs {
        scanned += 1;
        let scope = Scope {
            alias: &q.alias,
            doc: d.value(),
            params,
        };
        if q.filter.as_ref().is_some_and(|f| !holds(f, &scope)) {
            continue;
        }
        match &q.order_by {
            Some((e, _)) => {
                // Documents without the ORDER BY property are left out, as with the default index.
                if let Some(key) = eval::eval(e, &scope) {
                    hits.push((Some(key.into_owned()), d));
                }
            }
            None => hits.push((None, d)),
        }
    }
    let desc = q.order_by.as_ref().is_some_and(|(_, desc)| *desc);
    hits.sort_by(|(ka, da), (kb, db)| {
        let by_key = match (ka, kb) {
            (Some(a), Some(b)) if desc => sort_order(b, a),
            (Some(a), Some(b)) => sort_order(a, b),
            _ => std::cmp::Ordering::Equal,
        };
        by_key.then(da.seq.cmp(&db.seq))
    });
    let (offset, limit) = q.offset_limit.unwrap_or((0, usize::MAX));
    let total = hits
        .len()
        .saturating_sub(offset)
        .min(limit)
        .min(q.top.unwrap_or(usize::MAX));
    let end = start.saturating_add(max_items).min(total);
    let page = hits
        .iter()
        .skip(offset + start.min(total))
        .take(end.saturating_sub(start));
    let items = page.filter_map(|(_, d)| project(q, params, d)).collect();
    Page {
        items,
        scanned,
        next: (end < total).then_some(end),
    }
}

fn project(q: &Query, params: &Params, d: &Arc<Doc>) -> Option<Item> {
    let scope = Scope {
        alias: &q.alias,
        doc: d.value(),
        params,
    };
    match &q.projection {
        Projection::Star => Some(Item::Doc(d.clone())),
        Projection::Value(e) => eval::eval(e, &scope).map(|v| Item::Value(v.into_owned())),
        Projection::Fields(fields) => {
            let mut map = Map::new();
            for (e, name) in fields {
                if let Some(v) = eval::eval(e, &scope) {
                    map.insert(name.clone(), v.into_owned());
                }
            }
            Some(Item::Value(Value::Object(map)))
        }
    }
}

/// Writes the items as the `Documents` array of a feed body, returning the bytes of the items.
pub fn write_feed(items: &[Item], out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(b"{\"_rid\":\"\",\"Documents\":[");
    let before = out.len();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match item {
            Item::Doc(d) => out.extend_from_slice(d.json()),
            Item::Value(v) => serde_json::to_writer(&mut *out, v).expect("writing to a Vec"),
        }
    }
    let bytes = out.len() - before;
    out.extend_from_slice(format!("],\"_count\":{}}}", items.len()).as_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn docs(values: Vec<Value>) -> Vec<Arc<Doc>> {
        values
            .into_iter()
            .enumerate()
            .map(|(i, value)| {
                Arc::new(Doc::new(
                    serde_json::to_vec(&value).unwrap(),
                    crate::raw::EtagText::new(i as u64),
                    i as u64,
                ))
            })
            .collect()
    }

    fn values(page: &Page) -> Vec<Value> {
        page.items
            .iter()
            .map(|i| match i {
                Item::Doc(d) => d.value().clone(),
                Item::Value(v) => v.clone(),
            })
            .collect()
    }

    #[test]
    fn filters_orders_pages_and_projects() {
        let set = docs(
            (0..10)
                .map(|i| json!({"id": i.to_string(), "n": (i * 7) % 10}))
                .collect(),
        );
        let q = parse::parse_query("SELECT VALUE c.n FROM c WHERE c.n >= @min ORDER BY c.n DESC")
            .unwrap();
        let params = vec![("@min".to_string(), json!(3))];
        let first = execute(&q, &params, set.iter(), 0, 4);
        assert_eq!(values(&first), vec![json!(9), json!(8), json!(7), json!(6)]);
        assert_eq!(first.scanned, 10);
        assert_eq!(first.next, Some(4));
        let second = execute(&q, &params, set.iter(), 4, 4);
        assert_eq!(values(&second), vec![json!(5), json!(4), json!(3)]);
        assert_eq!(second.next, None);

        let q = parse::parse_query("SELECT TOP 2 c.id, c.n AS num FROM c").unwrap();
        let page = execute(&q, &[], set.iter(), 0, 100);
        assert_eq!(
            values(&page),
            vec![json!({"id":"0","num":0}), json!({"id":"1","num":7})]
        );

        let mut out = Vec::new();
        write_feed(&page.items, &mut out);
        let feed: cosmos_wire::resources::DocumentFeed = serde_json::from_slice(&out).unwrap();
        assert_eq!(feed.count, 2);
    }
}
