"""Microsoft's Event Hubs consumer with Microsoft's blob checkpoint store, on hub-sim and Azurite.

Receives with EventHubConsumerClient(checkpoint_store=BlobCheckpointStore) from the
checkpoints in the container (a partition without checkpoint starts at the earliest event),
checkpoints every event it receives, and stops once it has received N events or after
CHECKPOINT_TIMEOUT seconds of silence. Prints one JSON line: the sequence numbers received
per partition, and the checkpoints the store lists at the end.

Environment: HUB_SIM_EVENTHUB (the hub's connection string), CHECKPOINT_BLOB_CONNECTION_STRING,
CHECKPOINT_BLOB_CONTAINER, and EVENTHUB_CUSTOM_ENDPOINT (sb://host:port, plain AMQP) when the
connection string names a namespace the hub only plays. Usage: checkpointstore.py N
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../crates/hub-sim/tests/python"))
# Imported for its socket-option workaround for loopback (applied on import).
import eventhub  # noqa: E402,F401

from azure.eventhub import EventHubConsumerClient, TransportType  # noqa: E402
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore  # noqa: E402

QUIET = float(os.environ.get("CHECKPOINT_TIMEOUT", "20"))


def main():
    wanted = int(sys.argv[1])
    store = BlobCheckpointStore.from_connection_string(
        os.environ["CHECKPOINT_BLOB_CONNECTION_STRING"], os.environ["CHECKPOINT_BLOB_CONTAINER"]
    )
    # The namespace stays the connection string's (it names the checkpoint blobs); the
    # connection goes to the custom endpoint, without TLS, as the emulator's does.
    custom = os.environ.get("EVENTHUB_CUSTOM_ENDPOINT")
    endpoint = (
        {"custom_endpoint_address": custom, "transport_type": TransportType.Amqp, "use_tls": False}
        if custom
        else {}
    )
    client = EventHubConsumerClient.from_connection_string(
        os.environ["HUB_SIM_EVENTHUB"], consumer_group="$Default", checkpoint_store=store, **endpoint
    )
    received = {}
    lock = threading.Lock()
    last = [time.monotonic()]

    def on_event(context, event):
        if event is None:
            return
        with lock:
            received.setdefault(context.partition_id, []).append(event.sequence_number)
            last[0] = time.monotonic()
        context.update_checkpoint(event)

    worker = threading.Thread(
        target=client.receive,
        kwargs={"on_event": on_event, "starting_position": "-1", "max_wait_time": 1},
        daemon=True,
    )
    worker.start()
    while True:
        time.sleep(0.2)
        with lock:
            count = sum(len(v) for v in received.values())
            quiet = time.monotonic() - last[0]
        if count >= wanted or quiet > QUIET:
            break
    # A moment for anything beyond N to arrive (which would be a replay), then stop.
    time.sleep(2)
    client.close()
    worker.join(10)
    namespace = client._address.hostname
    checkpoints = {
        c["partition_id"]: c["sequence_number"]
        for c in store.list_checkpoints(namespace, client.eventhub_name, "$Default")
    }
    print(json.dumps({"received": received, "namespace": namespace, "checkpoints": checkpoints}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
