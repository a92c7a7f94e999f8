"""Following a container's log across polls by timestamp, so kubelet log rotation loses nothing (pure).

Each poll asks for the log with ``timestamps=true``, from ``sinceTime`` = the whole second of the last line shown
(the API server hands the kubelet whole seconds), at most :attr:`LogCursor.limit` bytes (``limitBytes``).
:meth:`LogCursor.take` drops what was already shown (lines older than the cursor, and as many lines at its exact
timestamp as were shown there) and an unfinished last line, and moves the cursor past the rest. A line count or a
byte offset breaks when the kubelet rotates the file (the log it serves starts over); timestamps do not.

A followed stream (``follow=true``) goes through :meth:`LogCursor.take_streamed` instead, whole lines at a time: a
stream reopened with ``sinceTime`` after a drop repeats the lines of that second, which the cursor skips the same way.

A reply cut at the limit that brought nothing new (more than the limit logged within one second) doubles the limit
for the next request, up to :data:`MAX_CHUNK_BYTES`; past that, the cut line is shown as it is, so the cursor always
moves on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Bytes asked for per request (``limitBytes``): about 8,000 lines of 30 characters.
LOG_CHUNK_BYTES = 256 * 1024
#: The most a request asks for when one second holds more than :data:`LOG_CHUNK_BYTES`.
MAX_CHUNK_BYTES = 16 * 1024 * 1024
CUT_NOTE = " [line cut: longer than the log follower reads at once]"

Stamp = tuple[str, int]  # (whole second "YYYY-MM-DDTHH:MM:SS", nanoseconds)


def parse_stamp(text: str) -> Stamp | None:
    """``2026-03-01T10:00:00.123456789Z`` -> ``("2026-03-01T10:00:00", 123456789)``; ``None`` if not a UTC stamp."""
    if not text.endswith("Z") or len(text) < 20 or text[10] != "T":
        return None
    second, _, fraction = text[:-1].partition(".")
    if len(second) != 19 or not (fraction.isdigit() or fraction == ""):
        return None
    return second, int((fraction + "000000000")[:9])


@dataclass(frozen=True)
class LogRequest:
    """Which part of a container's log to read; the reply always carries timestamps (``timestamps=true``).

    Attributes:
        since_time: ``sinceTime`` (RFC 3339): only lines from then on.
        limit_bytes: ``limitBytes``: at most this many bytes (the last line may be cut).
        tail_lines: ``tailLines``: only the last lines.
        follow: ``follow=true``: a stream that stays open, sending lines as they are logged, until the container
            stops.
    """

    since_time: str | None = None
    limit_bytes: int | None = None
    tail_lines: int | None = None
    follow: bool = False


@dataclass(frozen=True)
class Chunk:
    """What one reply added: the new lines (without timestamps), and whether to ask again at once."""

    lines: list[str] = field(default_factory=list)
    more: bool = False


@dataclass
class LogCursor:
    """Where a follower is in one container's log.

    Attributes:
        started: a reply was taken (before it, a follower shows only the log's tail: see the trigger).
        stamp: timestamp of the last line shown; ``None`` before the first line.
        at_stamp: how many lines with exactly ``stamp`` were shown.
        limit: ``limitBytes`` for the next request.
    """

    started: bool = False
    stamp: Stamp | None = None
    at_stamp: int = 0
    limit: int = LOG_CHUNK_BYTES

    def since_time(self) -> str | None:
        """``sinceTime`` for the next request: the whole second of the last line shown (``None``: from the start)."""
        return f"{self.stamp[0]}Z" if self.stamp else None

    def request(self, backlog: int) -> LogRequest:
        """The next request: from :meth:`since_time` at most :attr:`limit` bytes; the last ``backlog`` lines on the
        first look (a long log seen for the first time is not repeated whole)."""
        return LogRequest(self.since_time(), self.limit, None if self.started else backlog)

    def stream_request(self, backlog: int) -> LogRequest:
        """A followed stream from :meth:`since_time` (the last ``backlog`` lines on the first look), no byte limit."""
        return LogRequest(self.since_time(), None, None if self.started else backlog, follow=True)

    def take_streamed(self, text: str) -> list[str]:
        """The new lines of whole lines a stream from :meth:`stream_request` sent (``text`` ends with a newline, or
        is the stream's unfinished last line); moves the cursor."""
        self.started = True
        return self._advance(text.removesuffix("\n").split("\n")) if text else []

    def take(self, text: str, *, final: bool = False) -> Chunk:
        """The new complete lines of a reply asked for with :meth:`since_time` and :attr:`limit`; moves the cursor.

        Args:
            text: the reply (``timestamps=true``: every line starts with its RFC 3339 timestamp and a space).
            final: the container has stopped: an unfinished last line is complete.
        """
        cut = len(text.encode("utf-8", errors="replace")) >= self.limit
        pieces = text.split("\n")
        tail = pieces.pop()  # "" after a final newline, else a line still being written or cut at the limit
        if tail and final and not cut:
            pieces.append(tail)
        new = self._advance(pieces)
        if cut and not new:
            if self.limit < MAX_CHUNK_BYTES:
                self.limit = min(self.limit * 2, MAX_CHUNK_BYTES)
                return Chunk([], more=True)
            new = self._advance([tail + CUT_NOTE]) if tail else []
        elif new:
            self.limit = LOG_CHUNK_BYTES
        self.started = True
        return Chunk(new, more=cut)

    def _advance(self, pieces: list[str]) -> list[str]:
        start, shown, repeated = self.stamp, self.at_stamp, 0
        new = []
        for piece in pieces:
            raw, _, line = piece.partition(" ")
            stamp = parse_stamp(raw)
            if stamp is None:  # no timestamp to place it by (not a kubelet reply): show it as it is
                new.append(piece)
                continue
            if start is not None and stamp < start:
                continue
            if stamp == start and repeated < shown:
                repeated += 1
                continue
            if stamp == self.stamp:
                self.at_stamp += 1
            else:
                self.stamp, self.at_stamp = stamp, 1
            new.append(line)
        return new
