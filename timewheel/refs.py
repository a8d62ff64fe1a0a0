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

**Which stored references run** is an application's decision, not the store's: anyone who can
write one row into a shared store can put any text in ``func``. An :class:`Allowlist` says what a
scheduler runs: registered names, and import paths inside the modules and packages the application
lists (``Scheduler(allow=["myapp.jobs"])``). It is checked on the text, *before* any import, and
again on the object found (it must be defined in an allowed module), so a stored reference outside
it is never imported. Nothing in this process imports a module *because stored text names it*
unless some allowlist in the process allows that module or the module is already imported
(:func:`import_path`); see ``docs/security.md``.

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
import itertools
import math
import sys
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

from timewheel.errors import InvalidScheduleError, InvalidTypeError, SerializationError

__all__ = [
    "Allowlist",
    "ReferenceNotAllowedError",
    "ResultRepr",
    "UnresolvableRefError",
    "check_json",
    "check_json_args",
    "check_json_value",
    "func_ref",
    "generation",
    "import_path",
    "is_resolvable",
    "permit_imports",
    "permitted_imports",
    "reference_problem",
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
_permitted: tuple[str, ...] = ()  # modules some allowlist of this process allows (import_path)
_JSON_SCALARS = frozenset({type(None), bool, int, str})
_SEQUENCES = frozenset({tuple, list})


class UnresolvableRefError(SerializationError):
    """A stored reference names no registered task and no importable object in this process.

    A subclass of :class:`~timewheel.errors.SerializationError` (hence also of ``TypeError``).
    ``ref`` holds the reference.
    """

    def __init__(self, message: str, ref: str) -> None:
        super().__init__(message)
        self.ref = ref


class ReferenceNotAllowedError(UnresolvableRefError):
    """A stored reference the allowlist in force refuses; it was not imported.

    A subclass of :class:`UnresolvableRefError` (a reference this process will not resolve), but
    final: a dispatcher ends the task FAILED instead of leaving it for another worker. ``ref``
    holds the reference; the message says which setting allows it.
    """


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
    """``module:qualname`` of *obj* for a message; a builtin method (``[].append``) has no module
    of its own and is named by its owner's (``builtins:list.append``)."""
    mod = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
    if not mod:
        owner = getattr(obj, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            mod = (owner if isinstance(owner, type) else type(owner)).__module__
    return f"{mod}:{qual}" if mod else str(qual)


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
    generation = _generation  # read first: a change while this one is worked out is seen next
    try:
        known = _refs_of.get(func)
    except TypeError:  # an unhashable callable: no answer kept
        known = None
    if known is not None and known[0] == generation and _still_bound(func, known[2], known[3]):
        return known[1]
    with _lock:
        name = _names.get(id(func))
        registered = name is not None and _registry.get(name) is func
    ref = name if registered and name is not None else _import_ref(func, "function")
    _keep_ref(func, generation, ref, None if registered else ref)
    return ref


# func_ref's answers for the functions it was asked about: func -> (generation, reference, then
# for an import path its module and attribute path, checked again at each use, as a rebinding
# changes the answer). Bounded: emptied when full.
_refs_of: dict[Any, tuple[int, str, str, tuple[str, ...]]] = {}
_REFS_KEPT = 256


def _keep_ref(func: Any, generation: int, ref: str, path: str | None) -> None:
    if len(_refs_of) >= _REFS_KEPT:
        _refs_of.clear()
    module, _, qualname = (path or "").partition(":")
    parts = tuple(qualname.split(".")) if path else ()
    try:
        _refs_of[func] = (generation, ref, module, parts)
    except TypeError:  # unhashable
        pass


def _still_bound(func: Any, module: str, parts: tuple[str, ...]) -> bool:
    """Whether the import path *module*:*parts* still gives *func* (True for a registered name,
    whose changes move the generation)."""
    if not parts:
        return True
    obj = sys.modules.get(module)
    for part in parts:
        obj = getattr(obj, part, None)
    return obj is not None and _same(obj, func)


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
    """The object an import path ``"module:qualname"`` names (any object: a function, a class).

    It applies no allowlist (use :meth:`Allowlist.resolve` for a function to *call*), but it imports
    a module only when the module is imported already or an allowlist of this process allows it
    (:func:`permit_imports`): importing runs a module's top-level code, so text read from a store
    never makes this process import a module the application did not allow.

    Raises:
        ReferenceNotAllowedError: the module is not imported yet and no allowlist here allows it,
            or its path goes through a special name (``"pkg.__main__"``).
        UnresolvableRefError: the path is malformed, the module does not import, or it has no
            such attribute path.
    """
    module, qualname = _split(ref)
    problem = _module_problem(module)
    if problem is not None:
        raise ReferenceNotAllowedError(f"{ref!r} is refused: {problem}; nothing was imported", ref)
    if sys.modules.get(module) is None and not _covered(module, _permitted):
        raise ReferenceNotAllowedError(
            f"{ref!r} names the module {module!r}, which this process has not imported and no "
            "allowlist here allows, so it was not imported; allow it (Scheduler(allow="
            f"[{module!r}]) or `timewheel worker --allow {module}`) or import it at start-up",
            ref,
        )
    obj: Any = _import_module(module, ref)
    for part in qualname.split("."):
        obj = _attribute(obj, part, module, qualname, ref)
    return obj


def _split(ref: str) -> tuple[str, str]:
    module, sep, qualname = ref.partition(":")
    if not sep or not module or not qualname:
        raise UnresolvableRefError(
            f"{ref!r} is neither a registered task name nor a 'module:qualname' import path", ref
        )
    return module, qualname


def _import_module(module: str, ref: str) -> types.ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UnresolvableRefError(
            f"module {module!r} of {ref!r} cannot be imported ({e})", ref
        ) from None
    except Exception as e:  # a module that fails at import time: report, do not crash the caller
        raise UnresolvableRefError(
            f"importing module {module!r} of {ref!r} raised {type(e).__name__}: {e}", ref
        ) from e


def _attribute(obj: Any, part: str, module: str, qualname: str, ref: str) -> Any:
    try:
        return getattr(obj, part)
    except AttributeError:
        raise UnresolvableRefError(
            f"module {module!r} has no attribute path {qualname!r} (reference {ref!r})", ref
        ) from None


def _callable(ref: str, obj: Any) -> Callable[..., Any]:
    if not callable(obj):
        raise UnresolvableRefError(f"{ref!r} names {obj!r}, which is not callable", ref)
    return obj  # type: ignore[no-any-return]  # callable() narrowed it at run time


def resolve_ref(ref: str) -> Callable[..., Any]:
    """The function a reference names: a registered name first, then ``"module:qualname"``.

    No allowlist is applied (only :func:`import_path`'s rule on imports): a function to run
    from text read from a store is resolved with :meth:`Allowlist.resolve`.

    Raises:
        UnresolvableRefError: (a ``SerializationError``) nothing by that name is registered or
            importable in this process, or it is not callable; the message names *ref*.
            :class:`ReferenceNotAllowedError` when the module was not imported (see
            :func:`import_path`).
    """
    with _lock:
        func = _registry.get(ref)
    if func is not None:
        return func
    return _callable(ref, import_path(ref))


def is_resolvable(ref: str) -> bool:
    """True when :func:`resolve_ref` would succeed in this process."""
    try:
        resolve_ref(ref)
    except UnresolvableRefError:
        return False
    return True


# -- the allowlist --------------------------------------------------------------------------------
def _covered(module: str, prefixes: Iterable[str]) -> bool:
    """True when *module* is one of *prefixes* or inside one (on dotted boundaries)."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _is_dunder(part: str) -> bool:
    return len(part) > 4 and part.startswith("__") and part.endswith("__")


def _module_problem(module: str) -> str | None:
    """Why *module* is not a plain absolute module path, or None."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return f"{module!r} is not a dotted module path"
    special = [p for p in parts if _is_dunder(p)]
    if special:
        return f"the module path {module!r} goes through the special name {special[0]!r}"
    return None


def _module_names(modules: Iterable[str], where: str) -> tuple[str, ...]:
    """*modules* checked and reduced: sorted, without duplicates or modules inside another."""
    if isinstance(modules, str):
        raise InvalidTypeError(
            f"{where} takes a list of module names (got the str {modules!r}); pass [{modules!r}]"
        )
    names: list[str] = []
    for m in modules:
        if not isinstance(m, str):
            raise InvalidTypeError(f"{where} takes module names (got {m!r}, a {type(m).__name__})")
        problem = _module_problem(m)
        if problem is not None:
            raise InvalidScheduleError(
                f"{where} takes module or package names such as 'myapp.jobs' ({problem})"
            )
        names.append(m)
    unique = sorted(set(names))
    return tuple(m for m in unique if not _covered(m, (p for p in unique if p != m)))


def reference_problem(ref: str) -> str | None:
    """Why no allowlist runs the import path *ref*, judged on its text alone, or None.

    Every :class:`Allowlist` refuses a module path with a special name (``"pkg.__main__"``), a
    qualname that is not a dotted path of names, and one that reaches a name starting with
    ``_`` (``"myapp.jobs:__builtins__"``). A registered name, or a name without ``":"``, has no
    problem here.
    """
    with _lock:
        if ref in _registry:
            return None
    module, sep, qualname = ref.partition(":")
    if not sep:
        return None
    problem = _module_problem(module)
    if problem is not None:
        return problem
    parts = qualname.split(".")
    if not all(p.isidentifier() for p in parts):
        return f"{qualname!r} is not a dotted path of names"
    private = [p for p in parts if p.startswith("_")]
    if private:
        return (
            f"it reaches the attribute {private[0]!r}: only public names (not starting with '_') "
            "are followed"
        )
    return None


class Allowlist:
    """Which stored function references a scheduler runs.

    A reference runs when it is:

    * a name registered in this process (:func:`register`, :func:`register_task`); or
    * an import path ``"module:qualname"`` whose module is one of *modules* or inside one of them,
      on dotted boundaries (``"myapp.jobs"`` allows ``myapp.jobs`` and ``myapp.jobs.mail``, not
      ``myapp.jobsx``), whose qualname is a dotted path of public names (no part starting with
      ``_``), and each of whose steps is an object *defined* in an allowed module: not a module,
      and not something the module merely imported (``"myapp.jobs:os.system"`` and, after
      ``from os import system``, ``"myapp.jobs:system"`` are refused).

    The text is checked before anything is imported; the objects along the path after the
    allowed module is imported. A refused reference raises :class:`ReferenceNotAllowedError`
    and is never imported.

    ``Allowlist()`` runs registered names only; ``Allowlist(["myapp.jobs", "myapp.billing"])``
    also those modules (and the modules inside them); :meth:`everything` runs any reference (the
    default on a store no other process can write, ``MemoryStore``).

    Immutable; two allowlists are equal when they allow the same references.

    Raises:
        InvalidTypeError: *modules* is a single string, or holds something else than strings.
        InvalidScheduleError: a name is not a dotted module path (``"myapp.jobs"``).
    """

    __slots__ = ("_allowed", "_everything", "_modules")

    def __init__(self, modules: Iterable[str] = ()) -> None:
        self._modules = _module_names(modules, "allow=")
        self._everything = False
        # references check() let pass -> the generation then (the registry is all that can
        # change the answer); bounded: emptied when full
        self._allowed: dict[str, int] = {}

    @classmethod
    def everything(cls) -> Allowlist:
        """An allowlist that runs any reference: for a store only this process writes."""
        allowlist = cls()
        allowlist._everything = True
        return allowlist

    @property
    def modules(self) -> tuple[str, ...]:
        """The allowed modules and packages, sorted (empty for :meth:`everything`)."""
        return self._modules

    @property
    def unrestricted(self) -> bool:
        """True for :meth:`everything`."""
        return self._everything

    def extended(self, modules: Iterable[str]) -> Allowlist:
        """This allowlist with *modules* allowed too."""
        if self._everything:
            return self
        return Allowlist(self._modules + _module_names(modules, "allow="))

    def covers(self, module: str) -> bool:
        """True when import paths into *module* may run (it is allowed or inside an allowed one)."""
        return self._everything or _covered(module, self._modules)

    def problem(self, ref: str) -> str | None:
        """Why *ref* is refused, judged on its text alone (nothing is imported), or None.

        A name without ``":"`` is never refused here: it runs if it is registered (and is
        unresolvable, not refused, where it is not).
        """
        if self._everything:
            return None
        problem = reference_problem(ref)
        if problem is not None:
            return problem
        module, sep, _ = ref.partition(":")
        if not sep or ref in _registry:
            return None
        if not self.covers(module):
            return f"the module {module!r} is outside {self.describe()}"
        return None

    def permits(self, ref: str) -> bool:
        """True unless :meth:`problem` refuses *ref* (nothing is imported)."""
        return self.problem(ref) is None

    def check(self, ref: str, *, scheduling: bool = False) -> None:
        """Raise :class:`ReferenceNotAllowedError` if *ref* is refused (nothing is imported).

        With *scheduling*, the message speaks of the ``schedule()`` call that would store *ref*.
        """
        generation = _generation
        allowed = self._allowed
        if allowed.get(ref) == generation:
            return
        problem = self.problem(ref)
        if problem is not None:
            raise self._refusal(ref, problem, scheduling=scheduling)
        if len(allowed) >= _REFS_KEPT:
            allowed.clear()
        allowed[ref] = generation

    def resolve(self, ref: str) -> Callable[..., Any]:
        """The function *ref* names, if this allowlist runs it.

        Raises:
            ReferenceNotAllowedError: *ref* is refused (by its text, before any import, or by an
                object along its path, after its allowed module was imported).
            UnresolvableRefError: *ref* is allowed but does not resolve here (not registered,
                its module does not import, no such attribute, not callable).
        """
        with _lock:
            func = _registry.get(ref)
        if func is not None:
            return func
        module, qualname = _split(ref)
        if self._everything:
            obj: Any = _import_module(module, ref)
            for part in qualname.split("."):
                obj = _attribute(obj, part, module, qualname, ref)
            return _callable(ref, obj)
        self.check(ref)
        obj = _import_module(module, ref)
        parts = qualname.split(".")
        for i, part in enumerate(parts):
            obj = _attribute(obj, part, module, qualname, ref)
            step = f"{module}:{'.'.join(parts[: i + 1])}"
            if isinstance(obj, types.ModuleType):
                raise self._refusal(
                    ref,
                    f"{step} is the module {obj.__name__!r}, not an object defined in {module!r}",
                    imported=True,
                )
            home = getattr(obj, "__module__", None)
            if not isinstance(home, str) or not self.covers(home):
                where = f"in {home!r}" if isinstance(home, str) else "in no module it names"
                raise self._refusal(
                    ref,
                    f"{step} is {_short(obj)}, defined {where}, outside {self.describe()}",
                    imported=True,
                )
        return _callable(ref, obj)

    def describe(self) -> str:
        """The allowlist in words, for messages."""
        if self._everything:
            return "an allowlist that allows every reference"
        if not self._modules:
            return "the allowlist (registered names only)"
        return f"the allowlist (registered names and the modules {', '.join(self._modules)})"

    def _refusal(
        self, ref: str, why: str, *, imported: bool = False, scheduling: bool = False
    ) -> ReferenceNotAllowedError:
        """The error for a refused *ref*; *imported*: refused for the object found in its
        allowed module (else on its text, before any import)."""
        module = ref.partition(":")[0]
        register = "register the function by name (timewheel.refs.register)"
        if imported:
            way_out = (
                "An import path runs only what an allowed module defines, not what it imports; "
                f"{register} if it must run"
            )
        elif reference_problem(ref) is not None:
            way_out = (
                "A stored reference names a public function or class of an allowed module "
                f"('module:function' or 'module:Class.method'); {register} for anything else"
            )
        else:
            way_out = (
                f"If it is your code, allow its module: Scheduler(allow=[{module!r}]) or "
                f"`timewheel worker --allow {module}`; or {register}"
            )
        if scheduling:
            return ReferenceNotAllowedError(
                f"cannot schedule {ref!r} into a durable store: this scheduler would not run it: "
                f"{why}. {way_out}",
                ref,
            )
        done = "it was not called" if imported else "it was not imported"
        return ReferenceNotAllowedError(
            f"function reference {ref!r} is not allowed to run: {why}; {done}. {way_out}", ref
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Allowlist):
            return NotImplemented
        return (self._everything, self._modules) == (other._everything, other._modules)

    def __hash__(self) -> int:
        return hash((self._everything, self._modules))

    def __repr__(self) -> str:
        if self._everything:
            return "Allowlist.everything()"
        return f"Allowlist({list(self._modules)!r})"


def permit_imports(modules: Iterable[str]) -> None:
    """Let :func:`import_path` import *modules* (and the modules inside them) in this process.

    A scheduler calls it with its allowlist's modules when it is built: then resolving stored
    text anywhere in the process (a durable store checking which READY tasks this process can
    run, the exception types of a stored ``Retry``) may import what some allowlist allows, and
    nothing else. Permissions only grow; a change moves :func:`generation`.
    """
    global _permitted
    names = _module_names(modules, "permit_imports()")
    with _lock:
        merged = _module_names((*_permitted, *names), "permit_imports()")
        if merged != _permitted:
            _permitted = merged
            _bump()


def permitted_imports() -> tuple[str, ...]:
    """The modules :func:`permit_imports` allowed in this process, sorted."""
    return _permitted


# -- JSON arguments -------------------------------------------------------------------------------
def check_json(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Raise ``SerializationError`` unless *args* and *kwargs* survive a JSON round trip unchanged.

    The message names the offending position (``args[1]['when'][0]``), its type and what to pass
    instead. See the module docstring for the accepted types and why nested tuples are refused.
    """
    if not isinstance(args, (tuple, list)):
        raise SerializationError(f"args must be a tuple or list (got {type(args).__name__})")
    scalars = _JSON_SCALARS
    for i, v in enumerate(args):
        if type(v) not in scalars:  # the common case costs no message and no set
            _check_value(v, f"args[{i}]", set())
    if not isinstance(kwargs, Mapping):
        raise SerializationError(f"kwargs must be a mapping (got {type(kwargs).__name__})")
    for k, v in kwargs.items():
        if type(k) is not str:
            raise SerializationError(f"kwargs key {k!r} is a {type(k).__name__}, not a str")
        if type(v) not in scalars:
            _check_value(v, f"kwargs[{k!r}]", set())


def check_json_args(args: Sequence[Sequence[Any]]) -> None:
    """:func:`check_json` for many argument lists without keyword arguments (a batch's): one
    pass in C when every argument is ``None``, a bool, an int or a str, else each in turn."""
    if set(map(type, args)) <= _SEQUENCES and (
        set(map(type, itertools.chain.from_iterable(args))) <= _JSON_SCALARS
    ):
        return
    for a in args:
        check_json(a, {})


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
    """A counter that changes whenever the registry changes or :func:`permit_imports` allows more
    (lets callers cache resolvability)."""
    return _generation
