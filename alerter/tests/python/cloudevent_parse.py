"""Parses a webhook request with the CloudEvents SDK (`cloudevents` on PyPI, 2.x).

Standard input: {"headers": {...}, "body": "..."}. Prints the event's attributes (its
`time` as Unix milliseconds) and data as JSON; fails if the SDK does not take the request
as a CloudEvent 1.0.
"""

import json
import sys

from cloudevents.core.bindings.http import HTTPMessage, from_http_event

request = json.load(sys.stdin)
message = HTTPMessage(headers=request["headers"], body=request["body"].encode("utf-8"))
event = from_http_event(message)
attributes = dict(event.get_attributes())
attributes["time"] = round(event.get_time().timestamp() * 1000)
print(json.dumps({"attributes": attributes, "data": event.get_data()}))
