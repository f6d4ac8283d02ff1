//! The GNSS health of a position: fix type, satellites and horizontal accuracy.
//!
//! Owns [`Gnss`] (every member optional: a source gives what it knows, never a guess),
//! the closed set of fix types [`FixType`] and their wire names, and the health's
//! validation rules. The members travel flat in the version 1 message (`fix`, `sats`,
//! `satsVisible`, `hAccM`) and as one `gnss` object in the documents.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};

use super::Invalid;

/// The GNSS health a source reported with a position. [`Gnss::default`] knows nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gnss {
    /// The type of fix the receiver had (`fix`).
    pub fix: Option<FixType>,
    /// Satellites used in the fix (`sats`).
    pub sats: Option<u8>,
    /// Satellites visible, used or not (`satsVisible`): what a source that does not say
    /// how many it used reports instead (MAVLink's `satellites_visible`).
    pub sats_visible: Option<u8>,
    /// Horizontal position accuracy in metres, as the receiver estimates it (`hAccM`).
    /// Its confidence is the receiver's own (MAVLink `h_acc`: unspecified; gpsd `eph`: 95 %
    /// in gpsd's documentation of epx/epy). Never a dilution of precision.
    pub h_acc_m: Option<f64>,
}

impl Gnss {
    /// Whether the source reported nothing.
    pub fn is_empty(&self) -> bool {
        *self == Gnss::default()
    }

    /// Checks the accuracy: a finite number, not negative.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        match self.h_acc_m {
            Some(value) if !value.is_finite() => Err(Invalid::NotFinite { field: "hAccM" }),
            Some(value) if value < 0.0 => Err(Invalid::Accuracy { value }),
            _ => Ok(()),
        }
    }
}

/// Reads the documents' `gnss` object (members named as on the wire, each optional; a
/// fix name this reader does not know is absent), e.g. to import exported documents.
impl<'de> Deserialize<'de> for Gnss {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Members<'a> {
            #[serde(borrow)]
            fix: Option<Cow<'a, str>>,
            sats: Option<u8>,
            sats_visible: Option<u8>,
            h_acc_m: Option<f64>,
        }
        let members = Members::deserialize(deserializer)?;
        let gnss = Gnss {
            fix: members.fix.as_deref().and_then(FixType::from_wire),
            sats: members.sats,
            sats_visible: members.sats_visible,
            h_acc_m: members.h_acc_m,
        };
        gnss.validate().map_err(serde::de::Error::custom)?;
        Ok(gnss)
    }
}

/// A GNSS fix type: the types both MAVLink's `GPS_FIX_TYPE` and gpsd's TPV `mode` and
/// `status` express. Anything else a source reports (MAVLink `NO_GPS`, `STATIC`, `PPP`;
/// gpsd mode 0, dead reckoning, simulated, time only) has no type here and is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FixType {
    /// No fix (`"none"`).
    None,
    /// A 2D fix, no altitude (`"2d"`).
    Fix2d,
    /// A 3D fix (`"3d"`).
    Fix3d,
    /// A 3D fix aided by differential corrections, DGPS or SBAS (`"dgps"`).
    Dgps,
    /// RTK with float ambiguities (`"rtkFloat"`).
    RtkFloat,
    /// RTK with fixed ambiguities (`"rtkFixed"`).
    RtkFixed,
}

impl FixType {
    /// Every fix type.
    pub const ALL: [FixType; 6] = [
        FixType::None,
        FixType::Fix2d,
        FixType::Fix3d,
        FixType::Dgps,
        FixType::RtkFloat,
        FixType::RtkFixed,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            FixType::None => "none",
            FixType::Fix2d => "2d",
            FixType::Fix3d => "3d",
            FixType::Dgps => "dgps",
            FixType::RtkFloat => "rtkFloat",
            FixType::RtkFixed => "rtkFixed",
        }
    }

    /// The fix type of a wire name; `None` for a name this reader does not know (a newer
    /// device may know more types: the position stands, without a fix type).
    pub fn from_wire(name: &str) -> Option<FixType> {
        FixType::ALL.into_iter().find(|fix| fix.as_str() == name)
    }
}
