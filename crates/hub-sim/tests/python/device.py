"""Drives Microsoft's azure-iot-device client against hub-sim.

The SDK dials fixed ports (8883, or 443 for WebSockets); the only change made here is that
paho's connect is pointed at the test hub's port (HUB_SIM_PORT). Everything else, from the
user name and SAS token to the topic and property bag, is the SDK's own.

Usage: device.py MODE  with settings in the environment:
  HUB_SIM_PORT, HUB_SIM_CA (path of ca.pem), HUB_SIM_WEBSOCKETS=1 for WebSockets, and either
  HUB_SIM_CONNECTION_STRING (SAS) or HUB_SIM_HOST, HUB_SIM_DEVICE_ID, HUB_SIM_CERT, HUB_SIM_KEY (X.509).
MODE send N: sends N messages {"seq": i} with custom properties seq and kind=position.
MODE refused: connects and expects the hub to refuse; prints the error's type.
Prints one JSON line with the outcome.
"""
import json
import os
import sys

import paho.mqtt.client as mqtt

PORT = int(os.environ["HUB_SIM_PORT"])
_connect = mqtt.Client.connect


def _connect_to_test_port(self, *args, **kwargs):
    kwargs["port"] = PORT
    return _connect(self, *args, **kwargs)


mqtt.Client.connect = _connect_to_test_port

from azure.iot.device import IoTHubDeviceClient, Message, X509  # noqa: E402


def client():
    ca = open(os.environ["HUB_SIM_CA"]).read()
    websockets = os.environ.get("HUB_SIM_WEBSOCKETS") == "1"
    common = dict(server_verification_cert=ca, websockets=websockets, connection_retry=False)
    if "HUB_SIM_CONNECTION_STRING" in os.environ:
        return IoTHubDeviceClient.create_from_connection_string(
            os.environ["HUB_SIM_CONNECTION_STRING"], **common
        )
    x509 = X509(cert_file=os.environ["HUB_SIM_CERT"], key_file=os.environ["HUB_SIM_KEY"])
    return IoTHubDeviceClient.create_from_x509_certificate(
        x509=x509,
        hostname=os.environ["HUB_SIM_HOST"],
        device_id=os.environ["HUB_SIM_DEVICE_ID"],
        **common,
    )


def main():
    mode = sys.argv[1]
    device = client()
    if mode == "refused":
        try:
            device.connect()
        except Exception as error:  # the SDK's own exception type is the outcome
            print(json.dumps({"refused": type(error).__name__}))
            return 0
        device.shutdown()
        print(json.dumps({"refused": None}))
        return 1
    count = int(sys.argv[2])
    device.connect()
    for i in range(count):
        message = Message(json.dumps({"seq": i}))
        message.content_type = "application/json"
        message.content_encoding = "utf-8"
        message.custom_properties["seq"] = str(i)
        message.custom_properties["kind"] = "position"
        device.send_message(message)
    device.shutdown()
    print(json.dumps({"sent": count}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
