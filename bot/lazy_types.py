"""aiogram's Telegram types, each built when first used instead of all at import.

aiogram declares its models with pydantic's ``defer_build=True``, then its ``aiogram.types``
package calls ``model_rebuild(_types_namespace=…)`` on every one of them at import, which builds
a validator for each of ~700 types the bot mostly never sees: 2.5 s and about 110 MB here
(pydantic 2.13). ``defer()`` keeps pydantic's own deferral in force for aiogram's classes: such
a call only remembers the namespace it names, and the first real use of a type (pydantic's
placeholder validator calls ``model_rebuild()`` without a namespace) builds it with that
namespace. Nothing else changes: other models, and aiogram models rebuilt with ``force=True``,
go straight to pydantic. Installed once, from ``bot/__init__.py``, before aiogram is imported."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_PREFIX = "aiogram."
_namespace: dict[str, Any] = {}


def defer() -> None:
    """Install the deferral (idempotent)."""
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
