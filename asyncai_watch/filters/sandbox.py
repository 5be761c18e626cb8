"""The RestrictedPython policy shared by watch filters and the agent's ``run_code``.

Compile with :func:`compile_repl`, make a persistent scope with :func:`new_scope`, run with
:func:`run_sync` (filters) or :func:`run_async` (``run_code``, top-level ``await``).

REPL-style: the value of the last expression statement is the result, and ``print`` output is
collected, not written anywhere. Variables assigned at top level persist in the scope.

This is a policy, not a security boundary: RestrictedPython has had published escapes
(see docs/filters.md). Filters therefore also run in a locked-down worker process
(:mod:`asyncai_watch.filters`); ``run_code`` runs in the agent process on trusted-ish model code.
"""

from __future__ import annotations

import ast
import json
import operator
import re
import string
import types
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Final

import attrs
from RestrictedPython.compile import compile_restricted_exec
from RestrictedPython.Guards import (
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safe_builtins,
    safer_getattr_raise,
)
from RestrictedPython.transformer import INSPECT_ATTRIBUTES, RestrictingNodeTransformer

from asyncai_watch.core.echo import quoted

# RestrictedPython's own getattr guard (untyped upstream), used as a second layer.
_upstream_getattr: Callable[[Any, str], Any] = safer_getattr_raise

__all__ = [
    "MAX_PRINTED",
    "PolicyError",
    "ReplCode",
    "ReplResult",
    "StepLimitError",
    "compile_repl",
    "describe_error",
    "error_line",
    "last_printed",
    "new_scope",
    "run_async",
    "run_sync",
    "scope_variables",
]

# Names restricted code can never spell (the policy refuses names starting with "_"),
# so user code can neither read nor overwrite them.
_VALUE: Final = "__asyncai_value__"
_ENTRY: Final = "__asyncai_main__"
_STATE: Final = "__asyncai_scope__"
_TICK: Final = (
    "_loop_tick_"  # called at the top of every while-loop body of run_code (not spellable by users)
)

MAX_PRINTED: Final = 1_000_000
"""Characters of ``print`` output kept per run; the rest is dropped with a note."""


class PolicyError(Exception):
    """Restricted code reached something the sandbox forbids (import, open, a dunder, ...)."""


@attrs.frozen
class ReplCode:
    """Compiled restricted source. ``is_async`` code must run with :func:`run_async`."""

    code: types.CodeType
    is_async: bool
    filename: str


@attrs.frozen
class ReplResult:
    """One run: the last expression's value (None if the last statement is not an expression)
    and everything printed."""

    value: Any
    printed: str


# -- compiling ------------------------------------------------------------------------------


class _TopLevel(ast.NodeVisitor):
    """Names bound at module level, and statements that only a function body may hold.

    It does not enter nested function, lambda, class or comprehension scopes, whose names
    are their own.
    """

    def __init__(self) -> None:
        self.names: dict[str, None] = {}  # ordered set
        self.misplaced: list[tuple[ast.AST, str]] = []

    def _bind(self, name: str) -> None:
        self.names.setdefault(name, None)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._bind(node.id)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._bind(node.name)
        for d in node.decorator_list:
            self.visit(d)
        self.visit(node.args)  # defaults are evaluated here; the body is another scope

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_arguments(self, node: ast.arguments) -> None:
        for d in [*node.defaults, *node.kw_defaults]:
            if d is not None:
                self.visit(d)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name)
        for n in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(n)

    def _visit_comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp
    ) -> None:
        # Only walrus targets inside a comprehension bind in the enclosing scope.
        for sub in ast.walk(node):
            if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                self._bind(sub.target.id)

    visit_ListComp = _visit_comprehension
    visit_SetComp = _visit_comprehension
    visit_GeneratorExp = _visit_comprehension
    visit_DictComp = _visit_comprehension

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node.name)
        self.generic_visit(node)

    def _visit_import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0])

    visit_Import = _visit_import
    visit_ImportFrom = _visit_import

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._bind(name)

    def visit_Return(self, node: ast.Return) -> None:
        self.misplaced.append((node, "'return' outside function"))

    def visit_Yield(self, node: ast.Yield) -> None:
        self.misplaced.append((node, "'yield' outside function"))

    def visit_YieldFrom(self, node: ast.YieldFrom) -> None:
        self.misplaced.append((node, "'yield' outside function"))


def _located(new: ast.stmt, old: ast.AST) -> ast.stmt:
    ast.copy_location(new, old)
    return ast.fix_missing_locations(new)


class _ReplPolicy(RestrictingNodeTransformer):
    """RestrictedPython's policy, then the REPL transform on the already-restricted module.

    The transform runs after the policy has checked (and rewritten) every user node, so the
    wrapper may use names user code cannot spell; it adds no user-reachable construct.
    """

    allow_await: ClassVar[bool] = False

    def visit_Module(self, node: ast.Module) -> Any:
        top = _TopLevel()
        for stmt in node.body:
            top.visit(stmt)
        if self.allow_await:
            # Inside the async wrapper these would compile; at module level (the plain mode)
            # Python refuses them, so refuse them here too: both modes reject the same code.
            for bad, message in top.misplaced:
                self.error(bad, message)
        module = super().visit_Module(node)  # the policy proper; it mutates `node` in place
        assert isinstance(module, ast.Module)
        if self.errors:
            return module  # it will not compile; refused nodes may have been removed
        body = module.body
        last = body[-1] if body else None
        if not self.allow_await:
            if isinstance(last, ast.Expr):
                body[-1] = _located(
                    ast.Assign(targets=[ast.Name(_VALUE, ast.Store())], value=last.value), last
                )
            return module
        inner: list[ast.stmt] = list(body)
        if isinstance(last, ast.Expr):
            inner[-1] = _located(ast.Return(value=last.value), last)
        names = list(top.names)
        if names:
            # Top-level assignments must land in the persistent scope, not the wrapper's locals.
            inner.insert(0, _located(ast.Global(names=names), inner[0]))
        if not inner:
            inner = [ast.Pass()]
        wrapper = ast.AsyncFunctionDef(
            name=_ENTRY,
            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=inner,
            decorator_list=[],
            returns=None,
        )
        if "type_params" in ast.AsyncFunctionDef._fields:  # Python 3.12+
            wrapper.type_params = []  # type: ignore[attr-defined,unused-ignore]
        wrapper.lineno, wrapper.col_offset = 1, 0
        module.body = [ast.fix_missing_locations(wrapper)]
        return module

    def visit_Await(self, node: ast.Await) -> Any:
        if self.allow_await:
            return self.node_contents_visit(node)
        self.error(node, "await is not allowed here (only run_code allows top-level await)")
        return node


class _AsyncReplPolicy(_ReplPolicy):
    """run_code's policy: top-level ``await``, and a step count in every loop and call.

    run_code shares the agent's event loop, so code that never awaits would freeze every
    watch and the agent with it. Each ``while`` iteration and each call of a function or
    lambda the code defined (here), and each item a ``for`` or comprehension takes (the
    ``_getiter_`` guard), counts one step of the scope's budget.
    """

    allow_await = True

    def visit_While(self, node: ast.While) -> Any:
        node = self.node_contents_visit(node)
        node.body.insert(0, _tick_statement(node.body[0] if node.body else node))
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        # Recursion loops too (``def f(n): return f(n-1) + f(n-1)``): every call is a step.
        new = super().visit_FunctionDef(node)
        if isinstance(new, ast.FunctionDef) and new.body:
            new.body.insert(0, _tick_statement(new.body[0]))
        return new

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        new = super().visit_Lambda(node)
        if isinstance(new, ast.Lambda):
            # ``_loop_tick_(body)`` counts the call and returns the body's value.
            call = ast.Call(func=ast.Name(_TICK, ast.Load()), args=[new.body], keywords=[])
            new.body = ast.fix_missing_locations(ast.copy_location(call, new.body))
        return new


def _tick_statement(where: ast.AST) -> ast.stmt:
    return _located(ast.Expr(ast.Call(func=ast.Name(_TICK, ast.Load()), args=[], keywords=[])), where)


_ERROR_LINE: Final = re.compile(r"^Line (\d+): ")


def compile_repl(source: str, *, filename: str = "<on_event>", allow_await: bool = False) -> ReplCode:
    """Compile restricted source, REPL-style; ``allow_await`` permits top-level ``await``.

    Raises SyntaxError (with the source's own line numbers) for a syntax error or for
    anything the policy refuses (dunder names, ``exec``, ``async def``, ...).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings would go to the host's stderr
            tree = ast.parse(source, filename, "exec")
            result = compile_restricted_exec(
                tree, filename, policy=_AsyncReplPolicy if allow_await else _ReplPolicy
            )
    except RecursionError:
        raise SyntaxError(f"{filename}: the code is nested too deeply to compile") from None
    if result.errors:
        first = _ERROR_LINE.match(result.errors[0])
        lineno = int(first.group(1)) if first else None
        lines = source.splitlines()
        text = lines[lineno - 1] if lineno and 0 < lineno <= len(lines) else None
        err = SyntaxError("; ".join(result.errors), (filename, lineno, None, text))
        raise err
    assert result.code is not None
    return ReplCode(code=result.code, is_async=allow_await, filename=filename)


# -- the scope ------------------------------------------------------------------------------


class _Printed:
    """The one print collector of a run: every ``print`` in the run (nested functions too)
    writes here, so the run's output is complete and capped."""

    def __init__(self, limit: int) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._limit = limit
        self._truncated = False

    def reset(self) -> None:
        if self._parts:
            self._parts = []
            self._size = 0
            self._truncated = False

    def write(self, text: str) -> None:
        if self._truncated:
            return
        room = self._limit - self._size
        if len(text) > room:
            self._parts.append(text[:room])
            self._parts.append(f"\n[printed output truncated at {self._limit} characters]\n")
            self._truncated = True
            self._size = self._limit
            return
        self._parts.append(text)
        self._size += len(text)

    def text(self) -> str:
        return "".join(self._parts)

    # What RestrictedPython's rewritten code calls: `printed` -> `_print()`,
    # `print(...)` -> `_print._call_print(...)`.
    def __call__(self) -> str:
        return self.text()

    def _call_print(self, *objects: Any, sep: str | None = " ", end: str | None = "\n", **kw: Any) -> None:
        if kw.get("file") is not None:
            raise PolicyError("print(file=...) is not available in the sandbox; printed text is collected")
        print(*objects, sep=sep, end=end, file=self)


class StepLimitError(Exception):
    """run_code's loops ran more iterations than its scope allows (``max_loop_steps``)."""


@attrs.define
class _ScopeState:
    label: str
    max_printed: int
    functions: tuple[str, ...]
    printed: _Printed
    """One per scope, emptied at the start of each run, so even a function or lambda
    defined in an earlier run prints into the current run's output."""
    max_loop_steps: int | None = None
    steps: int = 0  # loop steps of the current run

    def collector(self, _getattr_: object = None) -> _Printed:
        return self.printed

    def tick(self, value: Any = None) -> Any:
        self.steps += 1
        if self.max_loop_steps is not None and self.steps > self.max_loop_steps:
            raise StepLimitError(
                f"the code made more than {self.max_loop_steps:,} loop iterations and calls in one run "
                "and was stopped: run_code shares the agent's event loop, so a long loop freezes every "
                "watch. Loop over tool results, not to compute or to wait (watch_start waits for changes)"
            )
        return value

    def getiter(self, ob: Any) -> Iterator[Any]:
        for item in ob:
            self.tick()
            yield item

    # ``for a, b in pairs`` unpacks each item through the guards: one step per item, not per element.
    def iter_unpack(self, it: Any, spec: Any, _getiter_: Any = None) -> Iterator[Any]:
        for ob in self.getiter(it):
            yield guarded_unpack_sequence(ob, spec, iter)  # type: ignore[no-untyped-call]

    def unpack(self, ob: Any, spec: Any, _getiter_: Any = None) -> Any:
        return guarded_unpack_sequence(ob, spec, iter)  # type: ignore[no-untyped-call]

    def text(self) -> str:
        return self.printed.text()


def _denied(name: str, hint: str) -> Callable[..., Any]:
    def denied(*_args: Any, **_kwargs: Any) -> Any:
        raise PolicyError(f"{name} is not available in the sandbox: {hint}")

    denied.__name__ = name
    return denied


def _import(name: str, *_args: Any, **_kwargs: Any) -> Any:
    raise PolicyError(
        f"import of {quoted(name)} is not allowed in the sandbox: no module can be imported; "
        "use the builtins and the provided functions (json.dumps / json.loads are available)"
    )


_FORMAT_NAMES: Final = frozenset({"format", "format_map", "get_field", "get_value", "vformat", "Formatter"})

# Attributes that lead from an object to its class hierarchy, whose end is the real ``object``
# (the ``object`` builtin is a stub). The plain ones (``mro``, taken from ``type`` itself so a
# method a later Python adds to ``type`` is refused too) are refused on *every* object, not only
# on classes: a ``types.GenericAlias`` (``list[int]``) forwards plain attributes to its class, and
# an instance may forward them too. The dunder ones are refused anyway (the "_" rule); they are
# listed so the hierarchy stays closed if that rule ever changes.
_TYPE_ATTRIBUTES: Final = frozenset(n for n in dir(type) if not n.startswith("_")) | frozenset(
    {
        "__mro__",
        "__bases__",
        "__base__",
        "__subclasses__",
        "__class__",
        "__origin__",
        "__args__",
        "__parameters__",
        "__orig_bases__",
        "__orig_class__",
        "__type_params__",
        "__value__",
    }
)


def _check_attribute(obj: Any, name: str) -> None:
    if type(name) is not str:
        raise TypeError(f"attribute name must be a str, got {type(name).__name__}")
    if name in _TYPE_ATTRIBUTES:
        raise PolicyError(
            f"attribute {quoted(name)} is not accessible on any object (type introspection is blocked); "
            "use isinstance() or issubclass()"
        )
    if name[:1] == "_":
        raise PolicyError(f'attribute {quoted(name)} is not accessible: names starting with "_" are blocked')
    if name in INSPECT_ATTRIBUTES or name.endswith("__roles__"):
        raise PolicyError(
            f"attribute {quoted(name)} is not accessible (frame and code introspection is blocked)"
        )
    if name in _FORMAT_NAMES:
        if name in ("format", "format_map") and (
            isinstance(obj, str) or (isinstance(obj, type) and issubclass(obj, str))
        ):
            raise PolicyError(
                f"str.{name} is blocked (it can read arbitrary attributes, CVE-2023-41039); use an f-string"
            )
        if (
            obj is string
            or isinstance(obj, string.Formatter)
            or (isinstance(obj, type) and issubclass(obj, string.Formatter))
        ):
            raise PolicyError("string.Formatter is blocked (it can read arbitrary attributes)")


def _getattr(obj: Any, name: str, *default: Any) -> Any:
    if len(default) > 1:
        raise TypeError(f"getattr expected at most 3 arguments, got {2 + len(default)}")
    _check_attribute(obj, name)
    try:
        return _upstream_getattr(obj, name)  # RestrictedPython's own checks, a second layer
    except AttributeError:
        if default:
            return default[0]
        raise


def _hasattr(obj: Any, name: str) -> bool:
    _check_attribute(obj, name)
    try:
        _upstream_getattr(obj, name)
    except AttributeError:
        return False
    return True


_INPLACE: Final[Mapping[str, Callable[[Any, Any], Any]]] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "|=": operator.ior,
    "^=": operator.ixor,
    "&=": operator.iand,
    "@=": operator.imatmul,
}


class _Unwritable:
    """What the write guard hands back for an object restricted code may not change."""

    __slots__ = ("_what",)
    _what: str

    def __init__(self, ob: Any) -> None:
        object.__setattr__(self, "_what", type(ob).__name__)

    def _refuse(self, what: str) -> PolicyError:
        return PolicyError(
            f"cannot {what} of a {self._what} object: only dicts, lists and instances "
            "of classes defined in this code can be changed"
        )

    def __setattr__(self, name: str, _value: Any) -> None:
        raise self._refuse(f"set attribute {quoted(name)}")

    def __delattr__(self, name: str) -> None:
        raise self._refuse(f"delete attribute {quoted(name)}")

    def __setitem__(self, _key: Any, _value: Any) -> None:
        raise self._refuse("assign items")

    def __delitem__(self, _key: Any) -> None:
        raise self._refuse("delete items")


def _write(ob: Any) -> Any:
    # Looked up on the type (or the class itself), not the instance, so no `__getattr__` runs.
    if type(ob) in (dict, list) or getattr(type(ob), "_guarded_writes", False):
        return ob
    if isinstance(ob, type) and getattr(ob, "_guarded_writes", False):
        return ob
    return _Unwritable(ob)


def _inplacevar(op: str, target: Any, value: Any) -> Any:
    return _INPLACE[op](target, value)


def _apply(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


def _metaclass(name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
    # Classes defined by restricted code may have their own attributes written
    # (`self.x = 1`); RestrictedPython's write guard refuses writes to any other object.
    namespace["_guarded_writes"] = True
    return type(name, bases, namespace)


def _json_dumps(obj: Any, **kwargs: Any) -> str:
    kwargs.setdefault("ensure_ascii", False)
    return json.dumps(obj, **kwargs)


# Our `_getiter_` is plain `iter` (iteration is not a security check here: reachable
# objects are plain data), so the C-iterating builtins RestrictedPython leaves out are safe.
_EXTRA_BUILTINS: Final[Mapping[str, Any]] = {
    "all": all,
    "any": any,
    "dict": dict,
    "enumerate": enumerate,
    "filter": filter,
    "frozenset": frozenset,
    "getattr": _getattr,
    "hasattr": _hasattr,
    "iter": iter,
    "list": list,
    "map": map,
    "max": max,
    "min": min,
    "next": next,
    "reversed": reversed,
    "set": set,
    "sorted": sorted,
    "sum": sum,
    "tuple": tuple,
    "zip": zip,
    "PolicyError": PolicyError,
    "json": types.SimpleNamespace(dumps=_json_dumps, loads=json.loads),
}

_DENIED: Final[Mapping[str, str]] = {
    "open": "there is no file access; read data with read_resource(uri=...)",
    "exec": "code cannot create code",
    "eval": "code cannot create code",
    "compile": "code cannot create code",
    "input": "there is no console",
    "breakpoint": "there is no debugger",
    "globals": "namespaces cannot be inspected",
    "locals": "namespaces cannot be inspected",
    "vars": "namespaces cannot be inspected",
    "dir": "objects cannot be introspected",
    "type": "use isinstance(x, dict) and friends",
    "object": "use a plain class or a dict",
    "super": "only simple classes are supported",
    "setattr": "assign attributes of your own objects directly (obj.x = 1)",
    "delattr": "attributes of other objects cannot be deleted",
    "help": "there is no help system",
    "exit": "the code cannot stop the host",
    "quit": "the code cannot stop the host",
    "memoryview": "raw memory is not available",
}

_GUARDS: Final[Mapping[str, Any]] = {
    "_getattr_": _getattr,
    "_getitem_": operator.getitem,
    "_getiter_": iter,
    "_write_": _write,
    "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
    "_unpack_sequence_": guarded_unpack_sequence,
    "_inplacevar_": _inplacevar,
    "_apply_": _apply,
    "__metaclass__": _metaclass,
    "__import__": _import,
}

_IDENTIFIER: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def new_scope(
    functions: Mapping[str, Any] | None = None,
    *,
    label: str = "<repl>",
    max_printed: int = MAX_PRINTED,
    max_loop_steps: int | None = None,
) -> dict[str, Any]:
    """A fresh persistent scope: guarded builtins plus ``functions`` (e.g. catalog callables).

    Pass the same dict to every run; top-level variables persist in it. ``max_loop_steps``
    bounds the loop iterations of one run (``StepLimitError``); ``None``: unbounded.
    """
    if max_loop_steps is not None and (isinstance(max_loop_steps, bool) or max_loop_steps < 1):
        raise ValueError(f"max_loop_steps must be an int >= 1 or None, got {max_loop_steps!r}")
    builtins: dict[str, Any] = {k: v for k, v in safe_builtins.items() if not k.startswith("_getattr")}
    builtins.update(_EXTRA_BUILTINS)
    builtins.update({name: _denied(f"{name}()", hint) for name, hint in _DENIED.items()})
    builtins.update(_GUARDS)
    state = _ScopeState(
        label=label,
        max_printed=max_printed,
        functions=tuple(sorted(functions or ())),
        printed=_Printed(max_printed),
        max_loop_steps=max_loop_steps,
    )
    builtins["_print_"] = state.collector
    builtins[_TICK] = state.tick
    if max_loop_steps is not None:
        builtins["_getiter_"] = state.getiter
        builtins["_iter_unpack_sequence_"] = state.iter_unpack
        builtins["_unpack_sequence_"] = state.unpack
    builtins[_STATE] = state
    scope: dict[str, Any] = {"__builtins__": builtins, "__name__": label}
    for name, value in (functions or {}).items():
        if not _IDENTIFIER.fullmatch(name) or name in ("print", "printed"):
            raise ValueError(
                f"scope function name {quoted(name)} is not usable: use an identifier not starting with '_'"
            )
        scope[name] = value
    return scope


def _state(scope: Mapping[str, Any]) -> _ScopeState:
    try:
        state: _ScopeState = scope["__builtins__"][_STATE]
    except (KeyError, TypeError):
        raise TypeError(
            "not a sandbox scope: make it with asyncai_watch.filters.sandbox.new_scope()"
        ) from None
    return state


def _begin(scope: dict[str, Any]) -> _ScopeState:
    state = _state(scope)
    state.printed.reset()
    state.steps = 0
    scope.pop(_VALUE, None)
    return state


def run_sync(code: ReplCode, scope: dict[str, Any]) -> ReplResult:
    """Run plain (non-await) code in ``scope``. Exceptions from the code propagate;
    :func:`last_printed` still has what it printed before failing."""
    if code.is_async:
        raise TypeError("this code was compiled with allow_await=True: run it with run_async()")
    state = _begin(scope)
    exec(code.code, scope)
    return ReplResult(value=scope.pop(_VALUE, None), printed=state.text())


async def run_async(code: ReplCode, scope: dict[str, Any]) -> ReplResult:
    """Run code compiled with ``allow_await=True`` (top-level ``await``) in ``scope``."""
    if not code.is_async:
        raise TypeError("this code was compiled without allow_await: run it with run_sync()")
    state = _begin(scope)
    exec(code.code, scope)  # defines the wrapper coroutine function in the scope
    entry = scope.pop(_ENTRY)
    value = await entry()
    return ReplResult(value=value, printed=state.text())


def last_printed(scope: Mapping[str, Any]) -> str:
    """What the most recent run in ``scope`` printed (useful after it raised)."""
    return _state(scope).text()


def scope_variables(scope: Mapping[str, Any]) -> dict[str, str]:
    """Variables the code defined (name -> type name), without the provided functions."""
    state = _state(scope)
    return {
        name: type(value).__name__
        for name, value in scope.items()
        if not name.startswith("_") and name not in state.functions
    }


def error_line(exc: BaseException, filename: str) -> int | None:
    """The line of ``filename`` (the restricted code) where ``exc`` was raised, innermost first."""
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        return exc.lineno
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def describe_error(exc: BaseException, filename: str, scope: Mapping[str, Any] | None = None) -> str:
    """One clear line for an exception from restricted code: ``KeyError: 'metadata' (line 2)``."""
    text = str(exc) if not isinstance(exc, SyntaxError) else (exc.msg or str(exc))
    out = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    line = error_line(exc, filename)
    if line is not None and not (isinstance(exc, SyntaxError) and text.startswith("Line ")):
        out += f" (line {line})"
    if type(exc) is NameError and scope is not None:
        funcs = _state(scope).functions
        out += (
            f"; the provided functions are: {', '.join(funcs)}"
            if funcs
            else "; no functions are provided here"
        ) + " (no imports, no open)"
    return out
