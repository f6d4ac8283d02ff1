"""Sends CloudEvents to an Event Grid topic with Microsoft's azure-eventgrid SDK.

argv: the topic endpoint, the access key; standard input: a JSON array of CloudEvents
(structured form). Each is rebuilt as the SDK's CloudEvent with the same attributes and
sent in one batch, as an application publishing the same events would.
"""

import json
import sys

from azure.core.credentials import AzureKeyCredential
from azure.core.messaging import CloudEvent
from azure.eventgrid import EventGridPublisherClient

endpoint, key = sys.argv[1], sys.argv[2]
events = []
for e in json.load(sys.stdin):
    events.append(
        CloudEvent(
            source=e["source"],
            type=e["type"],
            data=e["data"],
            id=e["id"],
            time=CloudEvent.from_dict(e).time,
            subject=e["subject"],
            datacontenttype=e["datacontenttype"],
            specversion=e["specversion"],
        )
    )
client = EventGridPublisherClient(endpoint, AzureKeyCredential(key))
client.send(events)
