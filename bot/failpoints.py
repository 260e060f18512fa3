"""Named crash points for the crash-window drills: with ``DETACH_FAILPOINT=<name>`` in its
environment, the process kills itself with SIGKILL when it reaches that point, exactly as a
``kill -9`` aimed at that moment would. Unset (always, outside the tests), a point costs one
dictionary lookup. Agents never see the variable (they get no ``DETACH_*`` variable)."""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)
ENV = "DETACH_FAILPOINT"


def hit(name: str) -> None:
    if os.environ.get(ENV) == name:
        log.warning("failpoint %s: killing this process", name)
        os.kill(os.getpid(), signal.SIGKILL)
