"""Drives Microsoft's azure-iot-device client's twin and method API against hub-sim.

As in device.py, the only change made to the SDK is that paho's connect is pointed at the
test hub's port (HUB_SIM_PORT); settings HUB_SIM_PORT, HUB_SIM_CA, HUB_SIM_CONNECTION_STRING,
HUB_SIM_WEBSOCKETS=1 for WebSockets.

Usage: twin_device.py MODE
MODE report JSON: patches the reported properties with JSON (patch_twin_reported_properties),
  then reads the twin (get_twin); prints {"twin": ...}, with {"error": type, "cause": ...} if the
  patch was refused.
MODE serve DESIRED METHODS: sets the desired patch and method handlers, prints {"ready": true},
  then prints {"desired": patch} per desired patch and {"method": name, "payload": ...} per method
  request, answering each method with status 200 and {"echo": payload, "method": name}; exits
  after DESIRED patches and METHODS requests (or 60 s), printing {"done": true}.
Every line is one JSON object.
"""
import json
import os
import sys
import threading

import paho.mqtt.client as mqtt

PORT = int(os.environ["HUB_SIM_PORT"])
_connect = mqtt.Client.connect


def _connect_to_test_port(self, *args, **kwargs):
    kwargs["port"] = PORT
    return _connect(self, *args, **kwargs)


mqtt.Client.connect = _connect_to_test_port

from azure.iot.device import IoTHubDeviceClient, MethodResponse  # noqa: E402


def say(value):
    print(json.dumps(value), flush=True)


def client():
    return IoTHubDeviceClient.create_from_connection_string(
        os.environ["HUB_SIM_CONNECTION_STRING"],
        server_verification_cert=open(os.environ["HUB_SIM_CA"]).read(),
        websockets=os.environ.get("HUB_SIM_WEBSOCKETS") == "1",
        connection_retry=False,
    )


def report(device, patch):
    device.connect()
    try:
        device.patch_twin_reported_properties(patch)
    except Exception as error:  # the SDK's own exception type is the outcome
        cause = error.__cause__
        say(
            {
                "error": type(error).__name__,
                "cause": f"{type(cause).__name__}: {cause}" if cause else None,
                "twin": device.get_twin(),
            }
        )
        return 0
    say({"twin": device.get_twin()})
    return 0


def serve(device, desired, methods):
    lock = threading.Lock()
    left = {"desired": desired, "methods": methods}
    finished = threading.Event()

    def count(kind):
        with lock:
            left[kind] -= 1
            if left["desired"] <= 0 and left["methods"] <= 0:
                finished.set()

    def on_patch(patch):
        say({"desired": patch})
        count("desired")

    def on_method(request):
        say({"method": request.name, "payload": request.payload})
        answer = {"echo": request.payload, "method": request.name}
        device.send_method_response(MethodResponse.create_from_method_request(request, 200, answer))
        count("methods")

    device.connect()
    device.on_twin_desired_properties_patch_received = on_patch
    device.on_method_request_received = on_method
    say({"ready": True, "twin": device.get_twin()})
    if desired <= 0 and methods <= 0:
        finished.set()
    done = finished.wait(60)
    say({"done": done})
    return 0 if done else 1


def main():
    device = client()
    try:
        if sys.argv[1] == "report":
            return report(device, json.loads(sys.argv[2]))
        return serve(device, int(sys.argv[2]), int(sys.argv[3]))
    finally:
        device.shutdown()


if __name__ == "__main__":
    sys.exit(main())
