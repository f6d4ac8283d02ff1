//! The SQL subset: tokens, the syntax tree, and a recursive-descent parser for queries
//! (`SELECT ... FROM c WHERE ... ORDER BY ...`) and patch conditions (`FROM c WHERE ...`).
//! Keywords are case-insensitive.

use serde_json::{Number, Value};

/// A query or condition that could not be parsed; the message says where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("syntax error: {0}")]
pub struct SyntaxError(pub String);

/// One step of a property path.
#[derive(Debug, Clone, PartialEq)]
pub enum PathSeg {
    /// `.name` or `["name"]`.
    Field(String),
    /// `[3]`.
    Index(usize),
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `AND`
    And,
    /// `OR`
    Or,
    /// `=`
    Eq,
    /// `!=` or `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

/// An expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal.
    Lit(Value),
    /// `@name`.
    Param(String),
    /// The alias (`c`) followed by property steps.
    Path(String, Vec<PathSeg>),
    /// `NOT e`.
    Not(Box<Expr>),
    /// `-e`.
    Neg(Box<Expr>),
    /// `a op b`.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `e IN (a, b, ...)`.
    In(Box<Expr>, Vec<Expr>),
    /// A function call; the name is uppercase.
    Call(String, Vec<Expr>),
    /// `{"k": e, ...}`.
    Object(Vec<(String, Expr)>),
    /// `[e, ...]`.
    Array(Vec<Expr>),
}

/// What a query returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Projection {
    /// `SELECT *`: whole documents.
    Star,
    /// `SELECT VALUE e`.
    Value(Expr),
    /// `SELECT e [AS name], ...`.
    Fields(Vec<(Expr, String)>),
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// `TOP n`.
    pub top: Option<usize>,
    /// The select list.
    pub projection: Projection,
    /// The `FROM` alias (`c` in `FROM c`, or `r` in `FROM root r`).
    pub alias: String,
    /// The `WHERE` clause.
    pub filter: Option<Expr>,
    /// `ORDER BY e [ASC|DESC]`: the expression and whether descending.
    pub order_by: Option<(Expr, bool)>,
    /// `OFFSET n LIMIT m`.
    pub offset_limit: Option<(usize, usize)>,
}

/// A parsed patch condition, `FROM c WHERE e`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The `FROM` alias.
    pub alias: String,
    /// The predicate.
    pub filter: Expr,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Num(Number),
    Str(String),
    Param(String),
    Sym(&'static str),
}

const SYMBOLS: [&str; 19] = [
    "!=", "<>", "<=", ">=", "*", ",", ".", "(", ")", "[", "]", "{", "}", ":", "=", "<", ">", "+",
    "-",
];

fn lex(src: &str) -> Result<Vec<Tok>, SyntaxError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else if c == '@' {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Param(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || chars[i] == '.'
                    || chars[i] == 'e'
                    || chars[i] == 'E'
                    || ((chars[i] == '-' || chars[i] == '+') && matches!(chars[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            let num = serde_json::from_str::<Number>(&text)
                .map_err(|_| SyntaxError(format!("bad number {text:?}")))?;
            out.push(Tok::Num(num));
        } else if c == '\'' || c == '"' {
            let quote = c;
            i += 1;
            let mut s = String::new();
            loop {
                let Some(&ch) = chars.get(i) else {
                    return Err(SyntaxError("unterminated string".into()));
                };
                i += 1;
                match ch {
                    '\\' => {
                        let esc = *chars
                            .get(i)
                            .ok_or_else(|| SyntaxError("unterminated string".into()))?;
                        i += 1;
                        s.push(match esc {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            other => other,
                        });
                    }
                    ch if ch == quote => break,
                    ch => s.push(ch),
                }
            }
            out.push(Tok::Str(s));
        } else {
            let rest: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let sym = SYMBOLS
                .iter()
                .find(|s| rest.starts_with(**s))
                .or_else(|| ["/", "%"].iter().find(|s| rest.starts_with(**s)))
                .ok_or_else(|| SyntaxError(format!("unexpected character {c:?}")))?;
            i += sym.chars().count();
            out.push(Tok::Sym(sym));
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

/// Parses a query.
pub fn parse_query(src: &str) -> Result<Query, SyntaxError> {
    let mut p = Parser {
        toks: lex(src)?,
        pos: 0,
    };
    p.expect_kw("SELECT")?;
    let top = if p.eat_kw("TOP") {
        Some(p.usize_lit()?)
    } else {
        None
    };
    let projection = if p.eat_sym("*") {
        Projection::Star
    } else if p.eat_kw("VALUE") {
        Projection::Value(p.expr()?)
    } else {
        let mut fields = Vec::new();
        loop {
            let e = p.expr()?;
            let name = if p.eat_kw("AS") {
                p.ident()?
            } else {
                match &e {
                    Expr::Path(_, segs) => match segs.last() {
                        Some(PathSeg::Field(f)) => f.clone(),
                        _ => format!("${}", fields.len() + 1),
                    },
                    _ => format!("${}", fields.len() + 1),
                }
            };
            fields.push((e, name));
            if !p.eat_sym(",") {
                break;
            }
        }
        Projection::Fields(fields)
    };
    let (alias, filter) = p.source_and_filter()?;
    let order_by = if p.eat_kw("ORDER") {
        p.expect_kw("BY")?;
        let e = p.expr()?;
        let desc = if p.eat_kw("DESC") {
            true
        } else {
            p.eat_kw("ASC");
            false
        };
        Some((e, desc))
    } else {
        None
    };
    let offset_limit = if p.eat_kw("OFFSET") {
        let offset = p.usize_lit()?;
        p.expect_kw("LIMIT")?;
        Some((offset, p.usize_lit()?))
    } else {
        None
    };
    p.end()?;
    Ok(Query {
        top,
        projection,
        alias,
        filter,
        order_by,
        offset_limit,
    })
}

/// Parses a patch condition, `FROM c WHERE e`.
pub fn parse_condition(src: &str) -> Result<Condition, SyntaxError> {
    let mut p = Parser {
        toks: lex(src)?,
        pos: 0,
    };
    let (alias, filter) = p.source_and_filter()?;
    p.end()?;
    let filter = filter.ok_or_else(|| SyntaxError("the condition has no WHERE clause".into()))?;
    Ok(Condition { alias, filter })
}

const RESERVED: [&str; 16] = [
    "SELECT", "FROM", "WHERE", "ORDER", "BY", "ASC", "DESC", "AND", "OR", "NOT", "IN", "AS", "TOP",
    "VALUE", "OFFSET", "LIMIT",
];

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(s)) if s.eq_ignore_ascii_case(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        let hit = self.is_kw(kw);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect_kw(&mut self, kw: &str) -> Result<(), SyntaxError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(self.unexpected(kw))
        }
    }

    fn eat_sym(&mut self, sym: &str) -> bool {
        let hit = matches!(self.peek(), Some(Tok::Sym(s)) if *s == sym);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect_sym(&mut self, sym: &str) -> Result<(), SyntaxError> {
        if self.eat_sym(sym) {
            Ok(())
        } else {
            Err(self.unexpected(sym))
        }
    }

    fn unexpected(&self, wanted: &str) -> SyntaxError {
        SyntaxError(match self.peek() {
            Some(t) => format!("expected {wanted} at token {}, found {t:?}", self.pos + 1),
            None => format!("expected {wanted}, found the end"),
        })
    }

    fn end(&self) -> Result<(), SyntaxError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.unexpected("the end")),
        }
    }

    fn ident(&mut self) -> Result<String, SyntaxError> {
        match self.peek() {
            Some(Tok::Ident(s)) if !RESERVED.iter().any(|k| s.eq_ignore_ascii_case(k)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => Err(self.unexpected("a name")),
        }
    }

    fn usize_lit(&mut self) -> Result<usize, SyntaxError> {
        match self.next() {
            Some(Tok::Num(n)) => n
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| SyntaxError(format!("expected a whole number, found {n}"))),
            _ => {
                self.pos -= 1;
                Err(self.unexpected("a whole number"))
            }
        }
    }

    fn source_and_filter(&mut self) -> Result<(String, Option<Expr>), SyntaxError> {
        self.expect_kw("FROM")?;
        let mut alias = self.ident()?;
        // `FROM root r` or `FROM c AS x`.
        if self.eat_kw("AS") {
            alias = self.ident()?;
        } else if let Ok(second) = self.ident() {
            alias = second;
        }
        let filter = if self.eat_kw("WHERE") {
            Some(self.expr()?)
        } else {
            None
        };
        Ok((alias, filter))
    }

    fn expr(&mut self) -> Result<Expr, SyntaxError> {
        let mut lhs = self.and()?;
        while self.eat_kw("OR") {
            lhs = Expr::Binary(BinOp::Or, Box::new(lhs), Box::new(self.and()?));
        }
        Ok(lhs)
    }

    fn and(&mut self) -> Result<Expr, SyntaxError> {
        let mut lhs = self.not()?;
        while self.eat_kw("AND") {
            lhs = Expr::Binary(BinOp::And, Box::new(lhs), Box::new(self.not()?));
        }
        Ok(lhs)
    }

    fn not(&mut self) -> Result<Expr, SyntaxError> {
        if self.eat_kw("NOT") {
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, SyntaxError> {
        let lhs = self.additive()?;
        if self.eat_kw("IN") {
            self.expect_sym("(")?;
            let items = self.list(")")?;
            return Ok(Expr::In(Box::new(lhs), items));
        }
        let op = match self.peek() {
            Some(Tok::Sym("=")) => BinOp::Eq,
            Some(Tok::Sym("!=" | "<>")) => BinOp::Ne,
            Some(Tok::Sym("<")) => BinOp::Lt,
            Some(Tok::Sym("<=")) => BinOp::Le,
            Some(Tok::Sym(">")) => BinOp::Gt,
            Some(Tok::Sym(">=")) => BinOp::Ge,
            _ => return Ok(lhs),
        };
        self.pos += 1;
        Ok(Expr::Binary(op, Box::new(lhs), Box::new(self.additive()?)))
    }

    fn additive(&mut self) -> Result<Expr, SyntaxError> {
        let mut lhs = self.multiplicative()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Sym("+")) => BinOp::Add,
                Some(Tok::Sym("-")) => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(self.multiplicative()?));
        }
    }

    fn multiplicative(&mut self) -> Result<Expr, SyntaxError> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Sym("*")) => BinOp::Mul,
                Some(Tok::Sym("/")) => BinOp::Div,
                Some(Tok::Sym("%")) => BinOp::Rem,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        if self.eat_sym("-") {
            return Ok(match self.unary()? {
                Expr::Lit(Value::Number(n)) => Expr::Lit(negate(&n)),
                e => Expr::Neg(Box::new(e)),
            });
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, SyntaxError> {
        let mut e = self.primary()?;
        loop {
            if self.eat_sym(".") {
                let name = match self.next() {
                    Some(Tok::Ident(s)) => s,
                    _ => {
                        self.pos -= 1;
                        return Err(self.unexpected("a property name"));
                    }
                };
                e = push_seg(e, PathSeg::Field(name))?;
            } else if self.eat_sym("[") {
                let seg = match self.next() {
                    Some(Tok::Str(s)) => PathSeg::Field(s),
                    Some(Tok::Num(n)) => PathSeg::Index(
                        n.as_u64()
                            .ok_or_else(|| SyntaxError(format!("bad index {n}")))?
                            as usize,
                    ),
                    _ => {
                        self.pos -= 1;
                        return Err(self.unexpected("a property name or index"));
                    }
                };
                self.expect_sym("]")?;
                e = push_seg(e, seg)?;
            } else {
                return Ok(e);
            }
        }
    }

    fn list(&mut self, close: &str) -> Result<Vec<Expr>, SyntaxError> {
        let mut items = Vec::new();
        if self.eat_sym(close) {
            return Ok(items);
        }
        loop {
            items.push(self.expr()?);
            if self.eat_sym(close) {
                return Ok(items);
            }
            self.expect_sym(",")?;
        }
    }

    fn primary(&mut self) -> Result<Expr, SyntaxError> {
        match self.next() {
            Some(Tok::Num(n)) => Ok(Expr::Lit(Value::Number(n))),
            Some(Tok::Str(s)) => Ok(Expr::Lit(Value::String(s))),
            Some(Tok::Param(p)) => Ok(Expr::Param(p)),
            Some(Tok::Sym("(")) => {
                let e = self.expr()?;
                self.expect_sym(")")?;
                Ok(e)
            }
            Some(Tok::Sym("[")) => Ok(Expr::Array(self.list("]")?)),
            Some(Tok::Sym("{")) => {
                let mut fields = Vec::new();
                if self.eat_sym("}") {
                    return Ok(Expr::Object(fields));
                }
                loop {
                    let key = match self.next() {
                        Some(Tok::Str(s) | Tok::Ident(s)) => s,
                        _ => {
                            self.pos -= 1;
                            return Err(self.unexpected("an object key"));
                        }
                    };
                    self.expect_sym(":")?;
                    fields.push((key, self.expr()?));
                    if self.eat_sym("}") {
                        return Ok(Expr::Object(fields));
                    }
                    self.expect_sym(",")?;
                }
            }
            Some(Tok::Ident(name)) => {
                if self.eat_sym("(") {
                    let args = self.list(")")?;
                    return Ok(Expr::Call(name.to_ascii_uppercase(), args));
                }
                match name.to_ascii_lowercase().as_str() {
                    "true" => Ok(Expr::Lit(Value::Bool(true))),
                    "false" => Ok(Expr::Lit(Value::Bool(false))),
                    "null" => Ok(Expr::Lit(Value::Null)),
                    "undefined" => Ok(Expr::Call("UNDEFINED".into(), Vec::new())),
                    _ if RESERVED.iter().any(|k| name.eq_ignore_ascii_case(k)) => {
                        self.pos -= 1;
                        Err(self.unexpected("an expression"))
                    }
                    _ => Ok(Expr::Path(name, Vec::new())),
                }
            }
            _ => {
                self.pos = self.pos.saturating_sub(1);
                Err(self.unexpected("an expression"))
            }
        }
    }
}

fn negate(n: &Number) -> Value {
    if let Some(i) = n.as_i64() {
        Value::from(-i)
    } else {
        Value::from(-n.as_f64().unwrap_or(0.0))
    }
}

fn push_seg(e: Expr, seg: PathSeg) -> Result<Expr, SyntaxError> {
    match e {
        Expr::Path(root, mut segs) => {
            segs.push(seg);
            Ok(Expr::Path(root, segs))
        }
        other => Err(SyntaxError(format!(
            "property access on a non-path expression {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
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
        let q =
            parse_query("select value c.id from root c where c.n in (1, -2, 3.5) offset 1 limit 2")
                .unwrap();
        assert_eq!(q.alias, "c");
        assert_eq!(q.offset_limit, Some((1, 2)));
    }
}
