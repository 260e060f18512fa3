"""What a fresh fork of the MCP zygote (bot.zygote) does: it becomes the relay's `detach mcp …`
on its descriptors, in its environment and directory (one made ahead: bot.zygote_ahead)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time

HEADER_MAX = 256 * 1024
READ_S = 1.0  # a relay sends its header at once
GO_S = 5.0  # and its go as soon as it has our yes


def flushed() -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()


def rest(conn: socket.socket, body: bytes, size: int, deadline: float) -> bytes:
    while len(body) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ValueError("slow header")
        conn.settimeout(left)
        more = conn.recv(size - len(body))
        if not more:
            raise ValueError("short header")
        body += more
    return body


def become(conn: socket.socket, header: dict, fds: list[int]) -> int:
    """In the fork: the relay's descriptors, environment and directory, then `detach mcp`."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    fds.clear()
    os.environ.clear()
    os.environ.update(header["env"])
    with contextlib.suppress(OSError):
        os.chdir(header["cwd"])
    conn.settimeout(GO_S)
    conn.sendall(b"+")
    if conn.recv(1) != b"g":  # the relay gave up on us (and runs the plain command)
        return 0
    conn.settimeout(None)
    threading.Thread(target=watch, args=(conn,), daemon=True).start()
    from bot.cli import main

    try:
        code = main(header["argv"])
    except SystemExit as exc:  # argparse's own exits
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush()
    with contextlib.suppress(OSError):
        conn.sendall(bytes([code & 0xFF]))
    return code


def watch(conn: socket.socket) -> None:
    """The relay never writes after its header: a read that returns means it is gone."""
    with contextlib.suppress(OSError):
        conn.recv(1)
    os._exit(0)
