"""The systemd units are valid and run the console script."""

from __future__ import annotations

import configparser
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

UNITS = {
    "detach.service": "/.venv/bin/detach run",
    "detach-worker@.service": "/.venv/bin/detach worker %i",
}


@pytest.mark.parametrize(("name", "command"), UNITS.items())
def test_unit_runs_the_console_script_and_stops_agents_cleanly(name, command):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string((ROOT / "systemd" / name).read_text())
    service = parser["Service"]
    assert service["ExecStart"].endswith(command)
    assert service["Type"] == "exec" and service["Restart"] == "on-failure"
    assert service["KillMode"] == "mixed" and int(service["TimeoutStopSec"]) >= 30
    assert "EnvironmentFile" not in service  # the app finds its settings file (bot.config)
    assert 'detach = "bot.launch:main"' in (ROOT / "pyproject.toml").read_text()


# what mounts over /proc (or hides its processes): the kernel then refuses an unprivileged
# bubblewrap its fresh /proc, so neither a sandbox nor the agents' PID namespace would start
MASKS_PROC = ("ProtectKernelTunables", "ProtectProc", "ProcSubset", "ProtectHostname")


@pytest.mark.parametrize("name", UNITS)
def test_no_hardening_of_the_unit_breaks_the_sandboxes(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string((ROOT / "systemd" / name).read_text())
    set_here = {key.lower() for key in parser["Service"]}
    assert not set_here & {key.lower() for key in MASKS_PROC}
    assert parser["Service"]["NoNewPrivileges"] == "true"  # bubblewrap needs no setuid


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_verify(tmp_path, name):
    home = tmp_path / "home"
    (home / "detach" / ".venv" / "bin").mkdir(parents=True)
    exe = home / "detach" / ".venv" / "bin" / "detach"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (home / "detach" / ".env").write_text("")
    unit = tmp_path / name.replace("@", "@1") if "@" in name else tmp_path / name
    unit.write_text((ROOT / "systemd" / name).read_text().replace("%h", str(home)))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in result.stderr.splitlines() if unit.name in line]
    assert result.returncode == 0 and problems == [], result.stderr


def test_a_worker_without_the_shared_database_says_what_to_set(tmp_path):
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("DETACH_")}
    env["DETACH_DATA_DIR"] = str(tmp_path / "data")
    result = subprocess.run(
        [sys.executable, "-m", "bot", "worker", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "DETACH_DATABASE_URL=postgresql" in result.stderr
