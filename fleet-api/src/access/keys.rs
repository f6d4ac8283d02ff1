//! API keys for scripts: the key file (`API_KEYS_FILE`), one `name role sha256hex` a line,
//! read again whenever it changes ([`crate::reload`]: a revoked key is refused from the next
//! request on, no restart; a version that does not load keeps the last good keys), and the
//! look-up of a presented key.
//!
//! Only the SHA-256 of a key is stored. A plain hash, without salt or stretching, is enough
//! because the keys are random 256-bit values (`openssl rand -base64 32`): nobody can guess
//! one from its hash, and a dictionary of likely keys does not exist. That is why
//! [`key_line`] refuses short keys. A key is found by its hash, so the time a look-up takes
//! depends on the hash of the presented key, never on how much of a stored key it matches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use sha2::{Digest, Sha256};

use crate::reload::Reloading;

use super::Role;

/// Fewest characters of a key `fleet-api hash-key` accepts: a random 256-bit key is 44 in
/// base64, 64 in hex.
pub const MIN_KEY_CHARS: usize = 32;

/// Why the key file or a key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `name role sha256hex`, or repeats a name or a key.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file holds no key.
    #[error("no key in the file (lines are 'name role sha256hex'; see fleet-api hash-key)")]
    Empty,
    /// A key to hash is too short to be a random 256-bit key, or a name is unusable.
    #[error("{0}")]
    Unusable(String),
}

/// A key's name and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHolder {
    /// The name given in the file (what the audit log shows).
    pub name: String,
    /// What the key may do.
    pub role: Role,
}

/// The accepted keys, by the SHA-256 of the key, and the file they were read from.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    by_hash: HashMap<[u8; 32], KeyHolder>,
    file: Option<PathBuf>,
}

impl ApiKeys {
    /// Reads the key file at `path` (read again whenever it changes, once in service).
    pub fn load(path: &Path) -> Result<ApiKeys, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Ok(ApiKeys {
            file: Some(path.to_path_buf()),
            ..ApiKeys::parse(&text)?
        })
    }

    /// Parses a key file: `name role sha256hex` a line; blank lines and lines starting
    /// with `#` are skipped. A file with no key parses (read again in service, it revokes
    /// every key); at start it is refused (`KeyError::Empty`).
    pub fn parse(text: &str) -> Result<ApiKeys, KeyError> {
        let mut by_hash = HashMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |message: String| KeyError::Line {
                line: index + 1,
                message,
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, role, hash] = fields[..] else {
                return Err(bad(format!(
                    "{} fields, expected 3: name role sha256hex",
                    fields.len()
                )));
            };
            let role: Role = role.parse().map_err(bad)?;
            let hash = parse_hex(hash).ok_or_else(|| {
                bad("the third field is not 64 hex digits (a SHA-256)".to_string())
            })?;
            if by_hash.values().any(|h: &KeyHolder| h.name == name) {
                return Err(bad(format!("the name '{name}' is given twice")));
            }
            let holder = KeyHolder {
                name: name.to_string(),
                role,
            };
            if let Some(other) = by_hash.insert(hash, holder) {
                return Err(bad(format!("the same key as '{}'", other.name)));
            }
        }
        Ok(ApiKeys {
            by_hash,
            file: None,
        })
    }

    /// Whether no key is accepted.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The holder of `key`, if it is one of the accepted keys.
    pub fn find(&self, key: &str) -> Option<&KeyHolder> {
        self.by_hash.get(&sha256(key))
    }
}

/// The keys in service: fixed, or the key file's newest version that loads.
#[derive(Debug)]
pub(super) enum KeySet {
    Fixed(Arc<ApiKeys>),
    File(Reloading<ApiKeys>),
}

impl KeySet {
    /// `keys`, followed in their file if they were read from one.
    pub(super) fn new(keys: ApiKeys) -> KeySet {
        match keys.file.clone() {
            Some(path) => KeySet::File(Reloading::keeping(
                "API key file",
                vec![path.clone()],
                keys,
                move || ApiKeys::load(&path),
            )),
            None => KeySet::Fixed(Arc::new(keys)),
        }
    }

    /// The keys accepted now.
    pub(super) fn current(&self) -> Arc<ApiKeys> {
        match self {
            KeySet::Fixed(keys) => keys.clone(),
            KeySet::File(file) => file.current(),
        }
    }

    /// The count of key file versions that did not load; none without a file.
    pub(super) fn failures(&self) -> Option<Counter> {
        match self {
            KeySet::Fixed(_) => None,
            KeySet::File(file) => Some(file.failures()),
        }
    }
}

/// The key file's line for `key`, named `name` with `role`.
pub fn key_line(name: &str, role: Role, key: &str) -> Result<String, KeyError> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(KeyError::Unusable(
            "the name must be one word without spaces".into(),
        ));
    }
    if key.chars().count() < MIN_KEY_CHARS {
        return Err(KeyError::Unusable(format!(
            "the key has fewer than {MIN_KEY_CHARS} characters; use a random 256-bit key \
             (openssl rand -base64 32)"
        )));
    }
    let hex: String = sha256(key).iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{name} {role} {hex}"))
}

fn sha256(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn parse_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-256 of "abc", FIPS 180-2 appendix B.1.
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn a_line_holds_the_published_digest() {
        let key = "abc".repeat(11);
        let line = key_line("ci", Role::Read, &key).unwrap();
        assert!(line.starts_with("ci Fleet.Read "), "{line}");
        let keys = ApiKeys::parse(&format!("# scripts\n\nops Fleet.Admin {ABC}\n")).unwrap();
        let holder = keys.find("abc").unwrap();
        assert_eq!((holder.name.as_str(), holder.role), ("ops", Role::Admin));
        assert!(keys.find("abd").is_none());
        assert_eq!(
            ApiKeys::parse(&line).unwrap().find(&key).unwrap().name,
            "ci"
        );
    }

    #[test]
    fn bad_files_name_the_line() {
        let err = |text: &str| ApiKeys::parse(text).unwrap_err().to_string();
        assert!(err("a Fleet.Read\n").contains("line 1"));
        assert!(err(&format!("\na Fleet.Write {ABC}")).contains("line 2"));
        assert!(err("a Fleet.Read abc").contains("64 hex digits"));
        let twice = format!("a Fleet.Read {ABC}\nb Fleet.Admin {ABC}\n");
        assert!(err(&twice).contains("the same key as 'a'"));
        let named_twice = format!("a Fleet.Read {ABC}\na Fleet.Read {}\n", "0".repeat(64));
        assert!(err(&named_twice).contains("given twice"));
        // No key is no error here: read again in service, it revokes every key.
        assert!(ApiKeys::parse("# nothing\n").unwrap().is_empty());
    }

    #[test]
    fn short_keys_and_spaced_names_are_refused() {
        assert!(key_line("ci", Role::Read, "short").is_err());
        assert!(key_line("two words", Role::Read, &"k".repeat(44)).is_err());
    }
}
