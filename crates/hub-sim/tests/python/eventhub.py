"""Drives Microsoft's azure-eventhub client against hub-sim's built-in endpoint.

The connection string (HUB_SIM_EVENTHUB) is one hub-sim writes: in the form of Microsoft's
Event Hubs emulator (UseDevelopmentEmulator=true: plain AMQP on its port), or the service's
form for AMQP over TLS, with HUB_SIM_CA the CA file the client trusts (connection_verify).
With ENTRA_CLIENT_ID set, the client signs in with azure-identity's ClientSecretCredential
(ENTRA_TENANT, ENTRA_CLIENT_ID, ENTRA_SECRET, ENTRA_BASE; REQUESTS_CA_BUNDLE the issuer's
CA) and uses only the connection string's address and event hub, not its key.

Modes (one JSON line is printed with the outcome):
  ids                      partition ids and the hub's name
  props P                  properties of partition P
  receive N [P SEQ]        N events from every partition from the start, or from partition P
                           after sequence number SEQ
  steal P                  owner level 1 reads P, then owner level 2 takes it over
  refused                  get_partition_ids with this connection string must be refused
"""
import json
import os
import sys
import threading
import time

from azure.eventhub import EventHubConsumerClient, TransportType
from azure.eventhub._pyamqp import _transport

# pyamqp reads every TCP option of a connected socket and sets it back. On loopback some
# kernels report TCP_MAXSEG as 32768 and then refuse that very value (EINVAL), so the SDK
# cannot connect to any local endpoint. The option is left out; nothing on the wire changes.
_socket_defaults = _transport._AbstractTransport._get_tcp_socket_defaults


def _without_maxseg(self, sock):
    options = _socket_defaults(self, sock)
    options.pop(getattr(_transport.socket, "TCP_MAXSEG", -1), None)
    return options


_transport._AbstractTransport._get_tcp_socket_defaults = _without_maxseg

CONNECTION_STRING = os.environ["HUB_SIM_EVENTHUB"]
TIMEOUT = float(os.environ.get("HUB_SIM_TIMEOUT", "60"))
CA = os.environ.get("HUB_SIM_CA")


def client():
    kwargs = {}
    if CA:
        # Over TLS the SDK dials 5671 whatever port the endpoint names; its documented way to
        # another port is a custom endpoint address with the AMQP transport.
        endpoint = next(p for p in CONNECTION_STRING.split(";") if p.startswith("Endpoint="))
        kwargs = {
            "connection_verify": CA,
            "custom_endpoint_address": endpoint.removeprefix("Endpoint=").rstrip("/"),
            "transport_type": TransportType.Amqp,
        }
    if os.environ.get("ENTRA_CLIENT_ID"):
        from azure.identity import ClientSecretCredential

        parts = dict(p.split("=", 1) for p in CONNECTION_STRING.split(";") if "=" in p)
        credential = ClientSecretCredential(
            os.environ["ENTRA_TENANT"], os.environ["ENTRA_CLIENT_ID"], os.environ["ENTRA_SECRET"],
            authority=os.environ["ENTRA_BASE"], disable_instance_discovery=True)
        namespace = parts["Endpoint"].removeprefix("sb://").rstrip("/").split(":")[0]
        return EventHubConsumerClient(
            namespace, parts["EntityPath"], "$Default", credential, retry_total=0, **kwargs)
    return EventHubConsumerClient.from_connection_string(
        CONNECTION_STRING, consumer_group="$Default", retry_total=0, **kwargs
    )


def shape(partition_id, event):
    system = event.system_properties
    return {
        "partition": partition_id,
        "sequence_number": event.sequence_number,
        "offset": event.offset,
        "enqueued_ms": int(event.enqueued_time.timestamp() * 1000),
        "device_id": system[b"iothub-connection-device-id"].decode(),
        "auth_method": system.get(b"iothub-connection-auth-method", b"").decode(),
        "source": system.get(b"iothub-message-source", b"").decode(),
        "content_type": event.content_type,
        "system": {
            k.decode(): v.decode() if isinstance(v, bytes) else str(v)
            for k, v in system.items()
        },
        "properties": {k.decode(): v.decode() for k, v in (event.properties or {}).items()},
        "body": event.body_as_str(),
    }


def receive(count, **kwargs):
    consumer = client()
    got, errors = [], []
    done = threading.Event()

    def on_event(context, event):
        if event is None:
            return
        got.append(shape(context.partition_id, event))
        if len(got) >= count:
            done.set()

    def on_error(context, error):
        errors.append(f"{type(error).__name__}: {error}")

    kwargs.setdefault("starting_position", "-1")
    thread = threading.Thread(
        target=consumer.receive,
        kwargs=dict(on_event=on_event, on_error=on_error, **kwargs),
        daemon=True,
    )
    thread.start()
    done.wait(TIMEOUT)
    consumer.close()
    thread.join(10)
    return got, errors


def steal(partition):
    first, second = client(), client()
    first_events, first_errors, second_events = [], [], []
    first_started = threading.Event()

    def first_on_event(_context, event):
        if event is not None:
            first_events.append(event.sequence_number)
            first_started.set()

    def first_on_error(_context, error):
        first_errors.append(f"{type(error).__name__}: {error}")

    def second_on_event(_context, event):
        if event is not None:
            second_events.append(event.sequence_number)

    threading.Thread(
        target=first.receive,
        kwargs=dict(
            on_event=first_on_event,
            on_error=first_on_error,
            partition_id=partition,
            owner_level=1,
            starting_position="-1",
        ),
        daemon=True,
    ).start()
    first_started.wait(TIMEOUT)
    threading.Thread(
        target=second.receive,
        kwargs=dict(
            on_event=second_on_event,
            partition_id=partition,
            owner_level=2,
            starting_position="-1",
        ),
        daemon=True,
    ).start()
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not (first_errors and second_events):
        time.sleep(0.05)
    first.close()
    second.close()
    return {"first_events": len(first_events), "first_errors": first_errors, "second_events": len(second_events)}


def main():
    mode = sys.argv[1]
    if mode == "ids":
        with client() as consumer:
            props = consumer.get_eventhub_properties()
            print(json.dumps({"ids": consumer.get_partition_ids(), "name": props["eventhub_name"]}))
    elif mode == "props":
        with client() as consumer:
            props = consumer.get_partition_properties(sys.argv[2])
            props["last_enqueued_time_utc"] = props["last_enqueued_time_utc"].timestamp()
            print(json.dumps(props))
    elif mode == "receive":
        count = int(sys.argv[2])
        kwargs = {}
        if len(sys.argv) > 3:
            kwargs = dict(partition_id=sys.argv[3], starting_position=int(sys.argv[4]))
        got, errors = receive(count, **kwargs)
        print(json.dumps({"events": got, "errors": errors}))
    elif mode == "steal":
        print(json.dumps(steal(sys.argv[2])))
    elif mode == "refused":
        try:
            with client() as consumer:
                consumer.get_partition_ids()
        except Exception as error:  # the SDK's own exception type is the outcome
            print(json.dumps({"refused": type(error).__name__, "message": str(error)}))
            return 0
        print(json.dumps({"refused": None}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
