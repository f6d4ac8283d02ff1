"""Drives Microsoft's azure-iot-device ProvisioningDeviceClient against hub-sim's provisioning
service, then its IoTHubDeviceClient against the hub the service assigned.

The SDK dials fixed ports (8883); the only change made here is that paho's connect is pointed
at the test's ports: HUB_SIM_DPS_PORT while registering, HUB_SIM_HUB_PORT once assigned.
Everything else (user names, SAS tokens, topics, polling) is the SDK's own.

Usage: provision.py MODE with settings in the environment:
  HUB_SIM_DPS_PORT, HUB_SIM_HUB_PORT, HUB_SIM_CA (path of ca.pem), HUB_SIM_ID_SCOPE,
  HUB_SIM_REGISTRATION_ID, and either HUB_SIM_GROUP_KEY (a symmetric-key group's primary key:
  the device key is derived here as Microsoft's documentation derives it; HUB_SIM_DEVICE_KEY
  overrides it) or HUB_SIM_CERT (the device's chain, leaf first) and HUB_SIM_KEY (X.509);
  HUB_SIM_WEBSOCKETS=1 for MQTT over WebSockets.
MODE send N: registers with payload {"model": "drone-x"}, then sends N messages {"seq": i}.
MODE refused: registers and expects the service to refuse; prints the error.
Prints one JSON line with the outcome.
"""
import base64
import hashlib
import hmac
import json
import os
import sys

import paho.mqtt.client as mqtt

PORT = {"now": int(os.environ["HUB_SIM_DPS_PORT"])}
_connect = mqtt.Client.connect


def _connect_to_test_port(self, *args, **kwargs):
    kwargs["port"] = PORT["now"]
    return _connect(self, *args, **kwargs)


mqtt.Client.connect = _connect_to_test_port

from azure.iot.device import IoTHubDeviceClient, Message, ProvisioningDeviceClient, X509  # noqa: E402

CA = open(os.environ["HUB_SIM_CA"]).read()
WEBSOCKETS = os.environ.get("HUB_SIM_WEBSOCKETS") == "1"
REGISTRATION_ID = os.environ["HUB_SIM_REGISTRATION_ID"]


def derived_key():
    if "HUB_SIM_DEVICE_KEY" in os.environ:
        return os.environ["HUB_SIM_DEVICE_KEY"]
    group_key = base64.b64decode(os.environ["HUB_SIM_GROUP_KEY"])
    digest = hmac.new(group_key, REGISTRATION_ID.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("utf-8")


def x509():
    return X509(cert_file=os.environ["HUB_SIM_CERT"], key_file=os.environ["HUB_SIM_KEY"])


def provisioning_client():
    common = dict(
        provisioning_host="localhost",
        registration_id=REGISTRATION_ID,
        id_scope=os.environ["HUB_SIM_ID_SCOPE"],
        server_verification_cert=CA,
        websockets=WEBSOCKETS,
    )
    if "HUB_SIM_CERT" in os.environ:
        return ProvisioningDeviceClient.create_from_x509_certificate(x509=x509(), **common)
    return ProvisioningDeviceClient.create_from_symmetric_key(symmetric_key=derived_key(), **common)


def hub_client(result):
    state = result.registration_state
    common = dict(
        hostname=state.assigned_hub,
        device_id=state.device_id,
        server_verification_cert=CA,
        websockets=WEBSOCKETS,
        connection_retry=False,
    )
    if "HUB_SIM_CERT" in os.environ:
        return IoTHubDeviceClient.create_from_x509_certificate(x509=x509(), **common)
    return IoTHubDeviceClient.create_from_symmetric_key(symmetric_key=derived_key(), **common)


def main():
    mode = sys.argv[1]
    client = provisioning_client()
    client.provisioning_payload = {"model": "drone-x"}
    if mode == "refused":
        try:
            result = client.register()
        except Exception as error:  # the SDK's own exception chain is the outcome
            cause = error.__cause__
            print(json.dumps({
                "refused": type(error).__name__,
                "cause": type(cause).__name__ if cause else None,
                "message": str(cause) if cause else str(error),
            }))
            return 0
        print(json.dumps({"refused": None, "status": result.status}))
        return 1
    result = client.register()
    state = result.registration_state
    outcome = {
        "status": result.status,
        "operation_id": result.operation_id,
        "assigned_hub": state.assigned_hub,
        "device_id": state.device_id,
        "substatus": state.sub_status,
        "created": state.created_date_time,
        "etag": state.etag,
        "payload": state.response_payload,
    }
    if result.status != "assigned":
        print(json.dumps(outcome))
        return 1
    PORT["now"] = int(os.environ["HUB_SIM_HUB_PORT"])
    device = hub_client(result)
    device.connect()
    count = int(sys.argv[2])
    for i in range(count):
        message = Message(json.dumps({"seq": i}))
        message.content_type = "application/json"
        message.content_encoding = "utf-8"
        device.send_message(message)
    device.shutdown()
    outcome["sent"] = count
    print(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
