"""AgentEvents as the browser reads them: protobuf's JSON mapping with the .proto field names.

A frame's bytes are the event serialized once at commit time and shared by every client; its
JSON text is made once too and shared through a small cache keyed by those bytes, so ten
browsers on one session cost one conversion per event, not ten.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence

from google.protobuf import json_format
from google.protobuf.message import Message

from betcode.v1 import agent_pb2

CACHED_EVENTS = 4096


def message_json(message: Message) -> dict[str, object]:
    """A message (an event, a session summary) as a JSON object with .proto field names;
    64-bit integers (`sequence`) come as strings, as the JSON mapping says."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


class EventJson:
    def __init__(self, capacity: int = CACHED_EVENTS) -> None:
        self._capacity = capacity
        self._texts: OrderedDict[bytes, str] = OrderedDict()

    def text(self, data: bytes) -> str:
        cached = self._texts.get(data)
        if cached is not None:
            self._texts.move_to_end(data)
            return cached
        event = agent_pb2.AgentEvent.FromString(data)
        text = json.dumps(message_json(event), ensure_ascii=False, separators=(",", ":"))
        self._texts[data] = text
        if len(self._texts) > self._capacity:
            self._texts.popitem(last=False)
        return text

    def batch(self, batch: Sequence[bytes]) -> str:
        """One WebSocket message: a JSON array of events (empty: the replay reached the live
        edge)."""
        return "[" + ",".join(self.text(data) for data in batch) + "]"
