"""The shared RestrictedPython policy: REPL semantics, top-level await, and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.filters import sandbox
from asyncai_watch.filters.sandbox import PolicyError, compile_repl, new_scope, run_async, run_sync

pytestmark = pytest.mark.anyio

FILE = "<t>"


async def fetch(uri: str) -> dict[str, Any]:
    return {"uri": uri, "size": len(uri)}


async def execute(
    source: str, *, allow_await: bool, scope: dict[str, Any] | None = None
) -> sandbox.ReplResult:
    scope = new_scope({"fetch": fetch}) if scope is None else scope
    code = compile_repl(source, filename=FILE, allow_await=allow_await)
    if allow_await:
        return await run_async(code, scope)
    return run_sync(code, scope)


MODES = [pytest.param(False, id="plain"), pytest.param(True, id="await")]

# (source, exception type, a fragment the message must contain)
REJECTED: list[tuple[str, type[BaseException], str]] = [
    ("import os", PolicyError, "import of 'os'"),
    ("from os import path", PolicyError, "import of 'os'"),
    ("import json as j", PolicyError, "import of 'json'"),
    ("open('/etc/passwd')", PolicyError, "open() is not available"),
    ("().__class__", SyntaxError, '"__class__" is an invalid attribute name'),
    ("x = {}\nx.__dict__", SyntaxError, '"__dict__" is an invalid attribute name'),
    ("getattr((), '__class__')", PolicyError, "'__class__' is not accessible"),
    ("getattr((), '__cla' + 'ss__', None)", PolicyError, "'__class__' is not accessible"),
    ("hasattr((), '__class__')", PolicyError, "'__class__' is not accessible"),
    ("__import__('os')", SyntaxError, '"__import__" is an invalid variable name'),
    ("'{0.__class__}'.format(1)", PolicyError, "str.format is blocked"),
    ("'{x.__class__}'.format_map({'x': 1})", PolicyError, "str.format_map is blocked"),
    ("str.format('{0.__class__}', 1)", PolicyError, "str.format is blocked"),
    ("f = getattr('', 'format')", PolicyError, "str.format is blocked"),
    ("exec('x = 1')", SyntaxError, "Exec calls are not allowed"),
    ("eval('1')", SyntaxError, "Eval calls are not allowed"),
    ("e = exec\ne('x = 1')", PolicyError, "exec() is not available"),
    ("compile('1', 'f', 'exec')", PolicyError, "compile() is not available"),
    ("globals()", PolicyError, "globals() is not available"),
    ("type(1)", PolicyError, "type() is not available"),
    ("json.dumps = None", PolicyError, "cannot set attribute 'dumps' of a SimpleNamespace object"),
    ("n = 5\nn.real = 2", PolicyError, "cannot set attribute 'real' of a int object"),
    ("setattr(json, 'x', 1)", PolicyError, "setattr() is not available"),
    ("def gen():\n    yield 1\ngen().gi_frame", SyntaxError, '"gi_frame" is a restricted name'),
    ("def gen():\n    yield 1\ngetattr(gen(), 'gi_frame')", PolicyError, "'gi_frame' is not accessible"),
    ("def f(_getattr_, /):\n    pass", SyntaxError, '"_getattr_" is an invalid variable name'),
    ("try:\n    pass\nexcept* ValueError:\n    pass", SyntaxError, "TryStar statements are not allowed"),
    ("async def f():\n    pass", SyntaxError, "AsyncFunctionDef statements are not allowed"),
    ("print('x', file=json)", PolicyError, "print(file=...) is not available"),
    ("return 1", SyntaxError, "'return' outside function"),
    ("yield 1", SyntaxError, "'yield' outside function"),
    ("nonlocal x", SyntaxError, ""),
    ("x: int = 1", SyntaxError, "AnnAssign statements are not allowed"),
    # The real `object` (and with it every class) must stay out of reach: `object` is a stub.
    ("class A:\n    pass\nA.mro()[-1]", PolicyError, "'mro' is not accessible"),
    ("class A(ValueError):\n    pass\nA.mro()", PolicyError, "'mro' is not accessible"),
    ("ValueError.mro()[-1]", PolicyError, "'mro' is not accessible"),
    ("PolicyError.mro()", PolicyError, "'mro' is not accessible"),
    ("getattr(int, 'mro')", PolicyError, "'mro' is not accessible"),
    ("hasattr(str, 'mro')", PolicyError, "'mro' is not accessible"),
    # A generic alias forwards every plain attribute to its class, so the guard holds for any object.
    ("list[int].mro()", PolicyError, "'mro' is not accessible"),
    ("dict[str, int].mro()[-1]", PolicyError, "'mro' is not accessible"),
    ("getattr(tuple[int, ...], 'mro')", PolicyError, "'mro' is not accessible"),
    ("hasattr(list[int], 'mro')", PolicyError, "'mro' is not accessible"),
    ("getattr(int | str, 'mro', None)", PolicyError, "'mro' is not accessible"),
    ("getattr(list[int] | None, 'mro', None)", PolicyError, "'mro' is not accessible"),
    ("class A:\n    pass\nA().mro", PolicyError, "'mro' is not accessible"),
    ("getattr(list[int], '__mro__')", PolicyError, "'__mro__' is not accessible"),
    ("getattr(list[int], '__origin__')", PolicyError, "'__origin__' is not accessible"),
    ("getattr(int | str, '__args__')", PolicyError, "'__args__' is not accessible"),
    ("getattr(list[int], '__bases__')", PolicyError, "'__bases__' is not accessible"),
    ("list[int].__subclasses__()", SyntaxError, '"__subclasses__" is an invalid attribute'),
    ("class A:\n    pass\nA.__mro__", SyntaxError, '"__mro__" is an invalid attribute name'),
    ("class A:\n    pass\nA.__bases__", SyntaxError, '"__bases__" is an invalid attribute name'),
    ("class A:\n    pass\nA.__subclasses__()", SyntaxError, '"__subclasses__" is an invalid attribute'),
    ("class A:\n    pass\ngetattr(A, '__base__')", PolicyError, "'__base__' is not accessible"),
    ("class A:\n    pass\ngetattr(A(), '__class__')", PolicyError, "'__class__' is not accessible"),
    ("type(1)", PolicyError, "type() is not available"),
    ("object()", PolicyError, "object() is not available"),
    ("class A:\n    def f(self):\n        return super()\nA().f()", PolicyError, "super() is not"),
    ("class A(metaclass=type):\n    pass", SyntaxError, 'keyword argument "metaclass" is not allowed'),
]


@pytest.mark.parametrize("allow_await", MODES)
@pytest.mark.parametrize(("source", "error", "fragment"), REJECTED, ids=[r[0][:40] for r in REJECTED])
async def test_policy_rejects_the_same_code_in_both_modes(
    source: str, error: type[BaseException], fragment: str, allow_await: bool
) -> None:
    with pytest.raises(error) as info:
        await execute(source, allow_await=allow_await)
    assert fragment in str(info.value)


def test_no_class_reachable_by_name_hands_out_its_metaclass_attributes() -> None:
    # Every class a filter can name (builtins, exception classes, its own), its generic alias
    # (`list[int]` forwards plain attributes to `list`), its union with None, and every
    # attribute classes get from `type`: each refused, so no class's mro() reaches `object`.
    scope = new_scope()
    run_sync(compile_repl("class Mine:\n    pass"), scope)
    classes = [v for v in scope["__builtins__"].values() if isinstance(v, type)] + [scope["Mine"]]
    assert len(classes) > 40
    aliases = [run_sync(compile_repl(f"{n}[int]"), scope).value for n in ("list", "dict", "tuple", "set")]
    unions = [cls | None for cls in classes]
    names = [n for n in dir(type) if not n.startswith("_")]
    assert "mro" in names
    for obj in [*classes, *aliases, *unions, scope["Mine"]()]:
        for name in names:
            run = compile_repl(f"getattr(c, {name!r}, 'absent')")
            scope["c"] = obj
            with pytest.raises(PolicyError, match="is not accessible"):
                run_sync(run, scope)
    # Plain data keeps its ordinary attributes.
    assert run_sync(compile_repl("m = Mine()\nm.size = 1\n(m.size, 'a'.upper(), (2).real)"), scope).value == (
        1,
        "A",
        2,
    )


@pytest.mark.parametrize("allow_await", MODES)
async def test_last_expression_is_the_value(allow_await: bool) -> None:
    assert (await execute("x = 2\nx * 21", allow_await=allow_await)).value == 42
    assert (await execute("x = 2", allow_await=allow_await)).value is None
    # Only a top-level expression statement counts, not one inside a block.
    assert (await execute("if True:\n    5", allow_await=allow_await)).value is None
    assert (await execute("", allow_await=allow_await)).value is None


@pytest.mark.parametrize("allow_await", MODES)
async def test_printed_output_is_collected(allow_await: bool) -> None:
    source = "def shout(s):\n    print(s.upper())\nprint('a', 1)\nshout('b')\nprint('c', end='')\nprinted"
    result = await execute(source, allow_await=allow_await)
    assert result.printed == "a 1\nB\nc"
    assert result.value == "a 1\nB\nc"  # `printed` reads the run's output so far


@pytest.mark.parametrize("allow_await", MODES)
async def test_variables_and_functions_persist_across_runs(allow_await: bool) -> None:
    scope = new_scope({"fetch": fetch})
    await execute(
        "n = 1\ndef twice(v):\n    return v * 2\nclass Box:\n    pass", allow_await=allow_await, scope=scope
    )
    await execute("n += 1\nfor i in range(3):\n    last = i", allow_await=allow_await, scope=scope)
    result = await execute("b = Box()\nb.v = twice(n) + last\nb.v", allow_await=allow_await, scope=scope)
    assert result.value == 6
    assert sandbox.scope_variables(scope) == {
        "n": "int",
        "twice": "function",
        "Box": "type",
        "i": "int",
        "last": "int",
        "b": "Box",
    }


async def test_top_level_await_of_a_provided_function() -> None:
    scope = new_scope({"fetch": fetch})
    result = await execute(
        "page = await fetch(uri='memo://notes')\npage['size']", allow_await=True, scope=scope
    )
    assert result.value == len("memo://notes")
    assert scope["page"] == {"uri": "memo://notes", "size": 12}
    # Names bound in loops, comprehensions with await, and except clauses work too.
    source = (
        "sizes = [(await fetch(uri=u))['size'] for u in ['a', 'bb']]\n"
        "for u in ['ccc']:\n"
        "    got = await fetch(uri=u)\n"
        "try:\n"
        "    missing = page['nope']\n"
        "except KeyError as err:\n"
        "    why = str(err)\n"
        "(sizes, got['size'], why)"
    )
    result = await execute(source, allow_await=True, scope=scope)
    assert result.value == ([1, 2], 3, "'nope'")
    assert scope["got"] == {"uri": "ccc", "size": 3}
    assert "missing" not in scope


async def test_plain_mode_refuses_await() -> None:
    with pytest.raises(SyntaxError, match="await is not allowed here"):
        compile_repl("await fetch(uri='x')")


@pytest.mark.parametrize("allow_await", MODES)
async def test_errors_keep_the_original_line_numbers(allow_await: bool) -> None:
    with pytest.raises(SyntaxError) as info:
        compile_repl("a = 1\nb = 2\nc = a.__class__", filename=FILE, allow_await=allow_await)
    assert info.value.lineno == 3
    with pytest.raises(SyntaxError) as info:
        compile_repl("a = 1\nb = (\n", filename=FILE, allow_await=allow_await)
    assert info.value.lineno == 2
    with pytest.raises(KeyError) as err:
        await execute("a = {}\n\na['k']", allow_await=allow_await)
    assert sandbox.error_line(err.value, FILE) == 3
    assert sandbox.describe_error(err.value, FILE) == "KeyError: 'k' (line 3)"


@pytest.mark.parametrize("allow_await", MODES)
async def test_dicts_lists_and_own_objects_can_be_changed(allow_await: bool) -> None:
    source = (
        "d = {'a': [1]}\nd['b'] = 2\nd['a'].append(3)\ndel d['b']\n"
        "class P:\n    def __init__(self, v):\n        self.v = v\n"
        "p = P(1)\np.v = p.v + 1\nP.kind = 'point'\n"
        "x, (y, z) = 1, (2, 3)\n"
        "(d, p.v, P.kind, x + y + z, json.loads(json.dumps({'k': 'é'})))"
    )
    result = await execute(source, allow_await=allow_await)
    assert result.value == ({"a": [1, 3]}, 2, "point", 6, {"k": "é"})


async def test_functions_from_earlier_runs_print_into_the_current_run() -> None:
    scope = new_scope()
    run_sync(compile_repl("say = lambda s: print(s)\ndef shout(s):\n    print(s.upper())"), scope)
    result = run_sync(compile_repl("say('a')\nshout('b')"), scope)
    assert result.printed == "a\nB\n"
    assert run_sync(compile_repl("1"), scope).printed == ""


async def test_failed_run_keeps_what_it_printed() -> None:
    scope = new_scope()
    with pytest.raises(ZeroDivisionError):
        run_sync(compile_repl("print('before')\n1 / 0"), scope)
    assert sandbox.last_printed(scope) == "before\n"


async def test_printed_output_is_capped() -> None:
    scope = new_scope(max_printed=10)
    result = run_sync(compile_repl("for i in range(5):\n    print('abcdef')"), scope)
    assert result.printed.startswith("abcdef\nabc\n[printed output truncated at 10 characters]")


async def test_name_error_lists_the_provided_functions() -> None:
    scope = new_scope({"read_resource": fetch})
    with pytest.raises(NameError) as err:
        run_sync(compile_repl("memo_set(key='a')", filename=FILE), scope)
    text = sandbox.describe_error(err.value, FILE, scope)
    assert "name 'memo_set' is not defined (line 1)" in text
    assert "read_resource" in text


async def test_mode_mismatch_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="run_async"):
        run_sync(compile_repl("1", allow_await=True), new_scope())
    with pytest.raises(TypeError, match="run_sync"):
        await run_async(compile_repl("1"), new_scope())
    with pytest.raises(ValueError, match="not usable"):
        new_scope({"_hidden": 1})


@given(
    names=st.lists(
        st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6), min_size=1, max_size=5, unique=True
    ),
    values=st.lists(st.integers(), min_size=5, max_size=5),
)
def test_assigned_names_persist_in_the_await_mode(names: list[str], values: list[int]) -> None:
    import keyword

    names = [n for n in names if not keyword.iskeyword(n) and n not in ("print", "printed")]
    if not names:
        return
    scope = new_scope()
    source = "\n".join(f"{n} = {v}" for n, v in zip(names, values, strict=False))
    # Nothing here awaits, so one send() runs the coroutine to completion (no event loop).
    coro = run_async(compile_repl(source, allow_await=True), scope)
    with pytest.raises(StopIteration):
        coro.send(None)
    for n, v in zip(names, values, strict=False):
        assert scope[n] == v


@pytest.mark.anyio
@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "n = 0\nwhile n >= 0:\n    n += 1",
        "s = 0\nfor i in range(10**9):\n    s += i",
        "xs = [i for i in range(10**9)]",
        "while True:\n    try:\n        pass\n    except Exception:\n        pass",
        "def f(n):\n    return f(n - 1) + f(n - 1) if n else 1\nf(40)",  # recursion, no loop at all
        "f = lambda n: f(n - 1) + f(n - 1) if n else 1\nf(40)",
    ],
)
async def test_a_runaway_loop_in_await_mode_is_stopped_by_the_step_budget(code: str) -> None:
    # run_code shares the agent's event loop; a loop that never awaits must end by itself.
    scope = new_scope(max_loop_steps=1000)
    with pytest.raises(sandbox.StepLimitError, match=r"more than 1,000 loop iterations and calls in one run"):
        await run_async(compile_repl(code, allow_await=True), scope)


@pytest.mark.anyio
async def test_the_step_budget_is_per_run_and_leaves_normal_loops_alone() -> None:
    scope = new_scope(max_loop_steps=1000)
    code = compile_repl("t = 0\nfor i in range(600):\n    t += i\nt", allow_await=True)
    assert (await run_async(code, scope)).value == sum(range(600))
    assert (await run_async(code, scope)).value == sum(range(600))  # a new run, a new budget
    assert (await run_async(compile_repl("[x * 2 for x in 'abc']", allow_await=True), scope)).value == [
        "aa",
        "bb",
        "cc",
    ]
    with pytest.raises(ValueError, match=r"max_loop_steps must be an int >= 1 or None, got 0"):
        new_scope(max_loop_steps=0)


@pytest.mark.anyio
async def test_unpacking_loops_count_one_step_per_item() -> None:
    scope = new_scope(max_loop_steps=1000)
    code = "pairs = [(i, (i, i)) for i in range(400)]\nt = 0\nfor a, (b, c) in pairs:\n    t += a + b + c\nt"
    # 400 items built + 400 taken: within 1000, although each item unpacks into three elements.
    assert (await run_async(compile_repl(code, allow_await=True), scope)).value == 3 * sum(range(400))
