"""The local engine's ``run`` tool: ``sh -c`` in the task's directory (in bubblewrap when
sandboxed, the turn's denied paths hidden), without the bot's secrets, API keys and tokens and
the endpoint's own key in its environment, bounded by DETACH_LOCAL_COMMAND_TIMEOUT_S."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bot.models import ApprovalMode, TurnSpec
from executors.check import ShellCheck
from executors.denied import without_secrets
from executors.local_chat import Endpoint
from executors.local_tools import RunCommand


def command_runner(
    spec: TurnSpec,
    endpoint: Endpoint,
    environ: Mapping[str, str],
    secrets: Sequence[str],
    max_timeout_s: float,
) -> RunCommand:
    """The ``run`` tool of one turn: a command and its timeout (at most ``max_timeout_s``)
    -> its exit code (None: killed) and output."""
    sandboxed = spec.approval_mode is ApprovalMode.SANDBOX
    clean = without_secrets(environ, (endpoint.api_key_env or "", *spec.secret_names))

    async def run_command(command: str, timeout_s: float | None) -> tuple[int | None, str]:
        limit = min(timeout_s or max_timeout_s, max_timeout_s)
        shell = ShellCheck(
            clean,
            secrets,
            limit,
            nice=spec.nice,
            denied=lambda: spec.deny_read,
            confine_always=False,  # ask/auto: the command the owner approved, as it is
        )
        result = await shell.run(command, spec.cwd, sandboxed, 1, spec.process_tag)
        return result.exit_code, result.output

    return run_command
