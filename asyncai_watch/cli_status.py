"""What ``asyncai-watch watch`` says on stderr while it connects, watches and reconnects.

On a terminal one status line is rewritten in place (``connecting to memo``, ``watching
memo://notes``, ``reconnecting to memo in 2 s``); on a pipe or file nothing transient is written,
only lines worth keeping in a log: the start, a server still silent after a while, a reconnect.
The reconnect and resubscribe records come from the library's log (``watch.resubscribing``,
``watch.subscribed``), so the CLI needs no hook into the manager.
"""

from __future__ import annotations

import logging
from typing import Final, TextIO

import attrs

from asyncai_watch import log

__all__ = ["StatusLine", "StatusLogHandler"]

_CLEAR: Final = "\r\x1b[K"


@attrs.define
class StatusLine:
    """stderr, as the CLI talks to a person on a terminal or to a log behind a pipe."""

    stream: TextIO
    prog: str
    terminal: bool
    quiet: bool = False
    """``-q``: nothing at all."""
    _shown: bool = False

    @classmethod
    def on(cls, stream: TextIO, prog: str, *, quiet: bool = False) -> StatusLine:
        try:
            terminal = stream.isatty()
        except ValueError:  # closed
            terminal = False
        return cls(stream, prog, terminal, quiet)

    def show(self, text: str) -> None:
        """A transient state: rewritten in place on a terminal, not written at all on a pipe."""
        if self.terminal:
            self._write(f"{_CLEAR}{self.prog}: {text}")
            self._shown = True

    def say(self, text: str) -> None:
        """A line to keep: on a terminal it replaces the status line."""
        self._write(f"{_CLEAR if self._shown else ''}{self.prog}: {text}\n")
        self._shown = False

    def update(self, text: str) -> None:
        """A change of state worth a line on a pipe (a reconnect) and the status line on a terminal."""
        if self.terminal:
            self.show(text)
        else:
            self.say(text)

    def clear(self) -> None:
        if self._shown:
            self._write(_CLEAR)
            self._shown = False

    def _write(self, text: str) -> None:
        if self.quiet:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed: status is not worth failing the watch for
            pass


class StatusLogHandler(logging.Handler):
    """Turns the watches' resubscribe records into status: ``reconnecting to memo in 2 s``."""

    def __init__(self, status: StatusLine) -> None:
        super().__init__(logging.DEBUG)
        self._status = status
        self._down: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        event = record.getMessage()
        watch = str(getattr(record, "watch", ""))
        uri = str(getattr(record, "uri", ""))
        if event == "watch.resubscribing":
            delay = float(getattr(record, "delay", 0.0))
            attempt = getattr(record, "attempt", "?")
            reason = " ".join(str(getattr(record, "reason", "")).split())
            self._down.add(watch)
            self._status.update(
                f"{uri}: subscription lost ({reason}); reconnecting in {delay:.0f} s (attempt {attempt})"
            )
        elif event == "watch.subscribed" and watch in self._down:
            self._down.discard(watch)
            self._status.update(f"{uri}: subscribed again; watching")

    @classmethod
    def install(cls, status: StatusLine) -> StatusLogHandler:
        """Listen to the library's log at DEBUG (where resubscribe records are) for this process."""
        handler = cls(status)
        log.logger.addHandler(handler)
        if log.logger.getEffectiveLevel() > logging.DEBUG:
            for other in log.logger.handlers:
                if other is not handler and other.level == logging.NOTSET:
                    other.setLevel(log.logger.getEffectiveLevel())  # keep what they wrote before
            log.logger.setLevel(logging.DEBUG)
        return handler
