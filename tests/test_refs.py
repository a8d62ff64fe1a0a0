"""Durable function references and the JSON argument rules (``timewheel.refs``)."""

from __future__ import annotations

import enum
import functools
import json
import math
import sys
import types
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timewheel import refs
from timewheel.errors import SerializationError, TimewheelError
from timewheel.refs import (
    UnresolvableRefError,
    check_json,
    func_ref,
    is_resolvable,
    register,
    register_task,
    resolve_ref,
    type_ref,
    unregister,
)


def module_level(x: int) -> int:
    return x + 1


class Holder:
    def method(self) -> None: ...

    @staticmethod
    def static() -> str:
        return "static"

    @classmethod
    def klass(cls) -> str:
        return cls.__name__


class Color(enum.IntEnum):
    RED = 1


def _shadowed() -> None: ...


def shadow_target() -> None: ...


_shadowed.__qualname__ = "shadow_target"  # claims a name that belongs to another function


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    before = refs.registered()
    yield
    for name in set(refs.registered()) - set(before):
        unregister(name)


# -- func_ref / resolve_ref ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (module_level, f"{__name__}:module_level"),
        (json.dumps, "json:dumps"),
        (len, "builtins:len"),
        (Holder, f"{__name__}:Holder"),
        (Holder.static, f"{__name__}:Holder.static"),
        (Holder.klass, f"{__name__}:Holder.klass"),
        (datetime.fromisoformat, "datetime:datetime.fromisoformat"),
    ],
    ids=["function", "stdlib", "builtin", "class", "staticmethod", "classmethod", "c-classmethod"],
)
def test_func_ref_round_trips(obj: Any, expected: str) -> None:
    ref = func_ref(obj)
    assert ref == expected
    back = resolve_ref(ref)
    assert back is obj or back == obj
    assert is_resolvable(ref)


def test_func_ref_passes_strings_through() -> None:
    assert func_ref("anything:at_all") == "anything:at_all"
    with pytest.raises(SerializationError, match="empty string"):
        func_ref("")


def test_lambda_refused() -> None:
    with pytest.raises(SerializationError, match=r"lambda .*register"):
        func_ref(lambda: None)


def test_nested_function_refused() -> None:
    def inner() -> None: ...

    with pytest.raises(SerializationError, match=r"inside another function.*module level"):
        func_ref(inner)


def test_bound_method_refused() -> None:
    with pytest.raises(SerializationError, match=r"bound method .*Holder instance"):
        func_ref(Holder().method)


def test_partial_refused() -> None:
    with pytest.raises(SerializationError, match=r"functools.partial.*args=/kwargs="):
        func_ref(functools.partial(module_level, 1))


def test_callable_instance_refused() -> None:
    class Call:
        def __call__(self) -> None: ...

    with pytest.raises(SerializationError, match="no __module__/__qualname__"):
        func_ref(Call())


def test_main_function_refused_with_a_way_out() -> None:
    def f() -> None: ...

    f.__module__ = "__main__"
    f.__qualname__ = "f"
    with pytest.raises(SerializationError) as info:
        func_ref(f)
    msg = str(info.value)
    assert "__main__" in msg
    assert "another process" in msg
    assert "register" in msg


def test_main_function_allowed_when_registered() -> None:
    def f() -> None: ...

    f.__module__ = "__main__"
    register_task("main-f", f)
    assert func_ref(f) == "main-f"
    assert resolve_ref("main-f") is f


def test_rebound_name_refused() -> None:
    with pytest.raises(SerializationError, match="different object"):
        func_ref(_shadowed)


def test_type_ref() -> None:
    assert type_ref(ValueError) == "builtins:ValueError"
    assert type_ref(Holder) == f"{__name__}:Holder"

    class Local(Exception): ...

    with pytest.raises(SerializationError, match="inside another function"):
        type_ref(Local)


# -- registry ----------------------------------------------------------------------------------------
def test_register_with_name() -> None:
    @register("add-one")
    def add_one(x: int) -> int:
        return x + 1

    assert func_ref(add_one) == "add-one"
    assert resolve_ref("add-one") is add_one
    assert "add-one" in refs.registered()


def test_register_bare_uses_module_qualname() -> None:
    def g() -> None: ...

    g.__qualname__ = "g_registered"
    assert register(g) is g
    assert func_ref(g) == f"{__name__}:g_registered"
    assert resolve_ref(f"{__name__}:g_registered") is g


def test_names_resolve_before_import_paths() -> None:
    register_task("json:dumps", module_level)
    assert resolve_ref("json:dumps") is module_level
    unregister("json:dumps")
    assert resolve_ref("json:dumps") is json.dumps


def test_register_conflict_and_reregister() -> None:
    register_task("job", module_level)
    register_task("job", module_level)  # the same function again: fine
    with pytest.raises(SerializationError, match=r"'job' is already registered for .*module_level"):
        register_task("job", json.dumps)
    assert unregister("job") is True
    assert unregister("job") is False
    with pytest.raises(SerializationError, match="non-empty str"):
        register_task("", module_level)
    with pytest.raises(SerializationError, match="needs a callable"):
        register_task("x", 3)  # type: ignore[arg-type]  # deliberately wrong


def test_generation_changes_with_the_registry() -> None:
    g0 = refs.generation()
    register_task("gen", module_level)
    assert refs.generation() != g0


def test_func_ref_answers_again_as_the_first_time() -> None:
    """The answer kept for a function follows what would change it: a registration, an
    unregistration, a name re-bound in its module, the module gone from ``sys.modules``."""
    mod = types.ModuleType("tw_kept_refs")
    sys.modules[mod.__name__] = mod

    def job() -> None: ...

    job.__module__, job.__qualname__ = mod.__name__, "job"
    mod.job = job  # type: ignore[attr-defined]
    try:
        assert func_ref(job) == func_ref(job) == "tw_kept_refs:job"
        register_task("kept-job", job)
        assert func_ref(job) == "kept-job"
        unregister("kept-job")
        assert func_ref(job) == "tw_kept_refs:job"
        mod.job = module_level  # type: ignore[attr-defined]
        with pytest.raises(SerializationError, match="different object"):
            func_ref(job)
        mod.job = job  # type: ignore[attr-defined]
        assert func_ref(job) == "tw_kept_refs:job"
        del sys.modules[mod.__name__]
        with pytest.raises(SerializationError, match="not imported"):
            func_ref(job)
    finally:
        sys.modules.pop(mod.__name__, None)
    assert func_ref(Holder.klass) == func_ref(Holder.klass) == f"{__name__}:Holder.klass"


def test_func_ref_answers_right_past_the_answers_it_keeps() -> None:
    """Past the bound of kept answers, every function still gets its own reference (asked
    twice: the second answer may come from what was kept), what is kept stays bounded, and a
    name registered again answers for its new function only (the registry fixture cleans up)."""
    functions = [functools.partial(module_level, k) for k in range(600)]
    for k, func in enumerate(functions):
        register_task(f"bounded-{k}", func)
    for _ in range(2):
        for k, func in enumerate(functions):
            assert func_ref(func) == f"bounded-{k}"
            assert len(refs._refs_of) <= refs._REFS_KEPT
    replacement = functools.partial(module_level, -1)
    unregister("bounded-599")
    register_task("bounded-599", replacement)  # the name now runs another function
    assert func_ref(replacement) == "bounded-599"
    with pytest.raises(SerializationError):
        func_ref(functions[599])  # a partial has no import path of its own


def test_allowlist_check_follows_the_registry() -> None:
    allowlist = refs.Allowlist(["json"])
    allowlist.check("json:dumps")
    allowlist.check("json:dumps")
    with pytest.raises(refs.ReferenceNotAllowedError):
        allowlist.check("kept-name-a:b")
    with pytest.raises(refs.ReferenceNotAllowedError):
        allowlist.check("os:system")
    register_task("os:system", module_level)  # a registered name runs whatever its text
    allowlist.check("os:system")
    unregister("os:system")
    with pytest.raises(refs.ReferenceNotAllowedError):
        allowlist.check("os:system")


# -- resolve errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ref", "match"),
    [
        ("no_such_module_xyz:f", "cannot be imported"),
        ("json:no_such_function", "no attribute path 'no_such_function'"),
        ("json:__name__", "not callable"),
        ("no-colon-and-not-registered", "neither a registered task name"),
    ],
)
def test_resolve_errors_name_the_reference(ref: str, match: str) -> None:
    refs.permit_imports(["no_such_module_xyz"])  # let the import be tried (and fail)
    with pytest.raises(UnresolvableRefError, match=match) as info:
        resolve_ref(ref)
    assert info.value.ref == ref
    assert repr(ref) in str(info.value)
    assert isinstance(info.value, SerializationError)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, TimewheelError)
    assert not is_resolvable(ref)


def test_resolve_ref_never_imports_a_module_no_allowlist_allows() -> None:
    ref = "no_such_module_never_permitted:f"
    with pytest.raises(refs.ReferenceNotAllowedError, match="it was not imported") as info:
        resolve_ref(ref)
    assert info.value.ref == ref
    assert isinstance(info.value, UnresolvableRefError)
    assert "allow=['no_such_module_never_permitted']" in str(info.value)
    assert not is_resolvable(ref)


# -- check_json ---------------------------------------------------------------------------------------
def test_check_json_accepts_json_values() -> None:
    check_json((1, "a", None, True, 2.5, [1, [2]], {"k": {"n": [None]}}), {"x": [], "y": {}})
    check_json([], {})


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((1, (2, 3)), {}, r"args\[1\] is a tuple .*pass a list"),
        ((), {"when": [1, (2,)]}, r"kwargs\['when'\]\[1\] is a tuple"),
        (({1: "a"},), {}, r"args\[0\] has the key 1 of type int.*'1'"),
        ((math.nan,), {}, r"args\[0\] is nan.*NaN"),
        ((), {"x": math.inf}, r"kwargs\['x'\] is inf"),
        (({1, 2},), {}, r"args\[0\] is a builtins.set"),
        ((datetime(2026, 1, 1, tzinfo=timezone.utc),), {}, r"datetime.datetime.*ISO"),
        ((Color.RED,), {}, r"args\[0\] is a Color \(a int subclass\)"),
        ((), {3: 1}, r"kwargs key 3 is a int"),
        ((b"bytes",), {}, r"args\[0\] is a builtins.bytes"),
    ],
    ids=[
        "tuple",
        "nested-tuple",
        "int-key",
        "nan",
        "inf",
        "set",
        "datetime",
        "intenum",
        "kwarg-key",
        "bytes",
    ],
)
def test_check_json_refuses(args: Any, kwargs: Any, match: str) -> None:
    with pytest.raises(SerializationError, match=match):
        check_json(args, kwargs)


def test_check_json_refuses_cycles() -> None:
    a: list[Any] = [1]
    a.append(a)
    with pytest.raises(SerializationError, match="contains itself"):
        check_json((a,), {})
    shared = [1]
    check_json(([shared, shared],), {})  # the same list twice is not a cycle


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(json_values, max_size=4), st.dictionaries(st.text(), json_values, max_size=4))
def test_accepted_values_round_trip_unchanged(args: list[Any], kwargs: dict[str, Any]) -> None:
    check_json(tuple(args), kwargs)
    assert json.loads(json.dumps(args)) == args
    assert json.loads(json.dumps(kwargs)) == kwargs


def test_result_repr_is_a_marked_str() -> None:
    r = refs.ResultRepr("<object>")
    assert r == "<object>"
    assert isinstance(r, str)
    assert isinstance(r, refs.ResultRepr)


def test_a_bound_builtin_method_is_named_by_its_owner() -> None:
    with pytest.raises(SerializationError) as info:
        func_ref([].append)
    message = str(info.value)
    assert "builtins:list.append of a list instance" in message
    assert "?:" not in message
