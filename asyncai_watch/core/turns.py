"""Notices as agent turns, for any framework: how a notice reads, how notices coalesce, NO_REPLY.

Pure. Three rules every runner follows (the reference agent's orchestrator and each
framework integration alike):

1. **Render**: a notice reaches the model as an ordinary user-role message
   (docs/design.md, "Delivery to the agent"), wrapped so the model can tell it apart from a
   person (:func:`render_notice`), with an instruction sentence that allows ``NO_REPLY``.
2. **Coalesce**: at most one run at a time; whatever arrives while a run is active becomes
   ONE follow-up run (:class:`Turns`), so N notices during a run cost one extra run, not N.
3. **Suppress**: a reply that is empty or has a line that is only ``NO_REPLY`` is not
   published (:func:`is_no_reply`).

Everything a notice carries comes from outside the agent (object names, event
text), so attribute values and bodies go through the project's one rendering
of untrusted text (:func:`asyncai_watch.core.text.render`): controls, line and
paragraph separators and bidi controls are replaced, and ``& < > "`` are
escaped once, so no event content can close the wrapper or forge a new one and
text that arrives already escaped is not escaped twice. Watch and restore
bodies keep their line breaks (one line per event); attribute values and a
channel's content are single-line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final, Generic, TypeVar

import attrs

from asyncai_watch.core.notice import SOURCE_CHANNEL, SOURCE_RESTORE, SOURCE_WATCH, Notice
from asyncai_watch.core.text import render

__all__ = [
    "CHANNEL_INSTRUCTION",
    "NO_REPLY",
    "RESTORE_INSTRUCTION",
    "WATCH_INSTRUCTION",
    "RenderedNotice",
    "Turns",
    "escape",
    "is_no_reply",
    "render_notice",
    "render_turn",
]

T = TypeVar("T")

NO_REPLY: Final = "NO_REPLY"

# Each sentence names where the notice came from (a watch, a restore, a server's doorbell) and says
# what to do with it in any host: reply, or NO_REPLY. No host's wording ("the channel" was the
# switchboard's): the same text reaches a chat, a framework run, an Agent SDK session.
WATCH_INSTRUCTION: Final = (
    "This is a notice from a watch, not a user message. Reply only if the change matters to what "
    "was asked; otherwise reply exactly NO_REPLY."
)
RESTORE_INSTRUCTION: Final = (
    "This is a notice from a watch restore, not a user message: these watches were restarted from "
    "the saved watch state with fresh baselines, so changes made while the agent was down may be "
    "missing. Reply only if something needs attention; otherwise reply exactly NO_REPLY."
)
CHANNEL_INSTRUCTION: Final = (
    "This is a doorbell from an MCP server, not a user message. Act on it or reply only if it "
    "matters to what was asked; otherwise reply exactly NO_REPLY."
)
OTHER_INSTRUCTION: Final = (
    "This is a background notice, not a user message. Reply only if it matters to what was "
    "asked; otherwise reply exactly NO_REPLY."
)

# An attribute name from a doorbell's meta is only used if it is a plain
# identifier: anything else could break out of the tag, so it is dropped.
_ATTR_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_NO_REPLY_LINE: Final = re.compile(r"^\s*NO_REPLY\s*$", re.MULTILINE)


def escape(text: str) -> str:
    """``text`` made inert inside a tag or its attributes, on one line (:func:`~asyncai_watch.core.text.render`)."""
    return render(text)


def _attrs(pairs: Mapping[str, str]) -> str:
    return "".join(f' {key}="{escape(str(value))}"' for key, value in pairs.items() if _ATTR_NAME.match(key))


@attrs.frozen(kw_only=True)
class RenderedNotice:
    """A notice as the model sees it (``text``) and as the session records it."""

    text: str
    """The whole user-role message: wrapper, body and instruction line."""
    task_id: str
    """The session's monitor-event task id, e.g. ``watch-cm``."""
    description: str
    """E.g. ``watch cm kcp-events://...``."""
    note: str
    """The instruction line (the session record's note)."""


def render_notice(notice: Notice) -> RenderedNotice:
    """Render any notice; watches, restores and channel doorbells each get their own wrapper."""
    meta = notice.meta
    body = render(notice.text.strip("\n"), multiline=True)
    if notice.source == SOURCE_WATCH:
        name, uri = meta.get("name", ""), meta.get("uri", "")
        # Extra meta (e.g. failed="true" when a watch gave up) follows name and uri.
        extra = _attrs({k: v for k, v in meta.items() if k not in ("name", "uri")})
        wrapper = f'<watch-event name="{escape(name)}" uri="{escape(uri)}"{extra}>\n{body}\n</watch-event>'
        return RenderedNotice(
            text=f"{wrapper}\n{WATCH_INSTRUCTION}",
            task_id=f"watch-{name}",
            description=f"watch {name} {uri}",
            note=WATCH_INSTRUCTION,
        )
    if notice.source == SOURCE_RESTORE:
        wrapper = f"<watch-restore{_attrs(meta)}>\n{body}\n</watch-restore>"
        return RenderedNotice(
            text=f"{wrapper}\n{RESTORE_INSTRUCTION}",
            task_id="watch-restore",
            description="watch restore",
            note=RESTORE_INSTRUCTION,
        )
    if notice.source == SOURCE_CHANNEL:
        # Claude Code's channel shape: <channel source="server" k="v">content</channel>.
        server = meta.get("server", "")
        # "via" (doorbell vs pull) is bookkeeping for logs, not part of the channel tag's shape.
        rest = {k: v for k, v in meta.items() if k not in ("server", "source", "via")}
        # A channel's content is a one-line summary (a doorbell's shape), so it stays on one line.
        wrapper = f'<channel source="{escape(server)}"{_attrs(rest)}>{escape(notice.text.strip())}</channel>'
        return RenderedNotice(
            text=f"{wrapper}\n{CHANNEL_INSTRUCTION}",
            task_id=f"channel-{server}",
            description=f"channel {server}",
            note=CHANNEL_INSTRUCTION,
        )
    wrapper = f'<notice source="{escape(notice.source)}"{_attrs(meta)}>\n{body}\n</notice>'
    return RenderedNotice(
        text=f"{wrapper}\n{OTHER_INSTRUCTION}",
        task_id=notice.source,
        description=notice.source,
        note=OTHER_INSTRUCTION,
    )


def render_turn(notices: Sequence[Notice]) -> str:
    """One user message for a run that takes several notices at once (a coalesced turn)."""
    return "\n\n".join(render_notice(n).text for n in notices)


def is_no_reply(reply: str | None) -> bool:
    """An empty reply, or one with a line that is only ``NO_REPLY``, is not published."""
    if reply is None or not reply.strip():
        return True
    return _NO_REPLY_LINE.search(reply) is not None


@attrs.define
class Turns(Generic[T]):
    """At most one run at a time; what arrives during a run becomes ONE follow-up run.

    The runner's loop::

        if turns.add(item):            # nothing running: start a run now
            start_run()
        ...in the run: batch = turns.begin() ... run the model on batch ...
        if turns.end():                # something came in meanwhile: one more run
            start_run()
    """

    inbox: list[T] = attrs.field(factory=list)
    """Items no run has taken yet, oldest first."""
    active: bool = False
    """A run is in progress."""

    def add(self, item: T) -> bool:
        """Queue ``item``; ``True`` when no run is active and one should start now."""
        self.inbox.append(item)
        return not self.active

    def begin(self) -> list[T]:
        """A run starts: it takes every queued item."""
        batch, self.inbox = self.inbox, []
        self.active = True
        return batch

    def end(self) -> bool:
        """The run is over; ``True`` when items came in meanwhile and one follow-up run should start."""
        self.active = False
        return bool(self.inbox)
