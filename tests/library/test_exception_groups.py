"""``leaves``: the one walk of exception groups that the CLI, the agent, serve and the HTTP kit share."""

from __future__ import annotations

from asyncai_watch.exception_groups import leaves
from asyncai_watch.server.http import bind_error


def test_leaves_of_nested_groups_in_order() -> None:
    a, b, c = ValueError("a"), OSError("b"), KeyError("c")
    group = BaseExceptionGroup("outer", [ExceptionGroup("inner", [a, b]), c])
    assert leaves(group) == [a, b, c]


def test_an_exception_that_is_no_group_is_its_own_leaf() -> None:
    error = RuntimeError("alone")
    assert leaves(error) == [error]


def test_bind_error_finds_one_oserror_however_deep_and_nothing_beside_others() -> None:
    taken = OSError(98, "Address already in use")
    assert bind_error(ExceptionGroup("tg", [ExceptionGroup("inner", [taken])])) is taken
    assert bind_error(taken) is taken
    assert bind_error(ExceptionGroup("tg", [taken, OSError("second")])) is None
    assert bind_error(ExceptionGroup("tg", [taken, ValueError("other")])) is None
    assert bind_error(ValueError("no")) is None
