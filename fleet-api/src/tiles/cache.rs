//! The tiles the API fetched, kept in memory for a while: what a tile is ([`TileId`], checked
//! from the path), and a cache bounded by bytes that forgets the oldest first. A map viewed
//! by many browsers asks the tile server once per tile and period, not once per browser.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderValue;
use tokio::time::Instant;

/// The deepest zoom asked for (Azure Maps' road tiles go to 22).
pub const MAX_ZOOM: u8 = 22;

/// A tile of the slippy-map grid: zoom `z`, column `x` and row `y`, each in its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TileId {
    pub z: u8,
    pub x: u32,
    pub y: u32,
}

impl TileId {
    /// The tile a path names, or what is wrong with it.
    pub fn parse(z: &str, x: &str, y: &str) -> Result<TileId, String> {
        let z: u8 = z
            .parse()
            .ok()
            .filter(|z| *z <= MAX_ZOOM)
            .ok_or_else(|| format!("zoom '{z}' is not a whole number from 0 to {MAX_ZOOM}"))?;
        let side = 1u32 << z;
        let coordinate = |name: &str, text: &str| {
            text.parse::<u32>()
                .ok()
                .filter(|c| *c < side)
                .ok_or_else(|| {
                    format!(
                        "{name} '{text}' is not a whole number from 0 to {} at zoom {z}",
                        side - 1
                    )
                })
        };
        Ok(TileId {
            z,
            x: coordinate("x", x)?,
            y: coordinate("y", y)?,
        })
    }
}

/// A tile's image and its type.
#[derive(Debug, Clone, PartialEq)]
pub struct Tile {
    pub content_type: HeaderValue,
    pub body: Bytes,
}

#[derive(Debug)]
struct Stored {
    tile: Tile,
    at: Instant,
}

#[derive(Debug, Default)]
struct Kept {
    tiles: HashMap<TileId, Stored>,
    /// The tiles in the order they were first kept: the front is forgotten first.
    order: VecDeque<TileId>,
    bytes: usize,
}

/// Tiles kept for `fresh_for`, at most `max_bytes` of them.
#[derive(Debug)]
pub struct TileCache {
    max_bytes: usize,
    fresh_for: Duration,
    kept: Mutex<Kept>,
}

impl TileCache {
    /// A cache of `max_bytes` whose tiles are served for `fresh_for`.
    pub fn new(max_bytes: usize, fresh_for: Duration) -> Self {
        Self {
            max_bytes,
            fresh_for,
            kept: Mutex::default(),
        }
    }

    /// The tile `id`, when it is kept and fresh.
    pub fn get(&self, id: TileId) -> Option<Tile> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.tiles
            .get(&id)
            .filter(|s| s.at.elapsed() < self.fresh_for)
            .map(|s| s.tile.clone())
    }

    /// Keeps `tile` as `id`, forgetting the oldest tiles while they would not fit.
    pub fn put(&self, id: TileId, tile: Tile) {
        let size = tile.body.len();
        if size > self.max_bytes {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let stored = Stored {
            tile,
            at: Instant::now(),
        };
        match kept.tiles.insert(id, stored) {
            Some(old) => kept.bytes -= old.tile.body.len(),
            None => kept.order.push_back(id),
        }
        kept.bytes += size;
        while kept.bytes > self.max_bytes {
            let Some(oldest) = kept.order.pop_front() else {
                break;
            };
            if let Some(gone) = kept.tiles.remove(&oldest) {
                kept.bytes -= gone.tile.body.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(bytes: usize) -> Tile {
        Tile {
            content_type: HeaderValue::from_static("image/png"),
            body: Bytes::from(vec![0u8; bytes]),
        }
    }

    fn id(x: u32) -> TileId {
        TileId { z: 5, x, y: 3 }
    }

    #[test]
    fn a_tile_is_named_by_a_zoom_and_a_column_and_row_inside_it() {
        assert_eq!(
            TileId::parse("0", "0", "0"),
            Ok(TileId { z: 0, x: 0, y: 0 })
        );
        assert_eq!(
            TileId::parse("22", "4194303", "17"),
            Ok(TileId {
                z: 22,
                x: 4_194_303,
                y: 17
            })
        );
        for (z, x, y, wrong) in [
            ("23", "0", "0", "zoom"),
            ("-1", "0", "0", "zoom"),
            ("2", "4", "0", "x '4'"),
            ("2", "0", "4", "y '4'"),
            ("2", "0", "-1", "y"),
            ("2", "1.5", "0", "x"),
            ("z", "0", "0", "zoom"),
        ] {
            let err = TileId::parse(z, x, y).unwrap_err();
            assert!(err.contains(wrong), "{z}/{x}/{y}: {err}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tiles_are_kept_while_fresh_and_the_oldest_forgotten_past_the_bound() {
        let cache = TileCache::new(100, Duration::from_secs(60));
        cache.put(id(1), tile(40));
        cache.put(id(2), tile(40));
        assert_eq!(cache.get(id(1)), Some(tile(40)));
        cache.put(id(3), tile(40));
        assert_eq!(cache.get(id(1)), None, "the oldest is forgotten");
        assert!(cache.get(id(2)).is_some() && cache.get(id(3)).is_some());
        cache.put(id(2), tile(10));
        assert_eq!(
            cache.get(id(2)),
            Some(tile(10)),
            "a tile kept again is replaced"
        );
        cache.put(id(4), tile(200));
        assert_eq!(
            cache.get(id(4)),
            None,
            "a tile larger than the cache is not kept"
        );
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(cache.get(id(3)), None, "stale");
    }
}
