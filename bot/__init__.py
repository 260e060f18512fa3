"""Detach: run coding agents from Telegram."""

from bot import lazy_types

lazy_types.defer_on_import()  # before anything imports aiogram: its types built when first used
