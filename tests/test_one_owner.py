"""One bot per database, one worker per name: a second `python -m bot run` on the same data
directory (or a second `python -m bot worker NAME` on the same PostgreSQL) refuses to start
with one line naming the running one, before its start-up sweep could stop the running one's
agents; the running one's agent goes on untouched."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import psutil

from bot.models import TaskStatus
from bot.store import Store
from tests.support import fake_claude
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, process_env, running_bot, stop_process
from tests.support.postgres import postgres_database
from tests.support.workers import Worker, worker_env

HOST = socket.gethostname()


async def _second(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, list[str]]:
    """Run a second serving process to its end (bounded): its exit code and stderr lines."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, err.decode(errors="replace").splitlines()


def _agents_below(pid: int) -> dict[int, float]:
    """The stand-in agents under ``pid``: pid -> start time."""
    found = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            argv = child.cmdline()
            if "fake-claude" in " ".join(argv) and "--version" not in argv:  # not the probe
                found[child.pid] = child.create_time()
        except psutil.NoSuchProcess:
            continue
    return found


def _still_running(agents: dict[int, float]) -> bool:
    for pid, started in agents.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() != started or proc.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
    return True


async def _agents_of(pid: int, timeout_s: float = 30) -> dict[int, float]:
    async with asyncio.timeout(timeout_s):
        while not (agents := _agents_below(pid)):
            await asyncio.sleep(0.1)
    return agents


async def test_a_second_bot_on_the_same_data_dir_refuses_and_leaves_the_first_alone(
    tmp_path, workdir
):
    data_dir = tmp_path / "data"
    agent = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    async with FakeTelegram() as fake:
        env = {
            **process_env(agent, fake, data_dir, fake_claude.script(tmp_path), workdir),
            "DETACH_INTAKE_INTERVAL_S": "0.2",
        }
        log = open(tmp_path / "bot.log", "ab")  # noqa: SIM115 (the child owns it)
        first = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
        )
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach HANG work on", OWNER)
            agents = await _agents_of(first.pid)

            code, lines = await _second(tmp_path, env, "run")

            assert code != 0, lines
            refusals = [line for line in lines if "already running" in line]
            assert refusals == [lines[-1]], lines  # one line, the last
            assert f"pid {first.pid} on {HOST} since " in lines[-1], lines
            code, lines = await _second(tmp_path, {**env, "LANG": "ru_RU.UTF-8"}, "run")
            assert code != 0 and "уже работает" in lines[-1], lines  # the terminal's language
            assert f"процесс {first.pid} на {HOST} с " in lines[-1], lines
            assert first.returncode is None
            await asyncio.sleep(1.0)  # what a sweep would have done is done by now
            assert _still_running(agents), "the second bot stopped the first one's agent"
            store = await Store.open(f"sqlite+aiosqlite:///{data_dir / 'detach.sqlite'}")
            try:
                task = await store.tasks.get(1)
                assert task is not None and task.status is TaskStatus.RUNNING
            finally:
                await store.close()
        finally:
            await stop_process(first)
    assert first.returncode == 0
    log_text = (tmp_path / "bot.log").read_text()
    assert "interrupted" not in log_text


async def test_a_second_worker_under_a_live_name_refuses_and_others_start(
    tmp_path, agent_env, workdir
):
    fake_bin = fake_claude.script(tmp_path)
    async with postgres_database() as url, FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, fake_bin, workdir, role="front", database_url=url
        )
        env = worker_env(agent_env, url, tmp_path / "w1", fake_bin, workdir)
        w1 = Worker("w1", env, tmp_path / "w1.log")
        w2 = Worker(
            "w2",
            worker_env(agent_env, url, tmp_path / "w2", fake_bin, workdir),
            tmp_path / "w2.log",
        )
        async with running_bot(settings, agent_env) as app:
            try:
                await w1.start()
                await w1.ready()
                await fake.user_message("/claude mode=auto HANG work on", OWNER)
                assert w1.proc is not None
                agents = await _agents_of(w1.proc.pid)

                code, lines = await _second(tmp_path, env, "worker", "w1")

                assert code != 0, lines
                assert "already running" in lines[-1], lines
                assert f"worker w1 on {HOST}" in lines[-1], lines
                assert f"pid {w1.proc.pid} on {HOST} since " in lines[-1], lines
                assert w1.alive and _still_running(agents), w1.tail()
                task = await app.store.tasks.get(1)
                assert task is not None and task.status is TaskStatus.RUNNING

                await w2.start()  # another name starts beside it
                await w2.ready()
            finally:
                await w1.stop()
                await w2.stop()
        assert os.path.exists(tmp_path / "w1.log")
