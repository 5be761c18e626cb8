"""A manager's watches by name: who holds a name, in what order, and what the state file keeps.

The one owner of the name -> :class:`~asyncai_watch.runtime.watcher.Watcher` table. A start
reserves its name before anything awaits (two concurrent starts of one name must not both win)
and gives it back when it fails; a saved watch that could not start keeps its slot, listed
``restore_failed`` with its reason, until a start replaces it or a stop drops it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from asyncai_watch.core.limits import Limits
from asyncai_watch.core.spec import WatchSpec, check_room
from asyncai_watch.runtime.watcher import Watcher
from asyncai_watch.state_file import SavedWatch

__all__ = ["Watches"]


class Watches:
    """The watches of one manager, in start order (see the module docstring)."""

    def __init__(self, limits: Limits, *, verbose: bool) -> None:
        self._limits = limits
        self._verbose = verbose
        self._by_name: dict[str, Watcher] = {}

    def get(self, name: str) -> Watcher | None:
        return self._by_name.get(name)

    def __iter__(self) -> Iterator[Watcher]:
        return iter(list(self._by_name.values()))

    def reserve(self, name: str, uri: str, on_event: str | None) -> tuple[Watcher, Watcher | None]:
        """Check the spec and that a slot is free, and take the name. Returns the new watcher and
        the one it replaces (a saved watch that failed), if any."""
        spec = WatchSpec.checked(name, uri, on_event)
        check_room(spec, _Slots(self._by_name), self._limits.max_watches)
        previous = self._by_name.get(name)
        watcher = self._by_name[name] = Watcher(spec, self._limits, verbose=self._verbose)
        return watcher, previous

    def release(self, watcher: Watcher, previous: Watcher | None = None) -> None:
        """``watcher``'s start failed, or it stops: its name goes back to ``previous`` (a failed
        restart keeps the saved failed spec), else it is free. Nothing when another holds it."""
        name = watcher.name
        if self._by_name.get(name) is watcher:
            if previous is not None:
                self._by_name[name] = previous
            else:
                del self._by_name[name]

    def keep_failed(self, spec: WatchSpec, error: str) -> None:
        """A saved watch that cannot start: listed ``restore_failed``, saved with its reason, in its slot."""
        self._by_name[spec.name] = Watcher.restore_failed(spec, self._limits, error, verbose=self._verbose)

    def order_as(self, names: Sequence[str]) -> None:
        """List the watches named in ``names`` in that order (whichever start finished first), then the rest."""
        order = {name: i for i, name in enumerate(names)}
        self._by_name = dict(sorted(self._by_name.items(), key=lambda item: order.get(item[0], len(order))))

    def saved(self, *, without: str | None = None) -> list[SavedWatch]:
        """What the ``watch_state`` file keeps: every started watch's spec (a failed restore's
        with its reason), but ``without``."""
        return [
            SavedWatch(w.spec, w.saved_error)
            for n, w in self._by_name.items()
            if w.status != "starting" and n != without
        ]


class _Slots(Mapping[str, tuple[str, str]]):
    """The watches as ``check_room`` reads them (name -> (uri, status)), without a copy."""

    def __init__(self, watchers: dict[str, Watcher]) -> None:
        self._watchers = watchers

    def __getitem__(self, name: str) -> tuple[str, str]:
        watcher = self._watchers[name]
        return watcher.spec.uri, watcher.status

    def __iter__(self) -> Iterator[str]:
        return iter(self._watchers)

    def __len__(self) -> int:
        return len(self._watchers)
