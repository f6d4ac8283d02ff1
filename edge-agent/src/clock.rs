//! The agent's clock: what time it is, as far as the agent can vouch for it.
//!
//! A companion computer often has no clock battery: until network time arrives it
//! believes it is 1970 or the time of its last shutdown. The flight stack knows better
//! once it has GPS time (MAVLink `SYSTEM_TIME`, gpsd's `time`). So:
//! - a fix that carries GPS time keeps it ([`ClockSource::Gps`]);
//! - every GPS time a source reports is compared with the board clock; when they differ
//!   by more than `max_skew`, the board clock is corrected by that difference for
//!   everything else the agent stamps: fixes without GPS time
//!   ([`ClockSource::BoardCorrected`]), SAS token expiries and the TLS certificate check;
//! - a board time earlier than [`EARLIEST_PLAUSIBLE`] with no GPS time to correct it
//!   cannot be vouched for: the fix makes no message (counted as `no_time`);
//! - otherwise the board clock stamps the fix, as [`ClockSource::Board`] if the kernel
//!   reports it synchronised (NTP, PTP, GPS via chrony) or GPS time agreed with it, and as
//!   [`ClockSource::BoardUnverified`] if nothing confirmed it.
//!
//! A GPS time earlier than [`EARLIEST_PLAUSIBLE`] (a receiver with a week-rollover bug) is
//! not believed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

/// No real clock reads earlier than this: this release was built after it.
pub const EARLIEST_PLAUSIBLE: DateTime<Utc> =
    DateTime::from_timestamp(1_767_225_600, 0).expect("2026-01-01T00:00:00Z is a valid time");

/// Which clock stamped a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockSource {
    /// The GPS time the flight stack gave with the fix.
    Gps,
    /// The board clock, synchronised or confirmed by GPS time within the bound.
    Board,
    /// The board clock corrected by the difference GPS time showed.
    BoardCorrected,
    /// The board clock, with nothing to confirm it (not synchronised, no GPS time yet).
    BoardUnverified,
}

/// What the agent knows of its board clock, for the status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClockStatus {
    /// The clock that stamped the last position.
    pub last: Option<ClockSource>,
    /// GPS time minus board time at the last GPS time seen, milliseconds.
    pub board_offset_ms: Option<i64>,
    /// Whether the kernel reports the board clock synchronised.
    pub board_synchronised: bool,
}

/// The agent's clock, shared by its source, its loop and its transport.
#[derive(Debug, Clone)]
pub struct Clock {
    max_skew: TimeDelta,
    /// GPS time minus board time, from the last GPS time seen.
    offset: Arc<Mutex<Option<TimeDelta>>>,
}

impl Clock {
    /// A clock that corrects the board clock when GPS time differs by more than `max_skew`.
    pub fn new(max_skew: Duration) -> Clock {
        Clock {
            max_skew: TimeDelta::from_std(max_skew).unwrap_or(TimeDelta::MAX),
            offset: Arc::new(Mutex::new(None)),
        }
    }

    /// A source saw GPS time `gps` when the board clock read `board`.
    pub fn observe_gps(&self, gps: DateTime<Utc>, board: DateTime<Utc>) {
        if gps < EARLIEST_PLAUSIBLE {
            return;
        }
        let offset = gps - board;
        let mut known = self.offset.lock().expect("clock lock");
        let was_corrected = known.is_some_and(|o| self.exceeds(o));
        if self.exceeds(offset) && !was_corrected {
            tracing::warn!(
                offset_ms = offset.num_milliseconds(),
                "the board clock is wrong by more than CLOCK_MAX_SKEW: positions, tokens and certificates use GPS time"
            );
        }
        *known = Some(offset);
    }

    /// The board clock's offset from GPS time, if a source has reported GPS time.
    pub fn offset(&self) -> Option<TimeDelta> {
        *self.offset.lock().expect("clock lock")
    }

    fn exceeds(&self, offset: TimeDelta) -> bool {
        offset.abs() > self.max_skew
    }

    /// The time now, corrected by GPS time when the board clock is known wrong: what
    /// token expiries and certificate checks use.
    pub fn now(&self) -> DateTime<Utc> {
        self.correct(Utc::now())
    }

    fn correct(&self, board: DateTime<Utc>) -> DateTime<Utc> {
        match self.offset() {
            Some(offset) if self.exceeds(offset) => board + offset,
            _ => board,
        }
    }

    /// The time to publish for a fix stamped `board` by the board clock, and which clock
    /// that is; `None` when no clock can vouch for it. `synchronised` is what the kernel
    /// says of the board clock.
    pub fn stamp_board(
        &self,
        board: DateTime<Utc>,
        synchronised: bool,
    ) -> Option<(DateTime<Utc>, ClockSource)> {
        match self.offset() {
            Some(offset) if self.exceeds(offset) => {
                Some((board + offset, ClockSource::BoardCorrected))
            }
            Some(_) => Some((board, ClockSource::Board)),
            None if board < EARLIEST_PLAUSIBLE => None,
            None if synchronised => Some((board, ClockSource::Board)),
            None => Some((board, ClockSource::BoardUnverified)),
        }
    }
}

/// Whether the kernel reports the system clock synchronised (`adjtimex` without
/// `STA_UNSYNC`); a read-only call that needs no privilege.
pub fn kernel_synchronised() -> bool {
    // SAFETY: `adjtimex` with `modes == 0` only reads into the zeroed struct we own.
    let mut timex: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut timex) };
    state != libc::TIME_ERROR && state >= 0 && timex.status & libc::STA_UNSYNC == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn a_board_in_1970_is_not_believed_until_gps_time_corrects_it() {
        let clock = Clock::new(Duration::from_secs(2));
        let board = at("1970-01-01T00:05:00Z");
        assert_eq!(clock.stamp_board(board, true), None);
        clock.observe_gps(at("2026-11-26T10:00:00Z"), at("1970-01-01T00:04:00Z"));
        assert_eq!(
            clock.stamp_board(board, false),
            Some((at("2026-11-26T10:01:00Z"), ClockSource::BoardCorrected))
        );
    }

    #[test]
    fn a_board_two_hours_off_is_corrected_and_one_within_the_bound_is_kept() {
        let clock = Clock::new(Duration::from_secs(2));
        let board = at("2026-11-26T08:00:00Z");
        assert_eq!(
            clock.stamp_board(board, true),
            Some((board, ClockSource::Board))
        );
        clock.observe_gps(at("2026-11-26T10:00:00Z"), board);
        assert_eq!(
            clock.stamp_board(board, true),
            Some((at("2026-11-26T10:00:00Z"), ClockSource::BoardCorrected))
        );
        clock.observe_gps(at("2026-11-26T10:00:01Z"), at("2026-11-26T10:00:00Z"));
        assert_eq!(
            clock.stamp_board(board, false),
            Some((board, ClockSource::Board))
        );
    }

    #[test]
    fn an_unsynchronised_board_without_gps_time_is_unverified() {
        let clock = Clock::new(Duration::from_secs(2));
        let board = at("2026-11-26T08:00:00Z");
        assert_eq!(
            clock.stamp_board(board, false),
            Some((board, ClockSource::BoardUnverified))
        );
    }

    #[test]
    fn gps_time_before_the_plausible_floor_is_ignored() {
        let clock = Clock::new(Duration::from_secs(2));
        // A receiver with a week-rollover bug reports a time 1024 weeks early.
        clock.observe_gps(at("2006-04-12T10:00:00Z"), at("2026-11-26T10:00:00Z"));
        assert_eq!(clock.offset(), None);
    }
}
