//! Who a request is charged to ([`Who`]: its credential, or for anonymous callers the client's
//! address), and how many things one caller may hold at once ([`PerCaller`]: fan-out
//! queries, live streams), so that one caller cannot take what all share.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::Extensions;

use crate::access::{Caller, Identity};
use crate::intake::ClientAddr;

/// Who a request is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Who {
    /// A key or a token's subject.
    Caller(Identity),
    /// An anonymous caller, by its client's address.
    Client(IpAddr),
}

impl Who {
    /// The request's caller (put in by its route's guard), or its client's address when it is
    /// anonymous (put in by [`crate::intake::client_address`]); anonymous callers whose
    /// address is unknown are one.
    pub fn of(extensions: &Extensions) -> Who {
        let identity = extensions
            .get::<Caller>()
            .map_or(Identity::Anonymous, |c| c.identity.clone());
        match (identity, extensions.get::<ClientAddr>()) {
            (Identity::Anonymous, Some(ClientAddr(ip))) => Who::Client(*ip),
            (identity, _) => Who::Caller(identity),
        }
    }
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Caller(identity) => identity.fmt(f),
            Who::Client(ip) => write!(f, "anonymous client {ip}"),
        }
    }
}

/// How many of a thing each caller holds, at most `max` each.
#[derive(Debug)]
pub struct PerCaller {
    max: usize,
    held: Arc<Mutex<HashMap<Who, usize>>>,
}

/// One thing held by a caller; dropping it gives it back.
#[derive(Debug)]
pub struct Held {
    who: Who,
    held: Arc<Mutex<HashMap<Who, usize>>>,
}

impl PerCaller {
    /// At most `max` each.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            held: Arc::default(),
        }
    }

    /// The most each caller may hold.
    pub fn max(&self) -> usize {
        self.max
    }

    /// One more for `who`, unless it holds `max` already.
    pub fn take(&self, who: &Who) -> Option<Held> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(who.clone()).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Held {
            who: who.clone(),
            held: self.held.clone(),
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.who) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.who);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_caller_holds_at_most_its_share_and_gives_it_back() {
        let caps = PerCaller::new(2);
        let a = Who::Caller(Identity::Key("a".into()));
        let b = Who::Client("192.0.2.1".parse().unwrap());
        let first = caps.take(&a).unwrap();
        let _second = caps.take(&a).unwrap();
        assert!(caps.take(&a).is_none());
        assert!(caps.take(&b).is_some(), "another caller has its own share");
        drop(first);
        assert!(caps.take(&a).is_some());
    }

    #[test]
    fn anonymous_callers_are_told_apart_by_address() {
        let mut ext = Extensions::new();
        ext.insert(ClientAddr("192.0.2.1".parse().unwrap()));
        assert_eq!(Who::of(&ext), Who::Client("192.0.2.1".parse().unwrap()));
        ext.insert(Caller {
            identity: Identity::Key("ci".into()),
            roles: vec![],
        });
        assert_eq!(Who::of(&ext), Who::Caller(Identity::Key("ci".into())));
        assert_eq!(
            Who::of(&Extensions::new()),
            Who::Caller(Identity::Anonymous)
        );
    }
}
