"""Durable references to functions, and the JSON rules for arguments a durable store keeps.

A durable store (``SQLiteStore``) cannot keep a Python function object: it keeps a *reference*,
a string another process can turn back into the same function:

* a **registered name** (``@register("send-email")`` or ``register_task("send-email", f)``):
  stable across refactors, and the only way to schedule a function defined in ``__main__``;
* an **import path** ``"module:qualname"`` (``"myapp.mail:send_email"``) for a module-level
  function, class, staticmethod or classmethod.

Names are looked up before import paths, so a registered name may look like anything (but a name
containing ``":"`` would shadow an import path; keep names free of it).

Refused, with :class:`~timewheel.errors.SerializationError` saying why and what to do instead:
lambdas, functions nested in other functions (``<locals>``), bound methods of instances,
``functools.partial`` objects and other callable instances, and functions defined in ``__main__``
(a worker process runs a different ``__main__`` and cannot import them).

Arguments must survive a JSON round trip *unchanged* (:func:`check_json`): ``None``, ``bool``,
``int``, finite ``float``, ``str``, ``list`` and ``dict`` with ``str`` keys, nested freely. A
**nested tuple is refused** rather than silently turned into a list: the same handler would see
``(1, 2)`` with the memory store and ``[1, 2]`` with a durable one, and code such as
``x == (1, 2)`` or ``{x: ...}`` would behave differently. Pass a list instead. (The positional
``args`` tuple itself is of course fine.) Subclasses (``IntEnum``, ``StrEnum``, ``OrderedDict``),
non-string dict keys, NaN and infinities are refused for the same reason.
"""

from __future__ import annotations

import functools
import importlib
import math
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from timewheel.errors import SerializationError

__all__ = [
    "ResultRepr",
    "UnresolvableRefError",
    "check_json",
    "check_json_value",
    "func_ref",
    "generation",
    "import_path",
    "is_resolvable",
    "register",
    "register_task",
    "registered",
    "resolve_ref",
    "type_ref",
    "unregister",
]

F = TypeVar("F", bound=Callable[..., Any])

_registry: dict[str, Callable[..., Any]] = {}
_names: dict[int, str] = {}  # id(func) -> name, for func_ref of a registered function
_lock = threading.Lock()
_generation = 0
_JSON_SCALARS = (type(None), bool, int, str)


class UnresolvableRefError(SerializationError):
    """A stored reference names no registered task and no importable object in this process.

    A subclass of :class:`~timewheel.errors.SerializationError` (hence also of ``TypeError``).
    ``ref`` holds the reference.
    """

    def __init__(self, message: str, ref: str) -> None:
        super().__init__(message)
        self.ref = ref


# -- the registry ---------------------------------------------------------------------------------
def register_task(name: str, func: Callable[..., Any]) -> None:
    """Register *func* under *name* for this process.

    Every process that runs or schedules the task must register it (put the call in a module both
    import). Registering the same function (or a reloaded one with the same ``module:qualname``)
    again is allowed; another function under a taken name raises ``SerializationError``.
    """
    if not isinstance(name, str) or not name:
        raise SerializationError(f"a task name must be a non-empty str (got {name!r})")
    if not callable(func):
        raise SerializationError(f"register_task({name!r}, ...) needs a callable (got {func!r})")
    with _lock:
        old = _registry.get(name)
        if old is not None and old is not func and _qualified(old) != _qualified(func):
            raise SerializationError(
                f"task name {name!r} is already registered for {_qualified(old)}; choose another "
                f"name for {_qualified(func)} or unregister({name!r}) first"
            )
        if old is not None:
            _names.pop(id(old), None)
        _registry[name] = func
        _names[id(func)] = name
        _bump()


@overload
def register(name: F, /) -> F: ...
@overload
def register(name: str | None = None, /) -> Callable[[F], F]: ...
def register(name: str | F | None = None, /) -> F | Callable[[F], F]:
    """Decorator: register the function under *name* (default: its ``module:qualname``).

    Usable bare (``@register``) or with a name (``@register("send-email")``). Returns the function
    unchanged. A registered function's reference (:func:`func_ref`) is its name.
    """
    if callable(name):
        func = name
        register_task(_qualified(func), func)
        return func

    def deco(func: F) -> F:
        register_task(name if name is not None else _qualified(func), func)
        return func

    return deco


def unregister(name: str) -> bool:
    """Forget a registered name; True if it was registered."""
    with _lock:
        func = _registry.pop(name, None)
        if func is None:
            return False
        if _names.get(id(func)) == name:
            del _names[id(func)]
        _bump()
        return True


def registered() -> dict[str, Callable[..., Any]]:
    """A snapshot of the registry: name -> function."""
    with _lock:
        return dict(_registry)


def _bump() -> None:
    global _generation
    _generation += 1


def _qualified(obj: object) -> str:
    mod = getattr(obj, "__module__", None) or "?"
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
    return f"{mod}:{qual}"


# -- references -----------------------------------------------------------------------------------
def func_ref(func: Callable[..., Any] | str) -> str:
    """The durable reference of *func*: its registered name, else ``"module:qualname"``.

    A string is taken as a reference already and returned unchanged (it is resolved when the task
    runs). The import path is checked by importing it back: it must give *func* itself.

    Raises:
        SerializationError: *func* cannot be referred to from another process; the message says
            why and what to do.
    """
    if isinstance(func, str):
        if not func:
            raise SerializationError("an empty string is not a function reference")
        return func
    with _lock:
        name = _names.get(id(func))
        if name is not None and _registry.get(name) is func:
            return name
    return _import_ref(func, "function")


def type_ref(cls: type) -> str:
    """``"module:qualname"`` of an importable class (e.g. an exception type in ``Retry.retry_on``)."""
    return _import_ref(cls, "class")


def _import_ref(obj: Any, kind: str) -> str:
    hint = (
        "move it to module level in an importable module, or register it with "
        "@timewheel.refs.register('a-name') in a module every worker imports"
    )
    if isinstance(obj, functools.partial):
        raise SerializationError(
            f"cannot refer to functools.partial({_qualified(obj.func)}, ...) durably; pass the "
            "function and put its arguments in args=/kwargs="
        )
    bound_to = getattr(obj, "__self__", None)
    if bound_to is not None and not isinstance(bound_to, (type, types.ModuleType)):
        raise SerializationError(
            f"cannot refer to the bound method {_qualified(obj)} of a "
            f"{type(bound_to).__name__} instance durably (the instance cannot be stored); "
            f"use a module-level function that builds or finds the instance, or {hint}"
        )
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if module is None and isinstance(bound_to, type):  # a C classmethod: datetime.fromisoformat
        module = bound_to.__module__
        qualname = f"{bound_to.__qualname__}.{getattr(obj, '__name__', '?')}"
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise SerializationError(
            f"cannot refer to {obj!r} durably: it has no __module__/__qualname__ (a callable "
            f"instance?); {hint}"
        )
    where = f"{module}:{qualname}"
    if qualname == "<lambda>" or qualname.endswith(".<lambda>"):
        raise SerializationError(f"cannot refer to a lambda ({where}) durably; {hint}")
    if "<locals>" in qualname:
        raise SerializationError(
            f"cannot refer to {where} durably: it is defined inside another function; {hint}"
        )
    if module == "__main__":
        raise SerializationError(
            f"cannot refer to {where} durably: a function defined in __main__ cannot be imported "
            "by a worker in another process (its __main__ is a different script); "
            f"{hint.replace('move it', 'move it out of the script')}"
        )
    try:
        back = import_path(where)
    except UnresolvableRefError as e:
        raise SerializationError(f"cannot refer to {where} durably: {e}; {hint}") from None
    if not _same(back, obj):
        raise SerializationError(
            f"cannot refer to {where} durably: importing it gives a different object "
            f"({back!r}), e.g. the name was re-bound or the {kind} is wrapped by a decorator "
            f"that does not keep its name; schedule the object the module exposes, or {hint}"
        )
    return where


def _same(a: object, b: object) -> bool:
    if a is b:
        return True
    # classmethods (Python or C) are re-bound at each access: equal when function and class match
    return isinstance(getattr(a, "__self__", None), type) and a == b


def import_path(ref: str) -> Any:
    """The object a ``"module:qualname"`` import path names (registered names are not consulted).

    Raises:
        UnresolvableRefError: *ref* is not of that form, its module cannot be imported (or raises
            while importing), or the module has no such attribute path; the message says which.
    """
    module, sep, qualname = ref.partition(":")
    if not sep or not module or not qualname:
        raise UnresolvableRefError(
            f"{ref!r} is neither a registered task name nor a 'module:qualname' import path", ref
        )
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise UnresolvableRefError(
            f"module {module!r} of {ref!r} cannot be imported ({e})", ref
        ) from None
    except Exception as e:  # a module that fails at import time: report, do not crash the caller
        raise UnresolvableRefError(
            f"importing module {module!r} of {ref!r} raised {type(e).__name__}: {e}", ref
        ) from e
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnresolvableRefError(
                f"module {module!r} has no attribute path {qualname!r} (reference {ref!r})", ref
            ) from None
    return obj


def resolve_ref(ref: str) -> Callable[..., Any]:
    """The function a reference names: a registered name first, then ``"module:qualname"``.

    Raises:
        UnresolvableRefError: (a ``SerializationError``) nothing by that name is registered or
            importable in this process, or it is not callable; the message names *ref*.
    """
    with _lock:
        func = _registry.get(ref)
    if func is not None:
        return func
    obj = import_path(ref)
    if not callable(obj):
        raise UnresolvableRefError(f"{ref!r} names {obj!r}, which is not callable", ref)
    return obj  # type: ignore[no-any-return]  # callable() narrowed it at run time


def is_resolvable(ref: str) -> bool:
    """True when :func:`resolve_ref` would succeed in this process."""
    try:
        resolve_ref(ref)
    except UnresolvableRefError:
        return False
    return True


# -- JSON arguments -------------------------------------------------------------------------------
def check_json(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Raise ``SerializationError`` unless *args* and *kwargs* survive a JSON round trip unchanged.

    The message names the offending position (``args[1]['when'][0]``), its type and what to pass
    instead. See the module docstring for the accepted types and why nested tuples are refused.
    """
    if not isinstance(args, (tuple, list)):
        raise SerializationError(f"args must be a tuple or list (got {type(args).__name__})")
    for i, v in enumerate(args):
        _check_value(v, f"args[{i}]", set())
    if not isinstance(kwargs, Mapping):
        raise SerializationError(f"kwargs must be a mapping (got {type(kwargs).__name__})")
    for k, v in kwargs.items():
        if type(k) is not str:
            raise SerializationError(f"kwargs key {k!r} is a {type(k).__name__}, not a str")
        _check_value(v, f"kwargs[{k!r}]", set())


def check_json_value(value: Any, where: str) -> None:
    """Raise ``SerializationError`` unless *value* survives a JSON round trip unchanged."""
    _check_value(value, where, set())


def _check_value(v: Any, where: str, active: set[int]) -> None:
    t = type(v)
    if t in _JSON_SCALARS:
        return
    if t is float:
        if not math.isfinite(v):
            raise SerializationError(
                f"{where} is {v!r}: JSON has no NaN or infinity; pass None or a string"
            )
        return
    if t is list or t is dict:
        if id(v) in active:
            raise SerializationError(f"{where} contains itself (a reference cycle)")
        active.add(id(v))
        if t is list:
            for i, x in enumerate(v):
                _check_value(x, f"{where}[{i}]", active)
        else:
            for k, x in v.items():
                if type(k) is not str:
                    raise SerializationError(
                        f"{where} has the key {k!r} of type {type(k).__name__}: JSON object keys "
                        f"are strings, so it would come back as {str(k)!r}; use str keys"
                    )
                _check_value(x, f"{where}[{k!r}]", active)
        active.discard(id(v))
        return
    if t is tuple:
        raise SerializationError(
            f"{where} is a tuple {_short(v)}: JSON would give it back as a list, so the task would "
            "see a different value than with the memory store; pass a list"
        )
    base = next((b for b in (bool, int, float, str, list, dict) if isinstance(v, b)), None)
    if base is not None:
        raise SerializationError(
            f"{where} is a {t.__name__} (a {base.__name__} subclass): JSON would give back a plain "
            f"{base.__name__}; convert it, e.g. {base.__name__}(value) or value.value"
        )
    raise SerializationError(
        f"{where} is a {t.__module__}.{t.__qualname__} {_short(v)}, which JSON cannot store; "
        "pass a JSON value (str, int, float, bool, None, list, dict) such as an id or an ISO "
        "date string, and rebuild the object in the task"
    )


def _short(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


class ResultRepr(str):
    """The ``repr()`` of a task result that JSON could not keep, as a durable store returns it.

    A ``str`` subclass, so it prints and compares like the repr; test ``isinstance(result,
    ResultRepr)`` to tell it from a result that really was a string.
    """

    __slots__ = ()


def generation() -> int:
    """A counter that changes whenever the registry changes (lets callers cache resolvability)."""
    return _generation
