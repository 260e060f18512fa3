"""aiogram's Telegram types and API methods, each built when first used instead of all at
import.

aiogram declares its models with pydantic's ``defer_build=True``, then its ``aiogram.types``
package calls ``model_rebuild(_types_namespace=…)`` on every one of them at import, which builds
a validator for each of ~700 types the bot mostly never sees: 2.5 s and about 110 MB here
(pydantic 2.13). ``defer()`` keeps pydantic's own deferral in force for aiogram's classes: such
a call only remembers the namespace it names, and the first real use of a type (pydantic's
placeholder validator calls ``model_rebuild()`` without a namespace) builds it with that
namespace. Nothing else changes: other models, and aiogram models rebuilt with ``force=True``,
go straight to pydantic. Installed once, from ``bot/__init__.py``, before aiogram is imported.

aiogram's ~190 API methods (``SendMessage``…) do not declare ``defer_build``: each built its
validator as its class was made (0.4 s and about 15 MB here, for the handful a bot calls). The
same setting is given to their base class, ``TelegramMethod``, as soon as its module has run
and before any method class is made (an import hook on that one module), so a method is built
on its first call."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

_PREFIX = "aiogram."
_METHODS_BASE = "aiogram.methods.base"
_namespace: dict[str, Any] = {}


def defer_on_import() -> None:
    """Install the deferral when aiogram is first imported (``import bot`` itself stays free of
    pydantic: a process that only decides how to start, or never talks to Telegram, does not
    pay for it)."""
    if "aiogram" in sys.modules:
        defer()
    elif not any(isinstance(finder, _DeferOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeferOnImport())


class _DeferOnImport(importlib.abc.MetaPathFinder):
    """Before the first ``aiogram`` module is found: ``defer()``; the real finders find it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "aiogram" or name.startswith(_PREFIX):
            sys.meta_path.remove(self)
            defer()
        return None


def defer() -> None:
    """Install the deferral (idempotent)."""
    from pydantic import BaseModel

    if getattr(BaseModel.model_rebuild, "_detach_deferred", False):
        return
    build = BaseModel.model_rebuild.__func__  # type: ignore[attr-defined]

    def model_rebuild(
        cls: type[BaseModel],
        *,
        force: bool = False,
        raise_errors: bool = True,
        _parent_namespace_depth: int = 2,
        _types_namespace: Any = None,
    ) -> bool | None:
        if cls.__module__.startswith(_PREFIX) and not force:
            if _types_namespace is not None:  # aiogram's import-time pass: remember, defer
                if len(_types_namespace) > len(_namespace):
                    _namespace.clear()
                    _namespace.update(_types_namespace)
                return None
            _types_namespace = _namespace or None  # the first use: build with aiogram's names
        return build(
            cls,
            force=force,
            raise_errors=raise_errors,
            _parent_namespace_depth=_parent_namespace_depth + 1,
            _types_namespace=_types_namespace,
        )

    model_rebuild._detach_deferred = True  # type: ignore[attr-defined]
    BaseModel.model_rebuild = classmethod(model_rebuild)  # type: ignore[assignment,method-assign]

    sys.meta_path.insert(0, _DeferMethods())


class _DeferMethods(importlib.abc.MetaPathFinder):
    """Finds ``aiogram.methods.base`` as usual; once it ran, its ``TelegramMethod`` defers."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _METHODS_BASE:
            return None
        sys.meta_path.remove(self)  # once: the real finders find it now
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            module.TelegramMethod.model_config["defer_build"] = True

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


# what the first task after a start uses: built right after polling starts instead (about
# 0.4 s here, on the loop, one at a time), so the first person to write does not wait for it;
# Message before Update: Update's schema then takes Message's built one instead of its own copy
# (the idle bot: 1.7 MB less here)
FIRST_USED = ("Message", "Update", "CallbackQuery")
FIRST_CALLED = (
    "SendMessage",
    "EditMessageText",
    "EditMessageReplyMarkup",
    "DeleteMessage",
    "AnswerCallbackQuery",
    "SendDocument",
)


async def warm() -> None:
    """Build the validators a bot needs first, yielding to the loop between them."""
    import asyncio

    from aiogram import methods, types

    from bot.telegram.answers import envelope_type

    envelope_type().model_rebuild()  # answers are read through it and the types' own
    for name in FIRST_USED:
        getattr(types, name).model_rebuild()
        await asyncio.sleep(0)
    for name in FIRST_CALLED:
        getattr(methods, name).model_rebuild()
        await asyncio.sleep(0)
