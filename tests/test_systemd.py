"""The systemd unit is valid and runs the console script."""

from __future__ import annotations

import configparser
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

UNIT = ROOT / "systemd" / "detach.service"


def test_unit_runs_the_console_script_and_stops_agents_cleanly():
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string(UNIT.read_text())
    service = parser["Service"]
    assert service["ExecStart"].endswith("/.venv/bin/detach run")
    assert service["Type"] == "exec" and service["Restart"] == "on-failure"
    assert service["KillMode"] == "mixed" and int(service["TimeoutStopSec"]) >= 30
    assert service["EnvironmentFile"].endswith("/.env")
    assert "detach = \"bot.cli:main\"" in (ROOT / "pyproject.toml").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify(tmp_path):
    home = tmp_path / "home"
    (home / "detach" / ".venv" / "bin").mkdir(parents=True)
    exe = home / "detach" / ".venv" / "bin" / "detach"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (home / "detach" / ".env").write_text("")
    unit = tmp_path / "detach.service"
    unit.write_text(UNIT.read_text().replace("%h", str(home)))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if "detach.service" in line]
    assert result.returncode == 0 and problems == [], result.stderr
