"""Lists or writes the blobs of a container through the storage client that Microsoft's
azure-eventhub-checkpointstoreblob ships (vendored azure-storage-blob): the blobs as any
other storage reader or writer (KEDA's scaler, the Azure Functions Event Hubs extension)
sees and leaves them.

Usage:
  blobs.py list CONNECTION_STRING CONTAINER
      prints {name: metadata} as JSON
  blobs.py put CONNECTION_STRING CONTAINER NAME METADATA_JSON
      creates the container if missing and writes an empty blob NAME with the metadata
"""

import json
import sys

from azure.core.exceptions import ResourceExistsError
from azure.eventhub.extensions.checkpointstoreblob._vendor.storage.blob import (
    ContainerClient,
)


def main():
    command, connection, container = sys.argv[1], sys.argv[2], sys.argv[3]
    client = ContainerClient.from_connection_string(connection, container)
    if command == "list":
        blobs = client.list_blobs(include=["metadata"])
        # An empty value (a given-up ownership's ownerid) is listed as None.
        print(
            json.dumps(
                {
                    blob.name: {k: v or "" for k, v in (blob.metadata or {}).items()}
                    for blob in blobs
                }
            )
        )
    elif command == "put":
        name, metadata = sys.argv[4], json.loads(sys.argv[5])
        try:
            client.create_container()
        except ResourceExistsError:
            pass
        client.get_blob_client(name).upload_blob(b"", metadata=metadata, overwrite=True)
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
