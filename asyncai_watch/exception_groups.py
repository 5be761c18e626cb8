"""The exceptions inside an exception group: a task group wraps what its tasks raised in one.

One walk for every caller that reports an error a task group (ours, anyio's, the SDK's) wrapped:
the CLI's one-line error, the agent's exit, the bridge's upstream status, the client's error text.
"""

from __future__ import annotations

__all__ = ["leaves"]


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc`` that are not groups, depth first in the groups' order;
    ``[exc]`` for an exception that is not a group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]
