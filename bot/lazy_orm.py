"""SQLAlchemy's asyncio extension without its ORM half until something asks for it.

``sqlalchemy.ext.asyncio``'s ``__init__`` imports its sessions, and with them all of
``sqlalchemy.orm``: about 5 MB of the idle bot's memory (SQLAlchemy 2.1) for classes the store,
on the Core, never uses. Here that package is found as usual but runs lazily: the engine's and
the results' names import their own modules (``engine``, ``result``) when first asked for; any
other name runs the package's real ``__init__``, so every name is there as before. Installed
once, from ``bot/__init__.py``, for when the package is first imported."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

PACKAGE = "sqlalchemy.ext.asyncio"
_OWN = {  # the names the package takes from each of these modules, none of them the ORM's
    "engine": (
        "AsyncConnection",
        "AsyncEngine",
        "AsyncTransaction",
        "async_engine_from_config",
        "create_async_engine",
        "create_async_pool_from_url",
    ),
    "result": ("AsyncMappingResult", "AsyncResult", "AsyncScalarResult", "AsyncTupleResult"),
}
_FROM = {name: module for module, names in _OWN.items() for name in names}


def defer_on_import() -> None:
    """Run the package lazily when it is first imported (nothing if it already was)."""
    if PACKAGE not in sys.modules and not any(isinstance(f, _Lazy) for f in sys.meta_path):
        sys.meta_path.insert(0, _Lazy())


class _Lazy:
    """Finds the package as the real finders do; its module runs ``_lazily`` instead."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != PACKAGE:
            return None
        sys.meta_path.remove(self)  # once: the real finders find it now
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        spec.loader.exec_module = lambda module: _lazily(module, loader)  # type: ignore[method-assign]
        return spec


def _lazily(module: ModuleType, loader: Any) -> None:
    """What the package's ``__init__`` does first (greenlet's shim), and a ``__getattr__``
    that imports a name's module when the name is first asked for."""
    from sqlalchemy.util import concurrency

    concurrency._concurrency_shim._initialize()

    def __getattr__(name: str) -> Any:
        if name in _FROM:
            found = getattr(importlib.import_module(f"{PACKAGE}.{_FROM[name]}"), name)
            setattr(module, name, found)
            return found
        if name.startswith("__") or _submodule(module, name):  # the import system's questions
            raise AttributeError(name)
        # another name: the real __init__ (once: the module is as it would have been since)
        if module.__dict__.pop("__getattr__", None) is not None:
            exec(loader.get_code(PACKAGE), module.__dict__)  # noqa: S102 — the package's own code
        if name in module.__dict__:
            return module.__dict__[name]
        raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]


def _submodule(package: ModuleType, name: str) -> bool:
    """Whether ``name`` is a module of ``package`` (``from . import exc``: imported, not run)."""
    found = importlib.machinery.PathFinder.find_spec(f"{PACKAGE}.{name}", package.__path__)
    return found is not None
