"""The ``openai`` SDK's client of one endpoint, made without holding the event loop: the SDK is
imported in a worker thread (about 1 s, the first time), and the TLS context each new client
would load the CA bundle into (80 to 150 ms a client with ``SSL_CERT_FILE`` set, a /local turn
each) is made once per process, in that thread, and shared by every client."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

    from openai import AsyncOpenAI

CHAT_MODULE = "openai.resources.chat.completions.completions"  # the SDK loads it lazily


async def openai_client(base_url: str, api_key: str, **options: Any) -> AsyncOpenAI:
    """A client of ``base_url`` that retries nothing itself (its callers choose); ``options``
    go to ``AsyncOpenAI`` (``timeout``). The caller closes it."""
    tls = await asyncio.to_thread(_tls)
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient  # imported by now

    return AsyncOpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        http_client=DefaultAsyncHttpxClient(verify=tls),
        **options,
    )


@functools.cache
def _tls() -> ssl.SSLContext:
    """The context the SDK's HTTP client makes by default (``SSL_CERT_FILE`` and the like
    obeyed), made once."""
    import httpx2  # the SDK's HTTP client
    import openai  # noqa: F401 (imported here, off the event loop)

    with contextlib.suppress(ImportError):  # else imported at the first call (40 ms)
        importlib.import_module(CHAT_MODULE)
    return httpx2.create_ssl_context()
