#!/usr/bin/env python3
"""Writes flight.nmea, the NMEA log that tests/gpsd.rs replays through gpsfake: run once,
`python3 make_flight_nmea.py` in this folder, and commit the output.

flight.nmea: one RMC and one GGA sentence per second (RMC carries the date, so gpsd's TPV
reports have a time), 30 fixes of a drone flying north-east from 47.6205 N, 122.3493 W
at 120 m and climbing 0.5 m a second, in three stretches of 10 fixes. Before, between and
after the stretches the receiver has no fix: RMC status V and GGA quality 0, with the time
but no position. Positions are written as NMEA writes them: ddmm.mmmm and dddmm.mmmm, so the
log's precision is 0.0001 minute (1/600000 degree); altitude in metres with one decimal.
"""

from datetime import datetime, timedelta, timezone
from functools import reduce

START = datetime(2026, 10, 14, 9, 15, 0, tzinfo=timezone.utc)
HOME_LAT, HOME_LON = 47.6205, -122.3493
# (fix?, epochs): no fix (6 epochs: gpsd finds the sentences and the date), 10 fixes, no fix, 10 fixes, no fix, 10 fixes, no fix.
STRETCHES = [(False, 6), (True, 10), (False, 8), (True, 10), (False, 8), (True, 10), (False, 3)]


def sentence(body):
    checksum = reduce(lambda acc, c: acc ^ ord(c), body, 0)
    return f"${body}*{checksum:02X}\r\n"


def angle(value, degree_digits, positive, negative):
    """Degrees as NMEA's d..dmm.mmmm and hemisphere, rounded to 0.0001 minute."""
    hemisphere = positive if value >= 0 else negative
    ten_thousandths = round(abs(value) * 60 * 10000)
    degrees, minutes = divmod(ten_thousandths, 60 * 10000)
    return f"{degrees:0{degree_digits}d}{minutes // 10000:02d}.{minutes % 10000:04d}", hemisphere


def epoch(time, fix):
    hhmmss = time.strftime("%H%M%S") + ".00"
    ddmmyy = time.strftime("%d%m%y")
    if fix is None:
        return (sentence(f"GPRMC,{hhmmss},V,,,,,,,{ddmmyy},,,N")
                + sentence(f"GPGGA,{hhmmss},,,,,0,00,99.99,,,,,,"))
    lat, lon, alt = fix
    lat_text, ns = angle(lat, 2, "N", "S")
    lon_text, ew = angle(lon, 3, "E", "W")
    return (sentence(f"GPRMC,{hhmmss},A,{lat_text},{ns},{lon_text},{ew},19.4,45.0,{ddmmyy},,,A")
            + sentence(f"GPGGA,{hhmmss},{lat_text},{ns},{lon_text},{ew},1,09,0.9,{alt:.1f},M,-19.0,M,,"))


def flight():
    """The epochs of the flight: (time, None) without a fix, (time, (lat, lon, alt)) with."""
    epochs, n, t = [], 0, START
    for has_fix, count in STRETCHES:
        for _ in range(count):
            fix = None
            if has_fix:
                # About 10 m a second north-east.
                fix = (HOME_LAT + n * 0.000064, HOME_LON + n * 0.000095, 120.0 + n * 0.5)
                n += 1
            epochs.append((t, fix))
            t += timedelta(seconds=1)
    return epochs


if __name__ == "__main__":
    text = "".join(epoch(t, fix) for t, fix in flight())
    with open("flight.nmea", "w", newline="") as out:
        out.write(text)
