"""Drives Microsoft's azure-iot-hub service client (IoTHubRegistryManager) against hub-sim.

The SDK dials https://{HostName} on 443 with requests; the only change made here is that
urllib3's connection is pointed at the test hub's HTTPS port (HUB_SIM_PORT). The hub's CA is
trusted through REQUESTS_CA_BUNDLE. Settings: HUB_SIM_PORT, HUB_SIM_SERVICE_CONNECTION_STRING.

Usage: service.py MODE DEVICE [ARGS]
MODE get: prints {"twin": ...} (get_twin).
MODE desired JSON [ETAG]: update_twin with the desired patch JSON (If-Match ETAG, default "*");
  prints {"twin": ...}.
MODE invoke NAME JSON RESPONSE_TIMEOUT CONNECT_TIMEOUT: invoke_device_method with a
  CloudToDeviceMethod; prints {"status": ..., "payload": ...}.
A refusal prints {"http_status": ..., "error_code": header iothub-errorcode, "body": ...}.
"""
import json
import os
import sys

import urllib3.util.connection

PORT = int(os.environ["HUB_SIM_PORT"])
_create_connection = urllib3.util.connection.create_connection


def _create_connection_to_test_port(address, *args, **kwargs):
    host, _ = address
    return _create_connection((host, PORT), *args, **kwargs)


urllib3.util.connection.create_connection = _create_connection_to_test_port

from azure.iot.hub import IoTHubRegistryManager  # noqa: E402
from azure.iot.hub.models import CloudToDeviceMethod, Twin, TwinProperties  # noqa: E402
from msrest.exceptions import HttpOperationError  # noqa: E402


def say(value):
    print(json.dumps(value), flush=True)


def main():
    mode, device = sys.argv[1], sys.argv[2]
    manager = IoTHubRegistryManager.from_connection_string(
        os.environ["HUB_SIM_SERVICE_CONNECTION_STRING"]
    )
    try:
        if mode == "get":
            say({"twin": manager.get_twin(device).as_dict()})
        elif mode == "desired":
            patch = Twin(properties=TwinProperties(desired=json.loads(sys.argv[3])))
            etag = sys.argv[4] if len(sys.argv) > 4 else "*"
            say({"twin": manager.update_twin(device, patch, etag).as_dict()})
        elif mode == "invoke":
            method = CloudToDeviceMethod(
                method_name=sys.argv[3],
                payload=json.loads(sys.argv[4]),
                response_timeout_in_seconds=int(sys.argv[5]),
                connect_timeout_in_seconds=int(sys.argv[6]),
            )
            result = manager.invoke_device_method(device, method)
            say({"status": result.status, "payload": result.payload})
        else:
            raise SystemExit(f"unknown mode {mode}")
    except HttpOperationError as error:
        response = error.response
        say(
            {
                "http_status": response.status_code,
                "error_code": response.headers.get("iothub-errorcode"),
                "body": response.json(),
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
