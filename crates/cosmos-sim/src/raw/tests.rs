//! The reader against `serde_json`, batch bodies, and what is written.

use super::set_patch::SetMember;
use super::*;
use cosmos_wire::batch::OperationType;
use proptest::prelude::*;
use serde_json::{Value, json};

fn path(p: &str) -> Vec<String> {
    p.split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn scan<'a>(doc: &'a [u8], key_path: &[String]) -> Option<Fields<'a>> {
    document(std::str::from_utf8(doc).unwrap(), key_path).unwrap()
}

#[test]
fn finds_id_key_and_system_properties() {
    let doc = br#" { "id" : "a", "n": [1, {"id": "inner"}], "deviceId":"d-1","s":"x\"}" } "#;
    let f = scan(doc, &path("/deviceId")).unwrap();
    assert_eq!(f.id, Some(&br#""a""#[..]));
    assert_eq!(f.key, Some(&br#""d-1""#[..]));
    assert!(!f.system);
    let f = scan(br#"{"id":"a","_etag":"x"}"#, &path("/deviceId")).unwrap();
    assert_eq!((f.key, f.system), (None, true));
    let f = scan(br#"{"a":{"b":7},"id":1}"#, &path("/a/b")).unwrap();
    assert_eq!((f.id, f.key), (Some(&b"1"[..]), Some(&b"7"[..])));
    assert_eq!(scan(br#"{"a":3}"#, &path("/a/b")).unwrap().key, None);
    let f = scan(br#"{"id":"x"}"#, &path("/id")).unwrap();
    assert_eq!((f.id, f.key), (Some(&br#""x""#[..]), Some(&br#""x""#[..])));
    assert_eq!(
        scan(b"{}", &path("/a")).unwrap(),
        Fields {
            id: None,
            key: None,
            system: false
        }
    );
    assert!(scan(b"[1]", &path("/a")).is_none());
    assert!(scan(br#"{"\u0069d":"a"}"#, &path("/a")).is_none());
    for bad in [
        &br#"{"id":"a"} x"#[..],
        br#"{"id":"a",}"#,
        br#"{"id":01}"#,
        br#"{"id":"a\q"}"#,
        b"{\"id\":\"a\x01\"}",
        br#"{"id":tru}"#,
        br#"{"id" "a"}"#,
        br#"[1,]"#,
        br#"{"id":1e400}"#,
        br#"[-1E+309]"#,
        b"",
    ] {
        let text = std::str::from_utf8(bad).unwrap();
        assert!(document(text, &path("/a")).is_err(), "{text:?}");
        assert!(serde_json::from_slice::<Value>(bad).is_err(), "{text:?}");
    }
}

#[test]
fn nesting_and_number_limits_match_serde_json() {
    for depth in [126, 127, 128, 129] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(
            document(&text, &path("/a")).is_ok(),
            serde_json::from_str::<Value>(&text).is_ok(),
            "{depth}"
        );
    }
    let big = "9".repeat(400);
    assert!(document(&big, &path("/a")).is_err());
    assert!(serde_json::from_str::<Value>(&big).is_err());
    assert!(document("1e-400", &path("/a")).is_ok());
}

#[test]
fn reads_batch_operations_with_their_documents() {
    let body = r#"[{"operationType":"Upsert","partitionKey":"[\"d\"]","resourceBody":{"id":"a","deviceId":"d"}},
        {"operationType":"Read","id":"a\"b","ifMatch":"\"e\"","extra":[1,{"x":null}],"partitionKey":null}]"#;
    let ops = read_batch(body, &path("/deviceId")).unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0].operation_type, OperationType::Upsert);
    assert_eq!(ops[0].partition_key, Some(&br#""[\"d\"]""#[..]));
    let (doc, fields) = ops[0].resource_body.unwrap();
    assert_eq!(doc, br#"{"id":"a","deviceId":"d"}"#);
    assert_eq!(fields.unwrap().key, Some(&br#""d""#[..]));
    assert_eq!(ops[1].id.as_deref(), Some("a\"b"));
    assert_eq!(ops[1].if_match.as_deref(), Some("\"e\""));
    assert_eq!((ops[1].partition_key, ops[1].resource_body), (None, None));
    assert_eq!(read_batch("[]", &path("/a")).unwrap(), vec![]);
    assert!(matches!(
        read_batch(r#"[{"id":"a"}]"#, &path("/a")),
        Err(BatchError::Shape(_))
    ));
    assert!(matches!(
        read_batch(r#"[{"operationType":"Nope"}]"#, &path("/a")),
        Err(BatchError::Shape(_))
    ));
    assert!(matches!(
        read_batch(r#"[{"operationType":"Read","id":3}]"#, &path("/a")),
        Err(BatchError::Shape(_))
    ));
    assert!(matches!(
        read_batch(r#"[{"operationType":"Read"}"#, &path("/a")),
        Err(BatchError::Json(_))
    ));
    assert!(matches!(
        read_batch(r#"{"operationType":"Read"}"#, &path("/a")),
        Err(BatchError::Json(_))
    ));
}

#[test]
fn charges_and_etags_are_written_as_before() {
    for c in [0.0, 1.0, 5.7, 7.98, 5.05, 12.3, 1234.56, 0.01, 1e20, 0.125] {
        let mut out = Vec::new();
        push_charge(&mut out, c);
        assert_eq!(String::from_utf8(out).unwrap(), c.to_string());
    }
    assert_eq!(
        EtagText::new(42).as_str(),
        format!("\"{:08x}-0000-0000-0000-000000000000\"", 42)
    );
    assert_eq!(
        EtagText::new(42).inner(),
        &EtagText::new(42).as_str().as_bytes()[1..37]
    );
    assert_ne!(EtagText::new(1 << 32), EtagText::new(0));
    for n in [0, 1, 42, 0xffff_ffff, (1 << 32) + 7, (1 << 48) - 1] {
        assert_eq!(EtagText::new(n).number(), n);
    }
    assert_eq!(plain_str(br#""ab""#), Some("ab"));
    assert_eq!(plain_str(br#""a\nb""#), None);
    assert_eq!(open_object(b"{\"a\":1} \n"), Some(&b"{\"a\":1"[..]));
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn reader_agrees_with_the_parser(
        members in prop::collection::btree_map("[a-z_]{1,4}|id|pk|_etag", arb_json(), 0..6),
        pretty in any::<bool>(),
    ) {
        let built = Value::Object(members.into_iter().collect());
        let text = if pretty { serde_json::to_vec_pretty(&built) } else { serde_json::to_vec(&built) }.unwrap();
        // Compared with the text parsed back (floats need not round-trip exactly).
        let doc: Value = serde_json::from_slice(&text).unwrap();
        let f = scan(&text, &path("/pk")).unwrap();
        let op = format!(r#"[{{"operationType":"Create","resourceBody":{}}}]"#, String::from_utf8(text.clone()).unwrap());
        let ops = read_batch(&op, &path("/pk")).unwrap();
        prop_assert_eq!(ops[0].resource_body, Some((&text[..], Some(f))));
        let raw = |v: Option<&[u8]>| v.map(|r| serde_json::from_slice::<Value>(r).unwrap());
        prop_assert_eq!(raw(f.id), doc.get("id").cloned());
        prop_assert_eq!(raw(f.key), doc.get("pk").cloned());
        prop_assert_eq!(f.system, doc.get("_etag").is_some());
        let open = open_object(&text).unwrap();
        let mut spliced = open.to_vec();
        spliced.extend_from_slice(if doc.as_object().unwrap().is_empty() { b"\"z\":1}" } else { b",\"z\":1}" });
        let mut expected = doc.clone();
        expected["z"] = json!(1);
        prop_assert_eq!(serde_json::from_slice::<Value>(&spliced).unwrap(), expected);
    }
}

proptest! {
    #[test]
    fn reader_accepts_exactly_what_serde_json_accepts(text in r#"[\[\]{}",:0-9a-z\\ .eE+\-\x01\té]{0,40}"#) {
        let ours = document(&text, &["a".to_string()]).is_ok();
        let theirs = serde_json::from_str::<Value>(&text).is_ok();
        prop_assert_eq!(ours, theirs, "{:?}", text);
    }

    #[test]
    fn strings_are_read_as_serde_json_reads_them(body in r#"([a-z0-9 é]|\\[nu"\\q]|\\u[dD][89aAcC]00|\x01|")?{0,40}"#) {
        let text = format!("[\"{body}\",1]");
        let ours = document(&text, &["a".to_string()]).is_ok();
        let theirs = serde_json::from_str::<Value>(&text).is_ok();
        prop_assert_eq!(ours, theirs, "{:?}", text);
    }
}

#[test]
fn a_patch_of_top_level_sets_is_read_and_anything_else_is_not() {
    let pk = path("/deviceId");
    let body = br#"{"condition":"FROM c WHERE c.t < 5","operations":[{"op":"set","path":"/t","value":5},{"path":"/loc","op":"Replace","value":{"type":"Point"}},{"op":"add","path":"/mine","value":[1]}]}"#;
    let p = read_set_patch(body, &pk).unwrap();
    assert_eq!(p.condition, Some("FROM c WHERE c.t < 5"));
    let names: Vec<_> = p
        .sets
        .iter()
        .map(|s| (s.name, s.value, s.must_exist))
        .collect();
    assert_eq!(
        names,
        [
            (&b"t"[..], &b"5"[..], false),
            (b"loc", br#"{"type":"Point"}"#, true),
            (b"mine", b"[1]", false)
        ]
    );
    let refused = [
        r#"{"operations":[{"op":"set","path":"/a/b","value":1}]}"#,
        r#"{"operations":[{"op":"remove","path":"/a"}]}"#,
        r#"{"operations":[{"op":"incr","path":"/a","value":1}]}"#,
        r#"{"operations":[{"op":"set","path":"/a"}]}"#,
        r#"{"operations":[{"op":"set","path":"/id","value":"x"}]}"#,
        r#"{"operations":[{"op":"set","path":"/_etag","value":"x"}]}"#,
        r#"{"operations":[{"op":"set","path":"/_mine","value":"x"}]}"#,
        r#"{"operations":[{"op":"set","path":"/deviceId","value":"x"}]}"#,
        r#"{"operations":[{"op":"set","path":"/a","value":1},{"op":"set","path":"/a","value":2}]}"#,
        r#"{"operations":[{"op":"set","path":"/a~1b","value":1}]}"#,
        r#"{"operations":[{"op":"set","path":"a","value":1}]}"#,
        r#"{"operations":[{"op":"set","path":"/a","value":1,"value":2}]}"#,
        r#"{"operations":[{"op":"set","path":"/a","value":1}],"condition":"FROM c WHERE c.s = \"x\""}"#,
        r#"{"operations":[{"op":"set","path":"/a","value":1}],"condition":3}"#,
        r#"{"operations":[],"operations":[]}"#,
        r#"{"condition":"FROM c WHERE true"}"#,
        r#"{"operations":[{"op":"set","path":"/a","value":1}]"#,
    ];
    for body in refused {
        assert_eq!(read_set_patch(body.as_bytes(), &pk), None, "{body}");
    }
    let null = read_set_patch(br#"{"operations":[],"condition":null,"other":1}"#, &pk).unwrap();
    assert_eq!((null.sets.len(), null.condition), (0, None));
}

#[test]
fn sets_keep_the_order_and_user_members_and_drop_the_system_properties() {
    let doc =
        br#"{"id":"a","_mine":1, "t" : 1,"_rid":"r","loc":{"x":[1]},"_etag":"\"e\"","_ts":5}"#;
    let sets = [
        SetMember {
            name: b"loc",
            value: b"null",
            must_exist: true,
        },
        SetMember {
            name: b"t",
            value: b"2.50",
            must_exist: false,
        },
        SetMember {
            name: b"new",
            value: br#""n""#,
            must_exist: false,
        },
    ];
    assert_eq!(
        String::from_utf8(apply_sets(doc, &sets).unwrap()).unwrap(),
        r#"{"id":"a","_mine":1,"t":2.50,"loc":null,"new":"n"}"#
    );
    let missing = [SetMember {
        name: b"gone",
        value: b"1",
        must_exist: true,
    }];
    assert_eq!(apply_sets(doc, &missing), None);
    assert_eq!(apply_sets(br#"{"a\u0062":1}"#, &sets[1..2]), None);
}

/// The system properties the endpoint stamps, removed to compare documents.
fn without_system(mut v: Value) -> Value {
    if let Some(map) = v.as_object_mut() {
        for name in ["_rid", "_self", "_etag", "_ts", "_attachments"] {
            map.remove(name);
        }
    }
    v
}

proptest! {
    /// Where the text path takes a patch, it gives the document the parsing path gives; where
    /// the parsing path refuses one, the text path does not take it.
    #[test]
    fn sets_on_the_text_agree_with_the_parsed_patch(
        members in prop::collection::btree_map("[a-c]|id|pk|_etag|_rid|_x", arb_json(), 0..6),
        ops in prop::collection::vec(
            (
                prop_oneof![4 => "set|add|replace|Set", 1 => "remove|incr"],
                prop_oneof![4 => "/[a-d]", 1 => "/id|/pk|/_x|/_ts|/a/b|/b~0"],
                arb_json(),
            ),
            0..4,
        ),
        condition in prop::option::of("FROM c WHERE c.a < [0-9]{1,3}"),
    ) {
        let text = serde_json::to_vec(&Value::Object(members.into_iter().collect())).unwrap();
        // Compared with the text parsed back (floats need not round-trip exactly).
        let doc: Value = serde_json::from_slice(&text).unwrap();
        let ops: Vec<Value> = ops
            .into_iter()
            .map(|(op, path, value)| json!({"op": op, "path": path, "value": value}))
            .collect();
        let mut body = json!({"operations": ops});
        if let Some(c) = &condition {
            body["condition"] = json!(c);
        }
        let body = serde_json::to_vec(&body).unwrap();
        let parsed: cosmos_wire::resources::PatchRequest = serde_json::from_slice(&body).unwrap();
        let mut expected = doc.clone();
        let outcome = crate::value_patch::apply(&mut expected, &parsed.operations, &path("/pk"));
        let Some(sets) = read_set_patch(&body, &path("/pk")) else { return Ok(()) };
        prop_assert_eq!(sets.condition, condition.as_deref());
        match (apply_sets(&text, &sets.sets), outcome) {
            (Some(patched), Ok(())) => prop_assert_eq!(
                serde_json::from_slice::<Value>(&patched).unwrap(),
                without_system(expected)
            ),
            (None, _) => {}
            (Some(patched), Err(e)) => prop_assert!(false, "took {:?}, refused: {}", String::from_utf8(patched), e),
        }
    }
}

#[test]
fn members_are_read_by_name() {
    assert_eq!(
        read_members(
            br#"{"a":1,"b":{"c":[2]},"_x":3}"#,
            &["b".into(), "z".into()]
        ),
        Some(json!({"b": {"c": [2]}}))
    );
    assert_eq!(read_members(br#"{"\u0062":1}"#, &["b".into()]), None);
}
