//! The syntax tree of the SQL subset: expressions, projections, queries and patch conditions.

use serde_json::Value;

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
    /// The document's top-level members the predicate reads, each once; `None` if it reads
    /// the document as a whole (`c` itself, or `c[0]`).
    pub reads: Option<Vec<String>>,
}

impl Expr {
    /// Adds the top-level members of the document bound to `alias` that this expression
    /// reads to `out`; false if it reads the document as a whole.
    pub fn top_members(&self, alias: &str, out: &mut Vec<String>) -> bool {
        match self {
            Expr::Lit(_) | Expr::Param(_) => true,
            Expr::Path(root, _) if root != alias => true,
            Expr::Path(_, segs) => match segs.first() {
                Some(PathSeg::Field(name)) => {
                    if !out.contains(name) {
                        out.push(name.clone());
                    }
                    true
                }
                Some(PathSeg::Index(_)) | None => false,
            },
            Expr::Not(e) | Expr::Neg(e) => e.top_members(alias, out),
            Expr::Binary(_, a, b) => a.top_members(alias, out) && b.top_members(alias, out),
            Expr::In(e, items) => {
                e.top_members(alias, out) && items.iter().all(|i| i.top_members(alias, out))
            }
            Expr::Call(_, items) | Expr::Array(items) => {
                items.iter().all(|i| i.top_members(alias, out))
            }
            Expr::Object(fields) => fields.iter().all(|(_, e)| e.top_members(alias, out)),
        }
    }
}
