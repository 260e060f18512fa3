"""SQLAlchemy's asyncio extension runs without its ORM until something asks for it
(bot/lazy_orm.py), in a fresh process so that nothing else has imported it yet."""

from __future__ import annotations

from tests.test_architecture import _fresh

PROBE = """
import sys
import bot  # installs the lazy package
import sqlalchemy.ext.asyncio as extension
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncResult, create_async_engine
from sqlalchemy.ext.asyncio import exc  # a module of the package: imported, not looked up
engine = create_async_engine("sqlite+aiosqlite://")
core_only = "sqlalchemy.orm" not in sys.modules
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker  # the ORM's names: all of it
import sqlalchemy.ext.asyncio.session as sessions
try:
    extension.nothing
    missing = "found"
except AttributeError:
    missing = "AttributeError"
print(
    core_only,
    isinstance(engine, AsyncEngine),
    AsyncConnection.__module__,
    AsyncResult.__module__,
    exc.__name__,
    AsyncSession is sessions.AsyncSession and "sqlalchemy.orm" in sys.modules,
    async_sessionmaker.__name__,
    "__getattr__" in vars(extension),
    missing,
)
"""


def test_the_asyncio_extension_loads_the_orm_only_for_its_names():
    assert _fresh(PROBE).split() == [
        "True",
        "True",
        "sqlalchemy.ext.asyncio.engine",
        "sqlalchemy.ext.asyncio.result",
        "sqlalchemy.ext.asyncio.exc",
        "True",
        "async_sessionmaker",
        "False",  # the package's own __init__ ran: it is as it would have been
        "AttributeError",
    ]
