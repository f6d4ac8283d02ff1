#!/usr/bin/env python3
"""Writes flight.nmea, the NMEA log that tests/gpsd.rs replays through gpsfake: run once,
`python3 make_flight_nmea.py` in this folder, and commit the output.

flight.nmea: one epoch per second, 30 fixes of a drone flying north-east from 47.6205 N,
122.3493 W at 120 m and climbing 0.5 m a second, in three stretches of 10 fixes. An epoch
with a fix is RMC (it carries the date, so gpsd's TPV reports have a time), GGA, GSA (a 3D
fix, 9 satellites used) and three GSV (11 satellites in view). The GGA fix quality is 1
(GPS) in the first stretch, 2 (DGPS) in the second and 4 (RTK fixed) in the third, with 09
satellites in use. Before, between and after the stretches the receiver has no fix: RMC
status V and GGA quality 0, with the time but no position. Positions are written as NMEA writes them: ddmm.mmmm and dddmm.mmmm, so the
log's precision is 0.0001 minute (1/600000 degree); altitude in metres with one decimal.
"""

from datetime import datetime, timedelta, timezone
from functools import reduce

START = datetime(2026, 10, 14, 9, 15, 0, tzinfo=timezone.utc)
HOME_LAT, HOME_LON = 47.6205, -122.3493
# (GGA fix quality, epochs): no fix (6 epochs: gpsd finds the sentences and the date), 10 fixes, no fix, 10 fixes, no fix, 10 fixes, no fix.
STRETCHES = [(0, 6), (1, 10), (0, 8), (2, 10), (0, 8), (4, 10), (0, 3)]
# Satellites in view (PRN, elevation, azimuth, SNR); the first 9 are used in the fix.
SATELLITES = [(2, 45, 120, 40), (5, 30, 60, 38), (7, 60, 200, 42), (9, 15, 300, 30),
              (13, 50, 90, 41), (15, 25, 150, 35), (18, 70, 10, 44), (21, 35, 250, 37),
              (30, 20, 330, 33), (24, 10, 100, 22), (26, 5, 180, 18)]
USED = 9


def sentence(body):
    checksum = reduce(lambda acc, c: acc ^ ord(c), body, 0)
    return f"${body}*{checksum:02X}\r\n"


def angle(value, degree_digits, positive, negative):
    """Degrees as NMEA's d..dmm.mmmm and hemisphere, rounded to 0.0001 minute."""
    hemisphere = positive if value >= 0 else negative
    ten_thousandths = round(abs(value) * 60 * 10000)
    degrees, minutes = divmod(ten_thousandths, 60 * 10000)
    return f"{degrees:0{degree_digits}d}{minutes // 10000:02d}.{minutes % 10000:04d}", hemisphere


def sky():
    """GSA (3D fix, the used satellites, PDOP, HDOP, VDOP) and GSV (every satellite in view,
    four a sentence)."""
    used = [f"{prn:02d}" for prn, *_ in SATELLITES[:USED]]
    text = sentence("GPGSA,A,3," + ",".join(used + [""] * (12 - USED)) + ",1.6,0.9,1.3")
    pages = [SATELLITES[i:i + 4] for i in range(0, len(SATELLITES), 4)]
    for n, page in enumerate(pages, 1):
        fields = ",".join(f"{prn:02d},{el:02d},{az:03d},{snr:02d}" for prn, el, az, snr in page)
        text += sentence(f"GPGSV,{len(pages)},{n},{len(SATELLITES):02d},{fields}")
    return text


def epoch(time, quality, fix):
    hhmmss = time.strftime("%H%M%S") + ".00"
    ddmmyy = time.strftime("%d%m%y")
    if fix is None:
        return (sentence(f"GPRMC,{hhmmss},V,,,,,,,{ddmmyy},,,N")
                + sentence(f"GPGGA,{hhmmss},,,,,0,00,99.99,,,,,,"))
    lat, lon, alt = fix
    lat_text, ns = angle(lat, 2, "N", "S")
    lon_text, ew = angle(lon, 3, "E", "W")
    return (sentence(f"GPRMC,{hhmmss},A,{lat_text},{ns},{lon_text},{ew},19.4,45.0,{ddmmyy},,,A")
            + sentence(f"GPGGA,{hhmmss},{lat_text},{ns},{lon_text},{ew},{quality},{USED:02d},0.9,{alt:.1f},M,-19.0,M,,")
            + sky())


def flight():
    """The epochs of the flight: (time, 0, None) without a fix, (time, GGA quality,
    (lat, lon, alt)) with."""
    epochs, n, t = [], 0, START
    for quality, count in STRETCHES:
        for _ in range(count):
            fix = None
            if quality:
                # About 10 m a second north-east.
                fix = (HOME_LAT + n * 0.000064, HOME_LON + n * 0.000095, 120.0 + n * 0.5)
                n += 1
            epochs.append((t, quality, fix))
            t += timedelta(seconds=1)
    return epochs


if __name__ == "__main__":
    text = "".join(epoch(t, quality, fix) for t, quality, fix in flight())
    with open("flight.nmea", "w", newline="") as out:
        out.write(text)
