"""Codex's sandboxed mode as a permission profile (measured with 0.171.0, docs/sandbox.md).

``sandbox: "workspace-write"`` lets a command read every file (the bot's token, the database,
the owner's keys) and passes every API key in its environment. A permission profile selected
with ``default_permissions`` on the app-server's command line (and no ``sandbox`` on
``thread/start``, which would select the older settings instead) does what Claude's sandbox
does: writes only in the task's directory (``:workspace``, with ``/tmp`` and ``$TMPDIR`` made
read-only), no network, each denied path ``none`` (bubblewrap: ``Permission denied``; the task's
directory stays readable and writable inside a denied one), and the API keys, tokens and
passwords excluded from its commands' environment. The task's ``.claude`` and ``.mcp.json``
are ``read`` (Claude Code's hooks and rules: not for a command to plant).

A ``read`` entry must name a path that exists for the whole turn. For a missing one Codex makes
an empty mount point per sandboxed process and removes it when the last of them ends, and that
races: a second process (the helper that reads ``AGENTS.md`` at ``thread/start``) sees the
point, binds it as existing, and fails when the first removes it (``bwrap: Can't get type of
source …/.claude``; seen once in CI on a loaded 2-core machine, the thread never started). So a
missing ``.claude`` is made an empty directory before the turn (git shows no empty directory)
and stays (``kept_dirs``), as Detach's own bubblewrap leaves it: removed, it would vanish from
under another sandbox binding it at that moment (a sub-task's, in the same directory: removing
a mount point in another mount namespace detaches it there, and that sandbox may then create
it). A missing ``.mcp.json`` gets no entry, as in Detach's bubblewrap (``sandbox._claude_kept``):
its mount point would be an empty file in the owner's tree, and the bot's Claude turns pass
``--strict-mcp-config``, so no turn of the bot's starts a server it names."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path

from bot.models import ApprovalMode, TurnSpec
from executors.denied import outside, secret_names
from executors.sandbox import CLAUDE_KEPT


def outermost(paths: tuple[Path, ...]) -> list[Path]:
    """``paths`` without those inside another: 0.171's bubblewrap cannot make the mount point
    of a denied file inside a denied directory (``Can't create file … Read-only file
    system``, the thread fails to start), and the directory hides it anyway."""
    return [p for p in paths if not any(p != o and p.is_relative_to(o) for o in paths)]


PROFILE = "detach-sandbox"
# the modes whose commands run under the profile, and the built-in profile each extends: in
# read-only mode commands run without asking, and 0.171's ``read-only`` sandbox reads everything
PROFILED = {ApprovalMode.SANDBOX: ":workspace", ApprovalMode.READONLY: ":read-only"}
# the variables no command gets, whatever their case (Codex matches these patterns itself)
EXCLUDED = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSW*", "*CREDENTIAL*", "*AUTH*")


def _kept(cwd: Path) -> list[Path]:
    """The task's ``.claude`` and ``.mcp.json``, but a symlink (it leads somewhere: outside the
    task's directory, which is read-only anyway)."""
    return [cwd / name for name in CLAUDE_KEPT if not (cwd / name).is_symlink()]


def kept_dirs(spec: TurnSpec) -> list[Path]:
    """Before a sandboxed turn: make a missing ``.claude`` of the task's directory an empty
    directory, so the profile's ``read`` entry names a path that exists for the whole turn, and
    after it (see the module). Returns what it made."""
    if spec.approval_mode is not ApprovalMode.SANDBOX:
        return []
    made = []
    for path in _kept(Path(spec.cwd)):
        if path.name == ".claude" and not path.exists():
            with contextlib.suppress(OSError):  # not ours to make: the entry is left out
                path.mkdir()
                made.append(path)
    return made


def profile_config(
    spec: TurnSpec, environ: Mapping[str, str], base: str = ":workspace"
) -> list[str]:
    """``-c`` overrides for the app-server of a sandboxed (``base`` ``:workspace``) or
    read-only (``:read-only``) turn."""
    # a workspace root is bound back inside a denied directory; a read-only turn has none (a
    # path made "read" inside a "none" one stays hidden): its denials are written around it
    denied = spec.deny_read if base == ":workspace" else outside(spec.deny_read, spec.cwd)
    entries = {str(path): "none" for path in outermost(denied) if path != spec.cwd}
    entries.update({":slash_tmp": "read", ":tmpdir": "read"})
    if base == ":workspace":  # what Claude Code obeys there: not for a command to plant
        entries.update({str(path): "read" for path in _kept(spec.cwd) if path.exists()})
    filesystem = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in entries.items())
    profile = f"{{extends = {json.dumps(base)}, filesystem = {{{filesystem}}}}}"
    excluded = [*EXCLUDED, *secret_names(environ, spec.secret_names)]
    return [
        "-c",
        f"default_permissions={json.dumps(PROFILE)}",
        "-c",
        f"permissions={{{json.dumps(PROFILE)} = {profile}}}",
        "-c",
        f"shell_environment_policy.exclude={json.dumps(excluded)}",
    ]
