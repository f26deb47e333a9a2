"""The answer a TorchServe handler's service writes: the worker's predict-response frame.

TorchServe's ``Service.predict`` (and ``send_intermediate_predict_response``) encode their
answer as one frame: a batch status (code, message), then for each request of the batch its id,
content type, HTTP status and phrase, response headers and body. We run the same ``Service``
in-process and read its frame here instead of on a socket, so the bytes, headers and statuses a
handler produces are exactly the ones TorchServe's frontend would have sent on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_INT = struct.Struct("!i")


class FrameError(ValueError):
    """The bytes are not a predict-response frame."""


@dataclass
class Reply:
    """One request's part of a frame."""

    request_id: str
    content_type: str
    status: int
    phrase: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Frame:
    code: int  # the batch's: not 200 means every request of it failed with ``message``
    message: str
    replies: list[Reply]


class _Reader:
    def __init__(self, data: bytes | bytearray) -> None:
        self.data = memoryview(bytes(data))
        self.pos = 0

    def number(self) -> int:
        if self.pos + 4 > len(self.data):
            raise FrameError("the frame ends inside a number")
        (value,) = _INT.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def take(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.data):
            raise FrameError(f"a field of {length} bytes runs past the frame")
        value = self.data[self.pos : self.pos + length].tobytes()
        self.pos += length
        return value

    def text(self) -> str:
        return self.take(self.number()).decode("utf-8", "replace")


def parse(data: bytes | bytearray) -> Frame:
    reader = _Reader(data)
    code = reader.number()
    message = reader.text()
    replies: list[Reply] = []
    while True:
        length = reader.number()
        if length == -1:
            break
        request_id = reader.take(length).decode("utf-8", "replace")
        content_type = reader.text()
        status = reader.number()
        phrase = reader.text()
        count = reader.number()
        if count < 0 or count > len(reader.data):
            raise FrameError(f"{count} headers")
        headers = {}
        for _ in range(count):
            key = reader.text()
            headers[key] = reader.text()
        replies.append(
            Reply(request_id, content_type, status, phrase, headers, reader.take(reader.number()))
        )
    if reader.pos != len(reader.data):
        raise FrameError("bytes follow the frame's end")
    return Frame(code, message, replies)
