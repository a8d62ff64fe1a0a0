"""Sphinx configuration of the API reference, generated from the docstrings.

Build: ``sphinx-build -W -b html docs/api <output dir>`` (CI treats warnings as errors).
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # a source tree

import timewheel
from timewheel.stores import Store

project = "timewheel"
author = "The timewheel authors"
copyright = "The timewheel authors"
release = timewheel.__version__
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []

# Store implementations document their methods once, on the Store protocol; their own methods
# show the protocol's text, so each store class reads completely on its own.
_STORES = ("MemoryStore", "SQLiteStore")


def _protocol_docstring(
    app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]
) -> None:
    if what != "method" or any(line.strip() for line in lines):
        return
    owner, _, method = name.rpartition(".")
    if owner.rpartition(".")[2] not in _STORES:
        return
    doc = inspect.getdoc(getattr(Store, method, None))
    if doc:
        lines[:] = [*doc.splitlines(), "", "(The :class:`~timewheel.stores.Store` contract.)"]


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _protocol_docstring, priority=400)
