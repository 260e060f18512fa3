"""Detach: run coding agents from Telegram."""

from bot import lazy_orm, lazy_types

lazy_types.defer_on_import()  # before anything imports aiogram: its types built when first used
lazy_orm.defer_on_import()  # before the store imports SQLAlchemy's asyncio: no ORM until asked
