//! The position source's settings: which source, its address, and the MAVLink signing key;
//! a setting of another source than the one named stops the agent.

use super::{ConfigError, Settings, invalid};
use crate::source::gpsd::GpsdAddress;
use crate::source::{MavlinkAddress, MavlinkConfig, SigningKey, SimConfig, SourceConfig};

impl Settings {
    /// The position source named by `POSITION_SOURCE`, with its settings.
    pub(super) fn source(&self) -> Result<SourceConfig, ConfigError> {
        let source = self
            .position_source
            .as_deref()
            .ok_or(ConfigError::Missing {
                setting: "POSITION_SOURCE",
                hint: "set it to `mavlink` (the flight controller), `gpsd`, or `sim` for a simulated drone",
            })?;
        self.refuse_settings_of_other_sources(source)?;
        match source {
            "mavlink" => {
                let address = self.mavlink_address.clone().ok_or(ConfigError::Missing {
                    setting: "MAVLINK_ADDRESS",
                    hint: "e.g. udpin:0.0.0.0:14550, udpout:127.0.0.1:14550, tcpout:127.0.0.1:5760 or serial:/dev/ttyAMA0:921600",
                })?;
                let address = MavlinkAddress::parse(&address)
                    .map_err(|problem| invalid("MAVLINK_ADDRESS", problem))?;
                if self.mavlink_system_id == Some(0) {
                    return Err(invalid(
                        "MAVLINK_SYSTEM_ID",
                        "0 is the broadcast id, not a vehicle: use 1-255 (the autopilot's SYSID_THISMAV or MAV_SYS_ID)",
                    ));
                }
                Ok(SourceConfig::Mavlink(MavlinkConfig {
                    address,
                    system_id: self.mavlink_system_id,
                    signing_key: self.mavlink_signing_key()?,
                }))
            }
            "gpsd" => Ok(SourceConfig::Gpsd {
                address: match &self.gpsd_address {
                    Some(address) => {
                        address
                            .parse()
                            .map_err(|err: crate::source::gpsd::AddressError| {
                                invalid("GPSD_ADDRESS", err.to_string())
                            })?
                    }
                    None => GpsdAddress::local(),
                },
            }),
            "sim" => {
                let defaults = SimConfig::default();
                let sim = SimConfig {
                    home_lat: self.sim_home_lat.unwrap_or(defaults.home_lat),
                    home_lon: self.sim_home_lon.unwrap_or(defaults.home_lon),
                    seed: self.sim_seed.unwrap_or(defaults.seed),
                    speed_mps: self.sim_speed_mps.unwrap_or(defaults.speed_mps),
                    speedup: self.sim_speedup.unwrap_or(defaults.speedup),
                    ..defaults
                };
                sim.check().map_err(|problem| invalid("SIM_*", problem))?;
                Ok(SourceConfig::Sim(sim))
            }
            other => Err(invalid(
                "POSITION_SOURCE",
                format!("`{other}` is not one of `mavlink`, `gpsd`, `sim`"),
            )),
        }
    }

    /// The key in `MAVLINK_SIGNING_KEY_FILE`, read and checked now.
    fn mavlink_signing_key(&self) -> Result<Option<SigningKey>, ConfigError> {
        const SETTING: &str = "MAVLINK_SIGNING_KEY_FILE";
        let Some(path) = &self.mavlink_signing_key_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|err| invalid(SETTING, format!("cannot read {}: {err}", path.display())))?;
        SigningKey::from_hex(&text)
            .map(Some)
            .map_err(|err| invalid(SETTING, format!("{}: {err}", path.display())))
    }

    /// Refuses a setting of another source than `source` (a `GPSD_ADDRESS` for a MAVLink
    /// agent would otherwise be ignored without a word).
    fn refuse_settings_of_other_sources(&self, source: &str) -> Result<(), ConfigError> {
        let given = [
            ("mavlink", "MAVLINK_ADDRESS", self.mavlink_address.is_some()),
            (
                "mavlink",
                "MAVLINK_SYSTEM_ID",
                self.mavlink_system_id.is_some(),
            ),
            (
                "mavlink",
                "MAVLINK_SIGNING_KEY_FILE",
                self.mavlink_signing_key_file.is_some(),
            ),
            ("gpsd", "GPSD_ADDRESS", self.gpsd_address.is_some()),
            ("sim", "SIM_HOME_LAT", self.sim_home_lat.is_some()),
            ("sim", "SIM_HOME_LON", self.sim_home_lon.is_some()),
            ("sim", "SIM_SEED", self.sim_seed.is_some()),
            ("sim", "SIM_SPEED_MPS", self.sim_speed_mps.is_some()),
            ("sim", "SIM_SPEEDUP", self.sim_speedup.is_some()),
        ];
        if !given.iter().any(|(owner, _, _)| *owner == source) {
            return Ok(());
        }
        match given
            .iter()
            .find(|(owner, _, set)| *set && *owner != source)
        {
            Some((owner, setting, _)) => Err(invalid(
                setting,
                format!(
                    "it is a setting of POSITION_SOURCE={owner}, and this agent reads {source}: remove it, or set POSITION_SOURCE={owner}"
                ),
            )),
            None => Ok(()),
        }
    }
}
