"""The layout shows the architecture: handlers -> bot services -> job pool -> executors."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# handlers reply through the outbox (paced, durable), never straight to Telegram
# the packages (and core modules) handlers may use; never the job pool, runner or store
HANDLER_MAY_IMPORT_PACKAGES = (
    "bot.tasks",
    "bot.approvals",
    "bot.money",
    "bot.schedules",
    "bot.worktrees",
    "bot.prs",
    "bot.telegram",
    "bot.board",
    "bot.preflight",
    "bot.voice",
)
HANDLER_MAY_IMPORT_MODULES = {"bot.models", "bot.events", "bot.errors", "bot.fleet.status"}
HANDLER_MAY_NOT_IMPORT = {"bot.telegram.journal", "bot.telegram.notifier"}
# the value types (models: tasks and turns; events: what an agent says as a turn runs)
EXECUTOR_MAY_IMPORT = {"bot.models", "bot.events", "bot.errors", "bot.ports"}


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
    allowed = {
        m
        for m in used
        if m in HANDLER_MAY_IMPORT_MODULES
        or (m.startswith(HANDLER_MAY_IMPORT_PACKAGES) and m not in HANDLER_MAY_NOT_IMPORT)
    }
    assert used == allowed, used - allowed


@pytest.mark.parametrize("path", modules("executors"), ids=lambda p: p.name)
def test_executors_use_only_models_events_errors_and_ports(path):
    used = {m for m in imports(path) if m.startswith(("bot.", "handlers"))}
    assert used <= EXECUTOR_MAY_IMPORT, used - EXECUTOR_MAY_IMPORT


# The floors, from the top. A module may import any floor below its own, and a unit (a package,
# or a loose module) of its own floor when the units still import each other in no circle;
# never a floor above. Imports inside functions and under ``if TYPE_CHECKING:`` count too: a
# type names what the code leans on, and a climbing one is the first step of a circle.
FLOORS: tuple[tuple[str, ...], ...] = (
    # the entry points and composition roots: they build everything below
    (
        "bot.__main__",
        "bot.launch",
        "bot.cli",
        "bot.app",
        "bot.assembly",
        "bot.worker",
        "bot.core",
        "bot.shell",
        "bot.zygote",
        "bot.zygote_ahead",
        "bot.zygote_forks",
    ),
    ("handlers",),
    # what a person asks for: tasks (and their task files), the inbox, schedules, worktrees,
    # the MCP server for other agents, the board (a web view of the tasks)
    (
        "bot.tasks",
        "bot.preflight",
        "bot.intake",
        "bot.schedules",
        "bot.worktrees",
        "bot.prs",
        "bot.mcp",
        "bot.board",
        "bot.voice",
    ),
    # what runs turns and asks for approvals, the fleet of workers, and the upkeep that keeps the
    # record true and small (restart recovery, retention)
    ("bot.turns", "bot.approvals", "bot.fleet", "bot.upkeep"),
    # what a turn leans on: its budget, its engine, git, the allow-listed directories
    ("bot.money", "bot.engines", "bot.git", "bot.workdirs"),
    # what talks to Telegram: the outbox and texts; pairing (``detach init``, before any
    # database); the start-up tuning of aiogram's types, and ``bot/__init__.py`` installing it
    ("bot.telegram", "bot.pairing", "bot.lazy_types", "bot.lazy_orm", "bot"),
    # settings (pydantic, from the environment), composed of each engine's own (declared in its
    # executors/ module), and the paths that ``config`` reads them from
    ("bot.settings", "bot.config"),
    # the two outsides a turn reaches: the database, and the agents' processes (executors know
    # only the values and ports below, the existing test above says so)
    ("bot.store", "executors"),
    # values and contracts; the crash points the drills name; the redactor of secret values
    (
        "bot.models",
        "bot.rows",
        "bot.events",
        "bot.errors",
        "bot.ports",
        "bot.failpoints",
        "bot.redaction",
    ),
)
Edge = tuple[str, str, str]  # (importing module, imported module, where: path:line)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def project_imports(path: Path) -> list[Edge]:
    """Every import of a module of this project in ``path``, wherever it stands (a function,
    ``if TYPE_CHECKING:``); ``from bot import config`` is an import of ``bot.config``."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[Edge] = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [
                f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base
                for alias in node.names
            ]
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        found += [(here, n, where) for n in names if n.split(".")[0] in UNDER_FLOORS]
    return found


UNDER_FLOORS = ("bot", "handlers", "executors")


def unit_of(module: str, floors: tuple[tuple[str, ...], ...] = FLOORS) -> str | None:
    """The package or loose module that ``module`` belongs to (the longest unit naming it;
    ``bot`` itself only names ``bot/__init__.py``), or None where no floor holds it."""
    units = [u for floor in floors for u in floor]
    match = [u for u in units if module == u or (u != "bot" and module.startswith(u + "."))]
    return max(match, key=len) if match else None


def floor_problems(edges: list[Edge], floors: tuple[tuple[str, ...], ...] = FLOORS) -> list[str]:
    """Each import that climbs to a higher floor, then one circle among the units (of any
    floors) if there is one; an empty list: the floors hold."""
    level = {unit: n for n, floor in enumerate(floors) for unit in floor}
    graph: dict[str, set[str]] = {unit: set() for unit in level}
    problems = []
    for source, target, where in edges:
        a, b = unit_of(source, floors), unit_of(target, floors)
        if a is None or b is None:
            problems.append(f"{where}: {source if a is None else target} stands on no floor")
        elif a != b:
            graph[a].add(b)
            if level[b] < level[a]:
                problems.append(f"{where}: {source} climbs to {target}")
    circle = _circle(graph)
    if circle:
        problems.append("circle: " + " -> ".join(circle))
    return problems


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of ``graph`` (its first unit repeated at the end), or [] when it has none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(unit: str) -> list[str]:
        if unit in path:
            return [*path[path.index(unit) :], unit]
        if unit in done:
            return []
        path.append(unit)
        for nxt in sorted(graph[unit]):
            if found := visit(nxt):
                return found
        path.pop()
        done.add(unit)
        return []

    for unit in sorted(graph):
        if found := visit(unit):
            return found
    return []


def test_no_module_imports_a_floor_above_its_own_and_no_packages_import_in_a_circle():
    """The order of the packages (``FLOORS``): every module of bot/, handlers/ and executors/
    stands on a floor, imports nothing above it, and the units import each other in no
    circle, so each concept can be read (and tested) with only what lies below it."""
    edges = [e for pkg in UNDER_FLOORS for path in modules(pkg) for e in project_imports(path)]
    unplaced = [
        module_name(path)
        for pkg in UNDER_FLOORS
        for path in modules(pkg)
        if unit_of(module_name(path)) is None
    ]
    assert unplaced == [], "place these on a floor of FLOORS"
    assert len(edges) > 500  # the imports were read
    assert floor_problems(edges) == []


def test_the_floor_check_catches_a_climbing_import_and_a_circle():
    floors = (("top",), ("mid.a", "mid.b"), ("low",))
    down = [("top.x", "mid.a.y", "t:1"), ("mid.a.y", "mid.b", "a:1"), ("mid.b.z", "low", "b:1")]
    assert floor_problems(down, floors) == []
    climb = [*down, ("low", "top.x", "l:1")]
    assert floor_problems(climb, floors) == [
        "l:1: low climbs to top.x",
        "circle: low -> top -> mid.a -> mid.b -> low",
    ]
    sideways = [*down, ("mid.b.z", "mid.a", "b:2")]
    assert floor_problems(sideways, floors) == ["circle: mid.a -> mid.b -> mid.a"]
    assert floor_problems([("elsewhere", "low", "e:1")], floors) == [
        "e:1: elsewhere stands on no floor"
    ]


# The surfaces: they translate a person's (or a program's) input, call a use case and render its
# result; the record is the use cases' (issue #52), so no surface imports the store.
SURFACES = (
    "handlers",
    "bot/board",
    "bot/shell.py",
    "bot/cli.py",
    "bot/mcp",
    "bot/intake",
    "bot/schedules",
    "bot/voice",
)
# surfaces still reading the store, each on its way to a use case (none since #52's merge)
NOT_YET: set[str] = set()


def surface_files() -> list[Path]:
    return sorted(p for s in SURFACES for p in ([ROOT / s] if s.endswith(".py") else modules(s)))


def store_imports(edges: list[Edge]) -> list[str]:
    """Each import of ``bot.store`` (or a module of it) among ``edges``."""
    return [
        f"{where}: {target}"
        for _source, target, where in edges
        if target == "bot.store" or target.startswith("bot.store.")
    ]


def test_surfaces_import_use_cases_never_the_store():
    """A handler, the board, the shell and its CLI, the MCP server, the intake, the schedules
    and voice drafts reach the record only through use cases (``bot.tasks`` and the other
    concept packages): not one of their modules imports ``bot.store``, in a function or under
    ``TYPE_CHECKING`` either; the values they name live in ``bot.rows`` and ``bot.models``."""
    files = surface_files()
    assert len(files) > 45  # the surfaces were found
    found = [
        hit
        for path in files
        if path.relative_to(ROOT).as_posix() not in NOT_YET
        for hit in store_imports(project_imports(path))
    ]
    assert found == []
    still = {p for p in NOT_YET if store_imports(project_imports(ROOT / p))}
    assert still == NOT_YET, f"no longer reading the store, drop from NOT_YET: {NOT_YET - still}"


def test_the_surface_check_catches_every_form_of_a_store_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "bot" / "store").mkdir(parents=True)
    (tmp_path / "bot" / "store" / "__init__.py").write_text("")
    (tmp_path / "bot" / "store" / "db.py").write_text("")
    (tmp_path / "bot" / "rows.py").write_text("")
    surface = tmp_path / "bot" / "surface.py"
    surface.write_text(
        "from typing import TYPE_CHECKING\n"
        "from bot.rows import Schedule\n"
        "if TYPE_CHECKING:\n"
        "    from bot.store import Store\n"
        "def f():\n"
        "    import bot.store.db\n"
        "    from bot import store\n"
    )
    assert store_imports(project_imports(surface)) == [
        "bot/surface.py:4: bot.store",
        "bot/surface.py:6: bot.store.db",
        "bot/surface.py:7: bot.store",
    ]


SENDING_METHODS = {
    "answer",
    "reply",
    "send_message",
    "send_document",
    "edit_text",
    "edit_message_text",
    "edit_reply_markup",
    "delete_message",
    "send_photo",
    "answer_document",
    "copy_message",
    "forward_message",
}


def test_only_the_outbox_sends_edits_or_deletes_messages():
    """Every message goes through the outbox; the one direct call allowed elsewhere is a
    callback query's answer (``query.answer``), which is not a chat message."""
    offenders = []
    for pkg in ("bot", "handlers"):
        for path in modules(pkg):
            # delivery is the outbox's sender; pairing answers /start before any database
            # (so any outbox) exists
            if path.relative_to(ROOT).as_posix() in ("bot/telegram/delivery.py", "bot/pairing.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in SENDING_METHODS
                ):
                    owner = ast.unparse(node.func.value)
                    if (
                        not (node.func.attr == "answer" and owner.endswith("query"))
                        and "outbox" not in owner
                    ):
                        offenders.append(
                            f"{path.relative_to(ROOT)}:{node.lineno} {owner}.{node.func.attr}"
                        )
    assert offenders == []


def test_only_the_process_scheduler_and_its_users_import_apscheduler():
    """One APScheduler per process (``bot/turns/scheduler.py``); the pool and the timer use it
    (the pool through it alone; the timer and the PR follower for triggers and policies)."""
    users = [
        p.relative_to(ROOT).as_posix()
        for pkg in ("bot", "handlers", "executors")
        for p in modules(pkg)
        if any(m.startswith("apscheduler") for m in imports(p))
    ]
    assert users == ["bot/prs/follow.py", "bot/schedules/timer.py", "bot/turns/scheduler.py"]


def test_a_worker_imports_no_telegram_library_and_no_scheduler():
    """A scale-out worker runs turns with ``bot.core`` alone: what it imports (measured in a
    fresh interpreter) holds neither aiogram nor APScheduler (imported when the worker starts
    it, ``bot/turns/scheduler.py``), so it starts fast and light."""
    probe = (
        "import sys, bot.worker; heavy = {'aiogram', 'apscheduler', 'aiohttp'}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))"
    )
    assert _fresh(probe) == "[]"


def test_the_bot_on_sqlite_loads_no_postgresql_and_no_fuzzy_matcher():
    """Memory the idle bot does without (measured in a fresh interpreter, after opening its
    SQLite store): SQLAlchemy's PostgreSQL dialect (2 MB), asyncpg, rapidfuzz (3.5 MB, loaded by
    a typo in /model or /tz), anyio (2.6 MB, until the job pool's APScheduler starts; the
    executors shield their clean-up with plain asyncio, ``executors/shield.py``), psutil
    (1.3 MB; agents' process trees are read from /proc, ``executors/tree.py``), SQLAlchemy's
    ORM (5 MB, which its asyncio extension imports: ``bot/lazy_orm.py``). SQLAlchemy's asyncio
    extension, greenlet and aiosqlite are loaded: SQLite runs through them
    (``bot/store/db.py``), a few MB for a loop that never waits on SQLite."""
    probe = (
        "import asyncio, sys, tempfile, bot.app, bot.cli\n"
        "from bot.store import Store\n"
        "async def main():\n"
        "    with tempfile.TemporaryDirectory() as d:\n"
        "        store = await Store.open(f'sqlite:///{d}/t.sqlite')\n"
        "        await store.tasks.get(1)\n"
        "        await store.close()\n"
        "asyncio.run(main())\n"
        "unused = ('sqlalchemy.dialects.postgresql', 'asyncpg', 'rapidfuzz', 'anyio', 'psutil',\n"
        "          'sqlalchemy.orm')\n"
        "used = ('sqlalchemy.ext.asyncio', 'aiosqlite')\n"
        "print(sorted(m for m in unused if m in sys.modules), all(m in sys.modules for m in used))"
    )
    assert _fresh(probe) == "[] True"


def test_nothing_is_built_at_import_time():
    """No module-level Bot, Dispatcher, scheduler, engine or Settings()."""
    forbidden = {"Bot", "Dispatcher", "AsyncScheduler", "Settings", "create_async_engine"}
    for pkg in ("bot", "handlers", "executors"):
        for path in modules(pkg):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(
                    getattr(node, "value", None), ast.Call
                ):
                    func = node.value.func  # type: ignore[union-attr]
                    name = getattr(func, "id", getattr(func, "attr", ""))
                    assert name not in forbidden, f"{path}: module-level {name}()"


def _fresh(probe: str) -> str:
    """What ``probe`` prints in a fresh interpreter (what a process imports, measured)."""
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


# the day commit messages got a short subject (issue #42); older history is left as it is
SHORT_SUBJECTS_SINCE = "2026-12-05T01:00:00Z"


def test_commit_subjects_are_at_most_72_characters():
    """`git log --oneline` stays readable: every commit since SHORT_SUBJECTS_SINCE has a subject
    of at most 72 characters (.githooks/commit-msg refuses a longer one; `make dev` installs it).
    """
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    log = subprocess.run(
        ["git", "-C", str(ROOT), "log", f"--since={SHORT_SUBJECTS_SINCE}", "--format=%h %s"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert log.returncode == 0, log.stderr
    long = [line for line in log.stdout.splitlines() if len(line.split(" ", 1)[1]) > 72]
    assert not long, long


def test_one_exception_tree():
    """Every exception the project defines descends from ``bot.errors.DetachError``: none is
    derived from ``Exception`` (or ``BaseException``) outside ``bot/errors.py``."""
    offenders = []
    for package in ("bot", "handlers", "executors"):
        for path in modules(package):
            if path == ROOT / "bot" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                    if bases & {"Exception", "BaseException"}:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not offenders, offenders


# A constructor with more than five collaborators takes them by keyword (``*``), and the
# composition roots build with keywords what takes that many: a long row of positional
# arguments reads as nothing and swaps two of a type unnoticed.
MAX_POSITIONAL = 5
ROOTS = ("bot/core.py", "bot/app.py", "bot/assembly.py")


def positional_collaborators(init: ast.FunctionDef) -> int:
    """How many of ``__init__``'s parameters (``self`` aside) may be passed by position."""
    return len(init.args.posonlyargs) + len(init.args.args) - 1


def crowded_constructors(tree: ast.AST, where: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            count = positional_collaborators(node)
            if count > MAX_POSITIONAL:
                found.append(f"{where}:{node.lineno}: __init__ takes {count} by position")
    return found


def crowded_calls(tree: ast.AST, where: str) -> list[str]:
    return [
        f"{where}:{node.lineno}: built with {len(node.args)} positional arguments"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and len(node.args) > MAX_POSITIONAL
    ]


def test_constructors_with_more_than_five_collaborators_take_them_by_keyword():
    found = []
    for package in ("bot", "handlers", "executors"):
        for path in modules(package):
            tree = ast.parse(path.read_text())
            found += crowded_constructors(tree, str(path.relative_to(ROOT)))
    for root in ROOTS:
        found += crowded_calls(ast.parse((ROOT / root).read_text()), root)
    assert found == []


def test_the_keyword_check_catches_a_crowded_constructor_and_call():
    crowded = ast.parse(
        "class A:\n    def __init__(self, a, b, c, d, e, f): ...\nA(1, 2, 3, 4, 5, 6)"
    )
    roomy = ast.parse(
        "class A:\n    def __init__(self, a, b, c, d, e, *, f): ...\nA(1, 2, 3, 4, 5, f=6)"
    )
    assert len(crowded_constructors(crowded, "x")) == len(crowded_calls(crowded, "x")) == 1
    assert crowded_constructors(roomy, "x") == crowded_calls(roomy, "x") == []
