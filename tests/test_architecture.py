"""The layout shows the architecture: handlers -> bot services -> job pool -> executors."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HANDLER_MAY_IMPORT = {"bot.service", "bot.models", "bot.errors", "bot.texts", "bot.callbacks",
                      "bot.approval_answers", "bot.approval_view", "bot.money",
                      "bot.presets", "bot.card",
                      "bot.render", "bot.access"}
EXECUTOR_MAY_IMPORT = {"bot.models", "bot.errors", "bot.ports"}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules("handlers"), ids=lambda p: p.name)
def test_handlers_use_only_services_models_errors_and_texts(path):
    used = {m for m in imports(path) if m.startswith("bot.")}
    assert used <= HANDLER_MAY_IMPORT, used - HANDLER_MAY_IMPORT


@pytest.mark.parametrize("path", modules("executors"), ids=lambda p: p.name)
def test_executors_use_only_models_errors_and_ports(path):
    used = {m for m in imports(path) if m.startswith(("bot.", "handlers"))}
    assert used <= EXECUTOR_MAY_IMPORT, used - EXECUTOR_MAY_IMPORT


def test_only_the_pool_imports_apscheduler():
    users = [p.relative_to(ROOT).as_posix() for pkg in ("bot", "handlers", "executors")
             for p in modules(pkg) if any(m.startswith("apscheduler") for m in imports(p))]
    assert users == ["bot/pool.py"]


def test_nothing_is_built_at_import_time():
    """No module-level Bot, Dispatcher, scheduler, engine or Settings()."""
    forbidden = {"Bot", "Dispatcher", "AsyncScheduler", "Settings", "create_async_engine"}
    for pkg in ("bot", "handlers", "executors"):
        for path in modules(pkg):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(
                        getattr(node, "value", None), ast.Call):
                    func = node.value.func  # type: ignore[union-attr]
                    name = getattr(func, "id", getattr(func, "attr", ""))
                    assert name not in forbidden, f"{path}: module-level {name}()"
