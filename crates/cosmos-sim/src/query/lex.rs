//! The tokens of the SQL subset, and the syntax error of lexing and parsing.

use serde_json::Number;

/// A query or condition that could not be parsed; the message says where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("syntax error: {0}")]
pub struct SyntaxError(pub String);

/// A token.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
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

/// Splits a query into tokens.
pub(super) fn lex(src: &str) -> Result<Vec<Tok>, SyntaxError> {
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
