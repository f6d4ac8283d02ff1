"""Connects a device over MQTT/TLS with paho (the MQTT client azure-iot-device uses) to check
the hub's own rules, which the SDK never breaks on purpose.

Environment: HUB_SIM_PORT, HUB_SIM_CA, HUB_SIM_CONNECTION_STRING, HUB_SIM_TTL (token lifetime,
seconds; default 3600).
Modes, each printing one JSON line:
  expiry       stays connected until the hub disconnects it: {"connected", "disconnected_after", "expiry_in"}
  wrong-topic  publishes to another device's topic        -> {"connected", "disconnected"}
  qos2         publishes with QoS 2                        -> {"connected", "disconnected"}
  too-large    publishes 256 KB + 1 byte                   -> {"connected", "disconnected"}
  takeover     a second connection of the same device      -> {"first_disconnected", "second_connected"}
"""
import base64
import hashlib
import hmac
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse

import paho.mqtt.client as mqtt

FIELDS = dict(part.split("=", 1) for part in os.environ["HUB_SIM_CONNECTION_STRING"].split(";"))
HOST, DEVICE, KEY = FIELDS["HostName"], FIELDS["DeviceId"], FIELDS["SharedAccessKey"]
TTL = int(os.environ.get("HUB_SIM_TTL", "3600"))


def token(expiry):
    resource = urllib.parse.quote(f"{HOST}/devices/{DEVICE}", safe="")
    signature = base64.b64encode(
        hmac.new(base64.b64decode(KEY), f"{resource}\n{expiry}".encode(), hashlib.sha256).digest()
    ).decode()
    return "SharedAccessSignature sr={}&sig={}&se={}".format(
        resource, urllib.parse.quote(signature, safe=""), expiry
    )


class Device:
    def __init__(self, expiry):
        self.connected, self.disconnected = threading.Event(), threading.Event()
        self.client = mqtt.Client(client_id=DEVICE, protocol=mqtt.MQTTv311)
        self.client.username_pw_set(f"{HOST}/{DEVICE}/?api-version=2021-04-12", token(expiry))
        self.client.tls_set(ca_certs=os.environ["HUB_SIM_CA"], tls_version=ssl.PROTOCOL_TLSv1_2)
        self.client.on_connect = lambda c, u, f, rc: rc == 0 and self.connected.set()
        self.client.on_disconnect = lambda c, u, rc: self.disconnected.set()
        # No automatic reconnection: a reconnect would itself replace the other connection.
        self.client.reconnect_delay_set(min_delay=3600, max_delay=3600)
        self.client.connect(HOST, int(os.environ["HUB_SIM_PORT"]), keepalive=60)
        self.client.loop_start()
        self.connected.wait(30)

    def stop(self):
        self.client.loop_stop()


def main():
    mode = sys.argv[1]
    started = time.time()
    expiry = int(started) + TTL
    device = Device(expiry)
    if mode == "expiry":
        device.disconnected.wait(TTL + 30)
        outcome = {
            "connected": device.connected.is_set(),
            "disconnected_after": round(time.time() - started, 2) if device.disconnected.is_set() else None,
            "expiry_in": expiry - started,
        }
    elif mode == "takeover":
        second = Device(expiry)
        device.disconnected.wait(30)
        outcome = {
            "first_disconnected": device.disconnected.is_set(),
            "second_connected": second.connected.is_set() and not second.disconnected.is_set(),
        }
        second.stop()
    else:
        topic, qos, payload = {
            "wrong-topic": ("devices/someone-else/messages/events/", 1, b"x"),
            "qos2": (f"devices/{DEVICE}/messages/events/", 2, b"x"),
            "too-large": (f"devices/{DEVICE}/messages/events/", 1, b"x" * (256 * 1024 + 1)),
        }[mode]
        device.client.publish(topic, payload, qos=qos)
        device.disconnected.wait(30)
        outcome = {"connected": device.connected.is_set(), "disconnected": device.disconnected.is_set()}
    device.stop()
    print(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
