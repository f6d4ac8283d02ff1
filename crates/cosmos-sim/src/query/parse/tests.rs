//! The queries the project sends, case-insensitive conditions, clear refusals of garbage,
//! the nesting limit on both sides, and the members a condition reads.

use super::*;

#[test]
fn parses_the_queries_the_project_sends() {
    let q = parse_query(
        "SELECT TOP 10 c.id, c.location AS loc FROM c WHERE ST_DISTANCE(c.location, \
         {'type': 'Point', 'coordinates': [-122.12, 47.66]}) < @r AND c.deviceId = 'drone-1' \
         ORDER BY c.deviceTimeMs DESC",
    )
    .unwrap();
    assert_eq!(q.top, Some(10));
    assert_eq!(q.alias, "c");
    match &q.projection {
        Projection::Fields(f) => {
            assert_eq!(f[0].1, "id");
            assert_eq!(f[1].1, "loc");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(q.order_by, Some((Expr::Path(_, _), true))));
    assert!(matches!(q.filter, Some(Expr::Binary(BinOp::And, _, _))));
}

#[test]
fn parses_conditions_case_insensitively() {
    let c = parse_condition(
        "from c where c.deviceTimeMs < 1700000000000 or (c.deviceTimeMs = 1700000000000 and c.seq < 42)",
    )
    .unwrap();
    assert_eq!(c.alias, "c");
    assert!(matches!(c.filter, Expr::Binary(BinOp::Or, _, _)));
    assert!(parse_condition("from c").is_err());
}

#[test]
fn rejects_garbage_with_a_message() {
    assert!(parse_query("SELECT FROM c").is_err());
    assert!(parse_query("SELECT * FROM c WHERE").is_err());
    assert!(parse_query("SELECT * FROM c WHERE c.a = 'x").is_err());
    assert!(parse_query("SELECT * FROM c extra junk").is_err());
    let q = parse_query("select value c.id from root c where c.n in (1, -2, 3.5) offset 1 limit 2")
        .unwrap();
    assert_eq!(q.alias, "c");
    assert_eq!(q.offset_limit, Some((1, 2)));
}

/// Deep nesting of every recursive form is refused with a message, never a stack overflow.
#[test]
fn refuses_nesting_beyond_the_limit() {
    let deep = 100_000;
    let queries = [
        format!("SELECT * FROM c WHERE {}c.a", "NOT ".repeat(deep)),
        format!(
            "SELECT * FROM c WHERE {}1{}",
            "(".repeat(deep),
            ")".repeat(deep)
        ),
        format!("SELECT * FROM c WHERE c.a = {}1", "- ".repeat(deep)),
        format!(
            "SELECT VALUE {}1{} FROM c",
            "[".repeat(deep),
            "]".repeat(deep)
        ),
        format!(
            "SELECT VALUE {}1{} FROM c",
            "ABS(".repeat(deep),
            ")".repeat(deep)
        ),
        format!(
            "SELECT VALUE {}1{} FROM c",
            "{'a': ".repeat(deep),
            "}".repeat(deep)
        ),
        format!("SELECT VALUE 1{} FROM c", " + 1".repeat(deep)),
        format!("SELECT * FROM c WHERE c.a{}", " OR c.a".repeat(deep)),
        format!(
            "SELECT * FROM c WHERE c.a{}",
            " AND c.a * 2 > 1".repeat(deep)
        ),
    ];
    for q in &queries {
        let err = parse_query(q).unwrap_err().to_string();
        assert!(err.contains("deeper than"), "{}: {err}", &q[..40]);
    }
    let condition = format!("FROM c WHERE {}c.a", "NOT ".repeat(deep));
    assert!(parse_condition(&condition).is_err());
}

/// Nesting within the limit parses, so the limit refuses only what is deeper.
#[test]
fn accepts_nesting_up_to_the_limit() {
    let within = MAX_DEPTH - 2;
    let parens = format!(
        "SELECT * FROM c WHERE {}c.a{} = 1",
        "(".repeat(within),
        ")".repeat(within)
    );
    parse_query(&parens).unwrap();
    let sum = format!("SELECT VALUE 1{} FROM c", " + 1".repeat(within));
    parse_query(&sum).unwrap();
    let too_deep = format!("SELECT VALUE 1{} FROM c", " + 1".repeat(MAX_DEPTH + 1));
    assert!(parse_query(&too_deep).is_err());
    // Long flat lists are not deep: a polygon of many vertices is fine.
    let ring: Vec<String> = (0..5_000).map(|i| format!("[{i}.5, -{i}.25]")).collect();
    let polygon = format!(
        "SELECT * FROM c WHERE ST_WITHIN(c.location, {{'type': 'Polygon', 'coordinates': [[{}]]}})",
        ring.join(", ")
    );
    parse_query(&polygon).unwrap();
}

proptest::proptest! {
    /// Any mix of nesting forms: parsed when at most MAX_DEPTH deep, refused beyond.
    #[test]
    fn nesting_is_bounded(forms in proptest::collection::vec(0usize..6, 0..300)) {
        // Each form with the levels it adds (`(NOT e)` is the bracket and the NOT).
        let (open, close): (Vec<&str>, Vec<&str>) = forms
            .iter()
            .map(|f| match f {
                0 => ("(", ")"),
                1 => ("[", "]"),
                2 => ("ABS(", ")"),
                3 => ("{'k': ", "}"),
                4 => ("(NOT ", ")"),
                _ => ("- ", ""),
            })
            .unzip();
        let levels: usize = forms.iter().map(|&f| if f == 4 { 2 } else { 1 }).sum();
        let close: String = close.into_iter().rev().collect();
        let q = format!("SELECT * FROM c WHERE {}c.a{} = 1", open.concat(), close);
        // `c.a` is one level and the comparison one more.
        let height = levels + 2;
        match parse_query(&q) {
            Ok(_) => proptest::prop_assert!(height <= MAX_DEPTH),
            Err(e) => proptest::prop_assert!(
                height > MAX_DEPTH && e.0.contains("deeper than"),
                "{} levels: {}", levels, e
            ),
        }
    }
}

#[test]
fn a_condition_names_the_members_it_reads() {
    let reads = |f: &str| parse_condition(&format!("FROM c WHERE {f}")).unwrap().reads;
    let names = |n: &[&str]| Some(n.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(
        reads("c.t < 5 OR (c.t = 5 AND c.seq < 3)"),
        names(&["t", "seq"])
    );
    assert_eq!(
        reads("ST_DISTANCE(c.loc.p, {'type': 'Point'}) < -c.r"),
        names(&["loc", "r"])
    );
    assert_eq!(reads("IS_DEFINED(c)"), None);
    assert_eq!(reads("c[0] = 1"), None);
    assert_eq!(reads("d.x = 1 AND 1 = 1"), names(&[]));
}
