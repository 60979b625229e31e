"""A ``SyncClient`` transport that runs a service's own handlers in this process.

No socket and no process: each request frame goes to ``Service.answer``, which decodes,
checks, handles and encodes it exactly as it would one off its socket, and the frames it
answers (a stream's events, then its result or error) come back in order to the client,
which decodes them, retries and times out as over a real DEALER. For tests of what a
command makes of a service's answers; like httpx's ``MockTransport``, but the service is real.
"""

from __future__ import annotations

import collections

import trio

from shared import protocol
from shared.transport.service import Service


class InProcessTransport:
    """Calls ``service`` in this thread: its async handlers run in an event loop of their own,
    one per request, so the caller must not be inside one. ``max_frame`` is the client's, as
    given to its ``SyncClient``: a frame over either side's transport cap is lost as libzmq
    loses it (the request: no answer; an answer: the connection)."""

    def __init__(self, service: Service, *, max_frame: int = protocol.MAX_FRAME_BYTES):
        self.service = service
        self._max_frame = max_frame
        self._answers: collections.deque[list[bytes]] = collections.deque()

    def send(self, raw: bytes, deadline: float) -> None:
        self._answers.clear()  # an earlier attempt's answers never reach a later one
        if len(raw) > self.service.max_frame * protocol.TRANSPORT_SIZE_FACTOR:
            return  # libzmq drops it before the service sees it
        self._answers.extend(trio.run(self.service.answer, raw))

    def receive(self, deadline: float) -> list[bytes]:
        if not self._answers:
            raise TimeoutError  # the call has run to its end: nothing more will come
        message = self._answers.popleft()
        if sum(map(len, message)) > self._max_frame * protocol.TRANSPORT_SIZE_FACTOR:
            self._answers.clear()
            raise ConnectionResetError  # libzmq drops the connection
        return message

    def close(self) -> None:
        self._answers.clear()
