"""A watch's filter step: open its ``on_event`` session, and turn one read into lines.

The I/O half of what :class:`~asyncai_watch.core.watch.Watch` cannot do itself: the filter
runs in a worker (:mod:`asyncai_watch.filters`), and a large body is parsed and diffed in the
large-body worker (:mod:`asyncai_watch.runtime.offload`), off the event loop.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from asyncai_watch.core.limits import Limits
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.core.watch import Body, EventRecord, Line, Pending, Watch
from asyncai_watch.filters import Catalog, FilterEngine, FilterSession, sample_event, validate_on_event
from asyncai_watch.runtime.offload import Offload
from asyncai_watch.runtime.subscriptions import describe

__all__ = ["Result", "lines_for", "open_filter"]

Result = tuple[list[Line], list[EventRecord]]
"""A read's lines and the records of the events that became no line."""


async def open_filter(
    engine: FilterEngine,
    spec: WatchSpec,
    *,
    catalog: Catalog,
    limits: Limits,
    event_log: bool,
    stack: AsyncExitStack,
) -> FilterSession:
    """Validate ``spec.on_event``, open its session (closed by ``stack``) and dry-run it on a
    sample event: a SyntaxError, a NameError and the like fail here, before anything is
    subscribed; a KeyError on the sample is fine."""
    assert spec.on_event is not None
    validate_on_event(spec.on_event, engine=engine)
    session = await engine.open(spec.on_event, catalog=catalog, limits=limits)
    stack.push_async_callback(session.aclose)
    await session.dry_run(sample_event(watch=spec.name, uri=spec.uri, event_log=event_log))
    return session


async def lines_for(
    core: Watch, update: Body | str, session: FilterSession | None, offload: Offload
) -> Result:
    """One read (or a failed read's error) of ``core``'s URI as lines, through the filter if any.

    Never raises for a body or a filter: what no part expected becomes an ``ERROR`` line.
    """
    try:
        pending: Pending
        if isinstance(update, str):
            pending = core.read_failed(update)
        elif core.remote or not update.parsed:
            pending = await offload.read(core, update)
        else:
            pending = core.read(update)
        if session is None or not pending.events:
            return core.lines(pending)
        dicts = [ev.to_filter_dict(watch=core.name, uri=core.uri) for ev in pending.events]
        try:
            return core.lines(pending, await session.run(dicts))
        except Exception as exc:
            return core.filter_failed(pending, describe(exc))
    except Exception as exc:
        # A body no part of the pipeline expected must not end the watch: report it and go on.
        return [Line(f"ERROR processing a read of {core.uri}: {describe(exc)}")], []
