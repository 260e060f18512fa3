"""A Bot API answer read through the validators of the Telegram types it holds.

aiogram validates every answer as ``Response[method.__returning__]``, and pydantic compiles a
validator for each such return type that holds its own copy of every type inside it:
``Response[list[Update]]``, ``Response[Message]`` and ``Response[Message | bool]`` each copy the
whole Message tree (about 1.2 MB of validator each here, 3 MB for the three) beside the Update
and Message validators the bot builds anyway. Here the envelope (``ok``, ``description``,
``parameters``) is read as ``Response[Any]``, and its result through those types' own
validators, for the shapes nearly every method returns: a type, a list of a type, a type or a
plain value, a plain bool, int or str. ``NOT_READ`` for any other shape: aiogram reads it.
An error answer raises what aiogram 3.31's ``BaseSession.check_response`` raises for it
(tests/test_session.py compares the two)."""

from __future__ import annotations

import functools
from http import HTTPStatus
from types import UnionType
from typing import Any, NoReturn, Union, cast, get_args, get_origin

from aiogram.exceptions import (
    RestartingTelegram,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramEntityTooLarge,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.methods import Response, TelegramMethod
from pydantic import BaseModel

NOT_READ: Any = object()
_PLAIN = (bool, int, str)
_BY_STATUS: dict[int, type[TelegramAPIError]] = {
    HTTPStatus.BAD_REQUEST: TelegramBadRequest,
    HTTPStatus.NOT_FOUND: TelegramNotFound,
    HTTPStatus.CONFLICT: TelegramConflictError,
    HTTPStatus.UNAUTHORIZED: TelegramUnauthorizedError,
    HTTPStatus.FORBIDDEN: TelegramForbiddenError,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: TelegramEntityTooLarge,
}


@functools.cache  # pydantic keeps generic models only weakly
def envelope_type() -> type[Response[Any]]:
    """``Response[Any]``: an answer's envelope, its result left as it came."""
    return Response[Any]  # type: ignore[no-any-return]


def read_result(returning: Any, data: Any, context: dict[str, Any]) -> Any:
    """``data`` as ``returning`` through the model's own validator; ``NOT_READ`` when the
    type or the data is of another shape. A ValidationError is the data's fault."""
    if _is_model(returning):
        return returning.model_validate(data, context=context) if _is_object(data) else NOT_READ
    if returning in _PLAIN:
        return data if type(data) is returning else NOT_READ
    origin = get_origin(returning)
    if origin is list:
        (item,) = get_args(returning)
        if not _is_model(item) or not isinstance(data, list) or not all(map(_is_object, data)):
            return NOT_READ
        return [item.model_validate(one, context=context) for one in data]
    if origin in (Union, UnionType):
        return _one_of(get_args(returning), data, context)
    return NOT_READ


def _one_of(members: tuple[Any, ...], data: Any, context: dict[str, Any]) -> Any:
    """A union of at most one model and plain values (``Message | bool``): what ``data`` is."""
    models = [m for m in members if _is_model(m)]
    if len(models) > 1 or any(not _is_model(m) and m not in _PLAIN for m in members):
        return NOT_READ  # several models: pydantic's own union rules decide
    if type(data) in members and type(data) in _PLAIN:
        return data
    if models and _is_object(data):
        return models[0].model_validate(data, context=context)
    return NOT_READ


def raise_error(method: TelegramMethod[Any], status_code: int, answer: Response[Any]) -> NoReturn:
    """The exception aiogram raises for an answer that is not a success."""
    description = cast(str, answer.description)
    parameters = answer.parameters
    if parameters is not None and parameters.retry_after:
        raise TelegramRetryAfter(
            method=method, message=description, retry_after=parameters.retry_after
        )
    if parameters is not None and parameters.migrate_to_chat_id:
        raise TelegramMigrateToChat(
            method=method, message=description, migrate_to_chat_id=parameters.migrate_to_chat_id
        )
    if status_code in _BY_STATUS:
        raise _BY_STATUS[status_code](method=method, message=description)
    if status_code >= HTTPStatus.INTERNAL_SERVER_ERROR:
        error = RestartingTelegram if "restart" in (description or "") else TelegramServerError
        raise error(method=method, message=description)
    raise TelegramAPIError(method=method, message=description)


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _is_object(data: Any) -> bool:
    return isinstance(data, dict)
