"""What an agent's CLI starts for its Detach MCP server: a few lines of the standard library
(run with ``python -I -S``: no site, no project imports, ~15 ms) that hand this process's
stdin, stdout and stderr to the bot's MCP zygote (bot.zygote), which forks a server already
imported for them (a fresh `detach mcp` spends seconds importing), then waits for that server
and exits with its status. When the zygote cannot be reached (none running, a refusal, no
answer within a second) the relay becomes the plain `detach mcp` it stands for (``exec``):
slower, never different.

The server lives as long as this relay: when the relay goes (its agent ended, or was killed
with its tree), the server sees its connection close and exits (bot.zygote)."""

from __future__ import annotations

import json
import os
import socket
import sys

SOCKET_VAR = "DETACH_MCP_ZYGOTE"  # the zygote's socket (in the bot's private directory)
ANSWER_S = 2.0  # the zygote answers at once or not at all (a plain start is ~1.5 s)
HEADER_MAX = 256 * 1024


def main(argv: list[str]) -> int:
    path = os.environ.get(SOCKET_VAR, "")
    conn = _handed(path, argv) if path else None
    if conn is None:
        _become_detach(argv)  # never returns
        return 1
    return _wait(conn)


def _handed(path: str, argv: list[str]) -> socket.socket | None:
    """The connection once the zygote took our descriptors and forked their server, told to
    go on (``g``) only now: a fork whose ``+`` came too late never runs (our close ends it), so
    it and the plain fallback never both read the agent's stdin. None: it did not."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(ANSWER_S)
    try:
        header = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        if len(header) > HEADER_MAX:
            raise OSError("header too large")
        message = len(header).to_bytes(4, "big") + header
        conn.connect(path)
        sent = conn.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fds())])
        conn.sendall(message[sent:])
        if conn.recv(1) != b"+":
            raise OSError("refused")
        conn.sendall(b"g")
    except (OSError, ValueError):
        conn.close()
        return None
    conn.settimeout(None)
    return conn


def _fds() -> bytes:
    import array

    return array.array("i", [0, 1, 2]).tobytes()


def _wait(conn: socket.socket) -> int:
    """The server's exit status: the one byte it sends before it exits (EOF: it died)."""
    try:
        status = conn.recv(1)
    except OSError:
        return 1
    return status[0] if status else 1


def _become_detach(argv: list[str]) -> None:
    """The plain `detach mcp …`: this interpreter with its site and the project's path, never
    the directory it runs in (``-P``): that is the agent's, where a planted ``bot`` package
    would run as the bot."""
    os.execv(sys.executable, [sys.executable, "-P", "-m", "bot", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
