#!/usr/bin/env python3
"""A flight controller for the agent's MAVLink tests, made of pymavlink's own encoder.

Plays an ArduPilot/PX4-like autopilot (or several, sharing one link): a HEARTBEAT at
1 Hz from component 1 (autopilot ArduPilot), right after it a SYSTEM_TIME (when
--system-time is given), and at --rate Hz a SYS_STATUS (battery) and a position
(GLOBAL_POSITION_INT or GPS_RAW_INT), walking a route of --points distinct points in a
loop. Every vehicle has its own route, battery and boot time; their positions go out in
a random order every cycle (--seed).

Links (one of):
  --udpout HOST:PORT    send to the agent (the agent listens: its udpin:)
  --udpin HOST:PORT     listen; send to whoever sent last (port 0: any free port)
  --server HOST:PORT    a mavlink-router server-mode endpoint: listen, and send only to the
                        peers that have sent us a packet (the agent's udpout:)
  --tcp-listen HOST:PORT  accept one TCP client at a time (the agent's tcpout:)
  --serial-pty          a pseudo-terminal pair in raw mode; the agent opens the slave
                        (its serial:PATH:921600); unread output is dropped, as on a wire

Standard output, one JSON object a line, flushed:
  {"ev":"ready","link":...,"address":"HOST:PORT"|null,"device":PATH|null}
  {"ev":"sent","t":S,"sys":N,"comp":N,"msg":NAME,"v":1|2,"signed":B,"key":K,"fields":{...}}
      printed before the bytes leave, so a test that saw the effect has the line;
      "delivered": false when no peer could be sent to (nobody connected yet); "key" the
      passphrase of the signing key (null: unsigned)
  {"ev":"garbage","t":S,"kind":"random"|"bad_crc"|"prefix","sys":N,"fields":{...}}
      bad_crc: a GLOBAL_POSITION_INT whose checksum was broken (fields: what it carried)
  {"ev":"received","t":S,"sys":N,"comp":N,"msg":NAME,"v":1|2,"signed":B,"fields":{...},
   "signing":{...}}
  {"ev":"bad_input","t":S,"reason":...,"signing":{...}}   bytes we could not read
      "signing" (with --verify-signed): pymavlink's counts of what it checked so far,
      {"goodsig":N,"badsig":N,"unsigned":N,"reject":N}
  {"ev":"started","sys":N}  a held vehicle started (stdin `start N`)
  {"ev":"withheld","t":S,"sys":N,"fields":{...}}  a signed position made and kept back
  {"ev":"replayed","t":S,"sys":N,"kind":"withheld"|"repeat","msg":NAME,"fields":{...}}
t is this process's monotonic clock in seconds.

Standard input: `start SYSID` starts a vehicle given with `hold`; `withhold SYSID` signs a
GLOBAL_POSITION_INT at a place of no route and keeps it; `replay SYSID` sends it (later
frames of the vehicle carry newer signing timestamps); `repeat SYSID` sends the vehicle's
last frame again, byte for byte. End of input (or SIGTERM) ends the program with status 0.

Signing (MAVLink 2): --signed PASSPHRASE signs every vehicle's frames with
sha256(PASSPHRASE), on link id = the vehicle's index, with a timestamp that follows the
clock as autopilots keep it (never behind the last one sent); --verify-signed checks what
the agent sends with that key too, unsigned frames refused.

Vehicles: --vehicle SPEC, repeated; SPEC is SYSID followed by comma-separated options:
  battery=PCT     SYS_STATUS.battery_remaining (default 90 - SYSID)
  position=global|gps_raw|none   what carries the position (default global)
  gps_health      with position=global: a GPS_RAW_INT right after each GLOBAL_POSITION_INT,
                  its fix_type, satellites_visible and h_acc changing along the route
                  (every GPS_FIX_TYPE, unknown satellites and h_acc 0 included; eph is
                  an HDOP of 0.9)
  autopilot=N     HEARTBEAT.autopilot (default 3, ArduPilot; 8 = invalid, not an autopilot)
  comp=N          component id (default 1)
  hold            send nothing until stdin says `start SYSID`
  key=PASSPHRASE  sign with sha256(PASSPHRASE) instead of --signed's key; key=none: unsigned
  stale=SECONDS   sign with a clock this far behind (a recording played back)
  route=N         a route N * 10 degrees south of the one its ids give (an impostor using
                  the ids of another vehicle: its positions are told apart)
"""

import argparse
import hashlib
import math
import os
import random
import selectors
import signal
import sys
import time

from pymavlink.dialects.v10 import ardupilotmega as apm_v1
from pymavlink.dialects.v10 import common as common_v1
from pymavlink.dialects.v20 import ardupilotmega as apm_v2
from pymavlink.dialects.v20 import common as common_v2

from mavlink_link import Link, emit, now

# pymavlink's mavutil picks one of these modules from MAVLINK20 (and MAVLINK_DIALECT) at
# import; holding both lets one process send either version and read both.
DIALECTS = {1: (common_v1, apm_v1), 2: (common_v2, apm_v2)}

MAV_TYPE_QUADROTOR = 2
MAV_AUTOPILOT_ARDUPILOTMEGA = 3
GPS_FIX_TYPE_3D_FIX = 3
GPS_FIX_TYPE_NO_FIX = 1
# GPS_FIX_TYPE in the order gps_health cycles through: 3D, DGPS, RTK float, RTK fixed,
# 2D, no fix, static, PPP, no GPS.
GPS_HEALTH_FIX_TYPES = (3, 4, 5, 6, 2, 1, 7, 8, 0)
UNKNOWN_U8 = 255
UNKNOWN_U16 = 65535
# Unix time of 2015-01-01, the epoch of MAVLink 2 signing timestamps.
SIGNING_EPOCH = 1420070400


class Capture:
    """The file pymavlink's MAVLink.send writes to: keeps the last frame."""

    def __init__(self):
        self.frame = b""

    def write(self, data):
        self.frame = bytes(data)


class Vehicle:
    def __init__(self, spec, args, index):
        parts = spec.split(",")
        self.sysid = int(parts[0])
        self.battery = 90 - self.sysid
        self.position = "global"
        self.autopilot = MAV_AUTOPILOT_ARDUPILOTMEGA
        self.compid = 1
        self.held = False
        self.gps_health = False
        self.key = args.signed
        self.stale = 0.0
        self.route_offset = 0
        for part in parts[1:]:
            key, _, value = part.partition("=")
            if key == "battery":
                self.battery = int(value)
            elif key == "position":
                assert value in ("global", "gps_raw", "none"), value
                self.position = value
            elif key == "autopilot":
                self.autopilot = int(value)
            elif key == "comp":
                self.compid = int(value)
            elif key == "hold":
                self.held = True
            elif key == "gps_health":
                self.gps_health = True
            elif key == "key":
                self.key = None if value == "none" else value
            elif key == "stale":
                self.stale = float(value)
            elif key == "route":
                self.route_offset = int(value)
            else:
                raise SystemExit(f"unknown vehicle option {part!r}")
        if self.gps_health and args.mavlink != 2:
            raise SystemExit("gps_health needs --mavlink 2: h_acc is a MAVLink 2 extension")
        common, apm = DIALECTS[args.mavlink]
        self.version = args.mavlink
        self.capture = Capture()
        self.mav = common.MAVLink(self.capture, srcSystem=self.sysid, srcComponent=self.compid)
        # Messages outside the common set go through the ArduPilot dialect, with the
        # same sequence numbers.
        self.apm = apm.MAVLink(self.capture, srcSystem=self.sysid, srcComponent=self.compid)
        if self.key is not None and args.mavlink != 2:
            raise SystemExit("signing needs --mavlink 2")
        if self.key is not None:
            # What mavutil's mavfile.setup_signing does: key, outgoing signing, link id,
            # and a timestamp in 10 µs units since 2015-01-01.
            signing = self.mav.signing
            signing.secret_key = hashlib.sha256(self.key.encode()).digest()
            signing.sign_outgoing = True
            signing.link_id = index
            signing.timestamp = self.signing_clock()
            self.apm.signing = signing
        self.withheld = None
        self.last_frame = None
        self.last_sent = None
        # Each vehicle booted at its own moment before us.
        self.boot = time.monotonic() - 5.0 - 7.3 * index
        self.step = 0
        self.points = args.points
        self.index = index

    def boot_ms(self):
        return int((time.monotonic() - self.boot) * 1000)

    def signing_clock(self):
        """The signing timestamp of this vehicle's clock now (10 µs units since 2015)."""
        return int((time.time() - self.stale - SIGNING_EPOCH) * 100 * 1000)

    def keep_signing_time(self):
        """Before a send: the signing timestamp follows the clock, as an autopilot's does
        (pymavlink itself only adds 1 a frame), never going back."""
        if self.key is not None:
            self.mav.signing.timestamp = max(self.mav.signing.timestamp, self.signing_clock())

    def route(self, i):
        """The i-th point of this vehicle's route: distinct for every i < points and
        every vehicle (system and component); some values say "unknown"."""
        s, k = self.sysid, i % self.points
        lat = 476_200_000 + 1_000_000 * s + 100_000 * (self.compid - 1) + 1_234 * k + 7
        lat -= 100_000_000 * self.route_offset
        lon = -1_223_400_000 - 1_000_000 * s - 987 * k - 3
        alt = 120_000 + 250 * k + 13 * s
        vx = 300 + 17 * k - 40 * s
        vy = -400 + 29 * k
        hdg = UNKNOWN_U16 if k == 3 else (1_000 * k + 37 * s + 5) % 36_000
        return lat, lon, alt, vx, vy, hdg


def fields_of(message):
    out = {}
    for name in message.get_fieldnames():
        value = getattr(message, name)
        if isinstance(value, (bytes, bytearray)):
            value = value.hex()
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        elif isinstance(value, list):
            value = list(value)
        out[name] = value
    return out


class FlightController:
    def __init__(self, args):
        self.args = args
        self.selector = selectors.DefaultSelector()
        self.link = Link(args, self.selector)
        self.vehicles = [Vehicle(spec, args, i) for i, spec in enumerate(args.vehicle or ["1"])]
        self.rng = random.Random(args.seed)
        self.parser = common_v2.MAVLink(None)
        self.parser.robust_parsing = True
        self.verify = args.verify_signed
        if self.verify:
            # As a flight controller that requires signing: the key, its clock, and no
            # unsigned message accepted.
            signing = self.parser.signing
            signing.secret_key = hashlib.sha256(args.signed.encode()).digest()
            signing.timestamp = int((time.time() - SIGNING_EPOCH) * 100 * 1000)
            signing.allow_unsigned_callback = lambda mav, msg_id: False
        self.system_time_offset_us = None
        if args.system_time is not None:
            # UNIX time = monotonic time + offset, the same for every vehicle.
            if args.system_time == "now":
                unix = time.time()
            elif args.system_time.startswith("offset:"):
                unix = time.time() + float(args.system_time[len("offset:"):])
            else:
                unix = float(args.system_time)
            self.system_time_offset_us = int(unix * 1e6) - int(time.monotonic() * 1e6)
        self.cycle = 0
        os.set_blocking(sys.stdin.fileno(), False)
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
        self.stdin_buffer = b""
        self.running = True

    def unix_us(self, vehicle):
        """The vehicle's GPS time in µs, whole milliseconds, from its boot time."""
        boot_ms = vehicle.boot_ms()
        boot_us = int(vehicle.boot * 1e6) + boot_ms * 1000
        return boot_ms, (boot_us + self.system_time_offset_us) // 1000 * 1000

    def send(self, vehicle, message, mav=None):
        mav = mav or vehicle.mav
        vehicle.keep_signing_time()
        mav.send(message)
        frame = vehicle.capture.frame
        signed = vehicle.version == 2 and bool(frame[2] & 0x01)
        delivered = self.link.can_send()
        emit(
            "sent",
            t=now(),
            sys=vehicle.sysid,
            comp=vehicle.compid,
            msg=message.get_type(),
            v=vehicle.version,
            signed=signed,
            key=vehicle.key,
            delivered=delivered,
            fields=fields_of(message),
        )
        vehicle.last_frame = frame
        vehicle.last_sent = (message.get_type(), fields_of(message))
        if delivered:
            self.link.send(frame)
        return frame

    def withhold(self, vehicle):
        """Signs a position at a place of no route now, and keeps it back."""
        vehicle.keep_signing_time()
        message = vehicle.mav.global_position_int_encode(
            vehicle.boot_ms(), -270_000_000 - vehicle.sysid, 1_530_000_000, 7_000, 0, 100, 100, 0, 4_500
        )
        vehicle.mav.send(message)
        vehicle.withheld = (vehicle.capture.frame, fields_of(message))
        emit("withheld", t=now(), sys=vehicle.sysid, fields=fields_of(message))

    def replay(self, vehicle, kind):
        """Sends the withheld frame, or the last one again."""
        if kind == "withheld":
            frame, fields = vehicle.withheld
            msg = "GLOBAL_POSITION_INT"
        else:
            frame = vehicle.last_frame
            msg, fields = vehicle.last_sent
        emit("replayed", t=now(), sys=vehicle.sysid, kind=kind, msg=msg, fields=fields)
        self.link.send(frame)

    def heartbeat(self, vehicle):
        mav = vehicle.mav
        self.send(vehicle, mav.heartbeat_encode(MAV_TYPE_QUADROTOR, vehicle.autopilot, 0, 0, 4))
        if self.system_time_offset_us is not None:
            boot_ms, unix_us = self.unix_us(vehicle)
            # Both fields describe the same instant: UNIX time = boot time + a constant.
            self.send(vehicle, mav.system_time_encode(unix_us, boot_ms))

    def position(self, vehicle):
        mav = vehicle.mav
        self.send(
            vehicle,
            mav.sys_status_encode(0, 0, 0, 250, 15_800, 1_200, vehicle.battery, 0, 0, 0, 0, 0, 0),
        )
        lat, lon, alt, vx, vy, hdg = vehicle.route(vehicle.step)
        if vehicle.position == "global":
            self.send(
                vehicle,
                mav.global_position_int_encode(vehicle.boot_ms(), lat, lon, alt, alt - 20_000, vx, vy, 0, hdg),
            )
            if vehicle.gps_health:
                k = vehicle.step % vehicle.points
                fix = GPS_HEALTH_FIX_TYPES[k % len(GPS_HEALTH_FIX_TYPES)]
                sats = UNKNOWN_U8 if k % 7 == 3 else 6 + k % 10
                h_acc = 0 if k % 5 == 2 else 300 + 150 * k
                self.send(
                    vehicle,
                    mav.gps_raw_int_encode(
                        vehicle.boot_ms() * 1000, fix, lat, lon, alt, 90, 150,
                        int(math.hypot(vx, vy)), hdg, sats, h_acc=h_acc,
                    ),
                )
        elif vehicle.position == "gps_raw":
            k = vehicle.step % vehicle.points
            # Every fifth point has no fix (and coordinates that must never be published).
            fix = GPS_FIX_TYPE_NO_FIX if k % 5 == 4 else GPS_FIX_TYPE_3D_FIX
            vel = UNKNOWN_U16 if k == 6 else int(math.hypot(vx, vy))
            cog = UNKNOWN_U16 if k == 3 else hdg
            if self.system_time_offset_us is None:
                # Autopilots without GPS time put their boot time here.
                time_usec = vehicle.boot_ms() * 1000
            else:
                time_usec = self.unix_us(vehicle)[1]
            self.send(vehicle, mav.gps_raw_int_encode(time_usec, fix, lat, lon, alt, 90, 150, vel, cog, 14))
        if self.args.unknown_messages:
            apm = vehicle.apm
            apm.seq = vehicle.mav.seq
            self.send(vehicle, apm.ekf_status_report_encode(0x1FF, 0.1, 0.2, 0.3, 0.05, 0.0), mav=apm)
            vehicle.mav.seq = apm.seq
        vehicle.step += 1

    def garbage(self, vehicle):
        """Stray bytes and a broken frame between good frames."""
        if not self.link.can_send():
            return
        kind = ("random", "bad_crc", "prefix")[self.cycle // self.args.garbage_every % 3]
        if kind == "random":
            data = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 40)))
            emit("garbage", t=now(), kind=kind, sys=vehicle.sysid, bytes=len(data))
            self.link.send(data)
        elif kind == "bad_crc":
            # A well-formed position far from every route, with its checksum broken.
            mav = vehicle.mav
            message = mav.global_position_int_encode(vehicle.boot_ms(), -337_000_000, 1_512_000_000, 5_000, 0, 100, 100, 0, 9_000)
            mav.send(message)
            frame = bytearray(vehicle.capture.frame)
            crc_at = len(frame) - (15 if vehicle.version == 2 and frame[2] & 0x01 else 2)
            frame[crc_at] ^= 0x5A
            emit("garbage", t=now(), kind=kind, sys=vehicle.sysid, fields=fields_of(message))
            self.link.send(bytes(frame))
        else:
            # Stray bytes (no start marker) right before a good frame, in one write.
            data = bytes(self.rng.choice([b for b in range(256) if b not in (0xFD, 0xFE)]) for _ in range(17))
            emit("garbage", t=now(), kind=kind, sys=vehicle.sysid, bytes=len(data))
            self.link.send(data)

    def signing_counts(self):
        if not self.verify:
            return {}
        signing = self.parser.signing
        return {
            "signing": {
                "goodsig": signing.goodsig_count,
                "badsig": signing.badsig_count,
                "unsigned": signing.unsigned_count,
                "reject": signing.reject_count,
            }
        }

    def on_bytes(self, data):
        if not data:
            return
        for message in self.parser.parse_buffer(data) or []:
            if message.get_type() == "BAD_DATA":
                emit("bad_input", t=now(), reason=str(getattr(message, "reason", "")), **self.signing_counts())
                continue
            buf = message.get_msgbuf()
            emit(
                "received",
                t=now(),
                sys=message.get_srcSystem(),
                comp=message.get_srcComponent(),
                msg=message.get_type(),
                v=2 if buf and buf[0] == 0xFD else 1,
                signed=message.get_signed(),
                fields=fields_of(message),
                **self.signing_counts(),
            )

    def on_stdin(self):
        try:
            data = os.read(sys.stdin.fileno(), 4096)
        except BlockingIOError:
            return
        if not data:
            self.running = False
            return
        self.stdin_buffer += data
        while b"\n" in self.stdin_buffer:
            line, _, self.stdin_buffer = self.stdin_buffer.partition(b"\n")
            words = line.decode().split()
            if words[:1] == ["start"] and len(words) == 2:
                for vehicle in self.vehicles:
                    if vehicle.sysid == int(words[1]):
                        vehicle.held = False
                emit("started", sys=int(words[1]))
            elif words[:1] in (["withhold"], ["replay"], ["repeat"]) and len(words) == 2:
                for vehicle in self.vehicles:
                    if vehicle.sysid == int(words[1]):
                        if words[0] == "withhold":
                            self.withhold(vehicle)
                        else:
                            self.replay(vehicle, "withheld" if words[0] == "replay" else "repeat")
            elif words[:1] == ["stop"]:
                self.running = False

    def run(self):
        period = 1.0 / self.args.rate
        next_position = time.monotonic()
        next_heartbeat = time.monotonic()
        while self.running:
            current = time.monotonic()
            if current >= next_heartbeat:
                for vehicle in self.vehicles:
                    if not vehicle.held:
                        self.heartbeat(vehicle)
                next_heartbeat += 1.0
                if next_heartbeat < current:
                    next_heartbeat = current + 1.0
            if current >= next_position:
                # Vehicles in a new order every cycle, so that the newest position on the
                # link is any vehicle's.
                for vehicle in self.rng.sample(self.vehicles, len(self.vehicles)):
                    if not vehicle.held:
                        if self.args.garbage_every and self.cycle % self.args.garbage_every == 0:
                            self.garbage(vehicle)
                        self.position(vehicle)
                self.cycle += 1
                next_position += period
                if next_position < current:
                    next_position = current + period
            timeout = max(0.0, min(next_heartbeat, next_position) - time.monotonic())
            for key, _ in self.selector.select(timeout):
                if key.data == "stdin":
                    self.on_stdin()
                else:
                    self.on_bytes(self.link.on_ready(key.data))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    link = parser.add_mutually_exclusive_group(required=True)
    link.add_argument("--udpout", metavar="HOST:PORT")
    link.add_argument("--udpin", metavar="HOST:PORT")
    link.add_argument("--server", metavar="HOST:PORT")
    link.add_argument("--tcp-listen", metavar="HOST:PORT")
    link.add_argument("--serial-pty", action="store_true")
    parser.add_argument("--mavlink", type=int, choices=(1, 2), default=2)
    parser.add_argument("--vehicle", action="append", metavar="SPEC")
    parser.add_argument("--points", type=int, default=30, help="distinct points of each route")
    parser.add_argument("--rate", type=float, default=10.0, help="positions per second")
    parser.add_argument("--system-time", metavar="now|offset:SECONDS|UNIX_SECONDS")
    parser.add_argument("--signed", metavar="PASSPHRASE", help="sign v2 frames with sha256(PASSPHRASE)")
    parser.add_argument("--verify-signed", action="store_true", help="accept only what is signed with --signed's key")
    parser.add_argument("--garbage-every", type=int, default=0, metavar="N", help="garbage before every N-th position")
    parser.add_argument("--unknown-messages", action="store_true", help="also send EKF_STATUS_REPORT (ArduPilot dialect)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.signed is not None and args.mavlink != 2:
        parser.error("--signed needs --mavlink 2")
    if args.verify_signed and args.signed is None:
        parser.error("--verify-signed needs --signed")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        FlightController(args).run()
    except (KeyboardInterrupt, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
