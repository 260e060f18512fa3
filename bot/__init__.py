"""Detach: run coding agents from Telegram."""

from bot import lazy_types

lazy_types.defer()  # before anything imports aiogram: its types are built when first used
