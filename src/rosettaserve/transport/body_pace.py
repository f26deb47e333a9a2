"""How long a request body may take to arrive, on HTTP/1.1 and HTTP/2 alike.

Two bounds, both needed:

- a stall: no byte of the body for ``--body-timeout`` (nginx's ``client_body_timeout``);
- a drip: bytes that keep arriving, but too few. The body has ``--body-timeout`` seconds from
  its start, and one second more for every ``--body-min-rate`` bytes of it received (Apache
  ``mod_reqtimeout``'s ``body=30,MinRate=500``). A large body on a slow but honest link goes
  on as long as it needs; a body sent a byte a second is cut soon after ``--body-timeout``.

A body's clock is a single number, its *due* time: the body is late once ``now`` passes ``due
+ received / min_rate``, ``received`` being what the connection counts anyway (the size of the
body so far, or the DATA of the stream). No timer is armed per request or per chunk: the
servers' sweep (``idle.sweep``) compares, every quarter of the shortest timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from rosettaserve.transport.defaults import DEFAULT_BODY_MIN_RATE, DEFAULT_BODY_TIMEOUT


@dataclass(frozen=True)
class BodyPace:
    timeout: float = DEFAULT_BODY_TIMEOUT  # seconds: a stall, and the body's first seconds
    min_rate: int = DEFAULT_BODY_MIN_RATE  # bytes a second past those

    def due(self, since: float, received: int) -> float:
        """The clock of a body timed from ``since``, when ``received`` bytes were counted
        already (those are not the body's: a stream's earlier messages, say)."""
        return since + self.timeout - received / self.min_rate

    def overdue(self, due: float, received: int, now: float) -> bool:
        return now > due + received / self.min_rate

    def stalled(self, what: str) -> str:
        """Why ``what`` (the request body, ...) is refused when no byte of it came in time."""
        return f"{what} stalled: no byte of it arrived within {self.timeout:g} s (--body-timeout)"

    def too_slow(self, what: str) -> str:
        return (
            f"{what} arrived slower than {self.min_rate} bytes/s (--body-min-rate) past its "
            f"first {self.timeout:g} s (--body-timeout)"
        )
