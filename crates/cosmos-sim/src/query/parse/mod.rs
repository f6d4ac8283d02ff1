//! A recursive-descent parser for queries (`SELECT ... FROM c WHERE ... ORDER BY ...`) and
//! patch conditions (`FROM c WHERE ...`), into the [`super::ast`] tree, with a bound on nesting.
//! Keywords are case-insensitive.

use super::ast::{BinOp, Condition, Expr, PathSeg, Projection, Query};
use super::lex::{SyntaxError, Tok, lex};
use serde_json::{Number, Value};

/// The deepest expression accepted, counted in nested operators, brackets and calls.
/// Evaluating and dropping a tree recurse once per level, and so does parsing a bracket,
/// so a query such as `NOT NOT ... x`, `((((...))))` or `1+1+...+1` thousands deep would
/// overflow a worker thread's stack; it is refused as a syntax error instead.
pub const MAX_DEPTH: usize = 128;

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    /// Brackets, calls and prefix operators being parsed now (the parser's recursion).
    depth: usize,
    /// Height of the expression most recently returned.
    height: usize,
}

/// Parses a query.
pub fn parse_query(src: &str) -> Result<Query, SyntaxError> {
    let mut p = Parser::new(lex(src)?);
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
    let mut p = Parser::new(lex(src)?);
    let (alias, filter) = p.source_and_filter()?;
    p.end()?;
    let filter = filter.ok_or_else(|| SyntaxError("the condition has no WHERE clause".into()))?;
    let mut reads = Vec::new();
    let reads = filter.top_members(&alias, &mut reads).then_some(reads);
    Ok(Condition {
        alias,
        filter,
        reads,
    })
}

const RESERVED: [&str; 16] = [
    "SELECT", "FROM", "WHERE", "ORDER", "BY", "ASC", "DESC", "AND", "OR", "NOT", "IN", "AS", "TOP",
    "VALUE", "OFFSET", "LIMIT",
];

impl Parser {
    fn new(toks: Vec<Tok>) -> Parser {
        Parser {
            toks,
            pos: 0,
            depth: 0,
            height: 0,
        }
    }

    /// Enters a bracket, call or prefix operator: refused beyond [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(too_deep());
        }
        Ok(())
    }

    /// Leaves what [`Parser::enter`] entered; the tree grew one level around `inner`.
    fn leave(&mut self, inner: usize) -> Result<(), SyntaxError> {
        self.depth -= 1;
        self.height = grown(inner)?;
        Ok(())
    }

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

    /// `lhs op rhs`, where `lhs_height` is the height of `lhs` and `self.height` that of `rhs`.
    fn binary(
        &mut self,
        op: BinOp,
        lhs: Expr,
        lhs_height: usize,
        rhs: Expr,
    ) -> Result<Expr, SyntaxError> {
        self.height = grown(lhs_height.max(self.height))?;
        Ok(Expr::Binary(op, Box::new(lhs), Box::new(rhs)))
    }

    fn expr(&mut self) -> Result<Expr, SyntaxError> {
        let mut lhs = self.and()?;
        while self.eat_kw("OR") {
            let lhs_height = self.height;
            let rhs = self.and()?;
            lhs = self.binary(BinOp::Or, lhs, lhs_height, rhs)?;
        }
        Ok(lhs)
    }

    fn and(&mut self) -> Result<Expr, SyntaxError> {
        let mut lhs = self.not()?;
        while self.eat_kw("AND") {
            let lhs_height = self.height;
            let rhs = self.not()?;
            lhs = self.binary(BinOp::And, lhs, lhs_height, rhs)?;
        }
        Ok(lhs)
    }

    fn not(&mut self) -> Result<Expr, SyntaxError> {
        if self.eat_kw("NOT") {
            self.enter()?;
            let e = self.not()?;
            self.leave(self.height)?;
            return Ok(Expr::Not(Box::new(e)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, SyntaxError> {
        let lhs = self.additive()?;
        if self.eat_kw("IN") {
            let lhs_height = self.height;
            self.expect_sym("(")?;
            let items = self.list(")")?;
            self.height = grown(lhs_height.max(self.height))?;
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
        let lhs_height = self.height;
        let rhs = self.additive()?;
        self.binary(op, lhs, lhs_height, rhs)
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
            let lhs_height = self.height;
            let rhs = self.multiplicative()?;
            lhs = self.binary(op, lhs, lhs_height, rhs)?;
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
            let lhs_height = self.height;
            let rhs = self.unary()?;
            lhs = self.binary(op, lhs, lhs_height, rhs)?;
        }
    }

    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        if self.eat_sym("-") {
            self.enter()?;
            let e = self.unary()?;
            self.leave(self.height)?;
            return Ok(match e {
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

    /// Items up to `close`, inside a bracket: the height is one more than the tallest item.
    fn list(&mut self, close: &str) -> Result<Vec<Expr>, SyntaxError> {
        self.enter()?;
        let mut items = Vec::new();
        let mut tallest = 0;
        if !self.eat_sym(close) {
            loop {
                items.push(self.expr()?);
                tallest = tallest.max(self.height);
                if self.eat_sym(close) {
                    break;
                }
                self.expect_sym(",")?;
            }
        }
        self.leave(tallest)?;
        Ok(items)
    }

    fn primary(&mut self) -> Result<Expr, SyntaxError> {
        self.height = 1;
        match self.next() {
            Some(Tok::Num(n)) => Ok(Expr::Lit(Value::Number(n))),
            Some(Tok::Str(s)) => Ok(Expr::Lit(Value::String(s))),
            Some(Tok::Param(p)) => Ok(Expr::Param(p)),
            Some(Tok::Sym("(")) => {
                self.enter()?;
                let e = self.expr()?;
                self.expect_sym(")")?;
                self.leave(self.height)?;
                Ok(e)
            }
            Some(Tok::Sym("[")) => Ok(Expr::Array(self.list("]")?)),
            Some(Tok::Sym("{")) => {
                self.enter()?;
                let mut fields = Vec::new();
                let mut tallest = 0;
                if self.eat_sym("}") {
                    self.leave(tallest)?;
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
                    tallest = tallest.max(self.height);
                    if self.eat_sym("}") {
                        self.leave(tallest)?;
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

/// One level taller than `height`, or refused beyond [`MAX_DEPTH`].
fn grown(height: usize) -> Result<usize, SyntaxError> {
    if height >= MAX_DEPTH {
        return Err(too_deep());
    }
    Ok(height + 1)
}

fn too_deep() -> SyntaxError {
    SyntaxError(format!(
        "the expression nests deeper than {MAX_DEPTH} levels of operators, brackets and calls"
    ))
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
mod tests;
