"""A fork of the MCP zygote made ahead (``{"ahead": true, …}``, no descriptors:
bot.mcp.launch.Zygote.ahead, as a turn's agent is spawned): made at once, it starts the server
as far as its first read (settings, database, its task, its tools) while the agent's CLI
starts; a relay whose argv, directory and environment (``identity``) are the same is then
handed to it, with the relay's environment. A fork nobody came for exits after AHEAD_S, or
when the zygote goes. Its output before the hand-over goes nowhere: where it failed, the relay
gets a fresh fork (bot.zygote_forks) that says so."""

from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

from bot.zygote_forks import GO_S, HEADER_MAX, READ_S, flushed, rest, watch
from executors.procs import RUN_ENV, TAG_ENV

AHEAD_S = 60.0  # a fork made ahead waits this long for its relay (an agent's CLI starts in ~1 s)
AHEAD_MAX = 32  # forks waiting at once; the oldest goes first
# what a relay's environment may hold that the bot's (asked ahead) does not: the run's tags
# and TMPDIR given at the agent's spawn, and what the pinned claude CLI adds to a stdio
# server's (measured: tests/test_mcp_ahead.py). Anything else differing, a fresh fork serves
# the relay: a fork made ahead read its settings and the secrets it redacts before its relay
# came (a token in Claude's settings `env` reaches the relay's environment alone).
PER_SPAWN = frozenset(
    {
        TAG_ENV,
        RUN_ENV,
        "TMPDIR",
        "PWD",
        "AI_AGENT",
        "CLAUDECODE",
        "CLAUDE_CODE_ENTRYPOINT",
        "CLAUDE_CODE_SESSION_ID",
        "CLAUDE_PROJECT_DIR",
        "COREPACK_ENABLE_AUTO_PIN",
        "NoDefaultCurrentDirectoryInExePath",
    }
)
COERCED = ("LC_CTYPE", "C.UTF-8")  # what Python adds to a C locale's environment (PEP 538)

# forks made ahead, by ``identity``: the zygote's end of each one's socket pair, and its deadline
_ahead: dict[str, list[tuple[socket.socket, float]]] = {}


def in_fork(listener: socket.socket) -> None:
    """A fork keeps none of the zygote's sockets: its listener, the forks made ahead."""
    listener.close()
    for waiting in _ahead.values():
        for ours, _deadline in waiting:
            ours.close()
    _ahead.clear()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def identity(header: dict) -> str:
    """What a relay and a fork made ahead must share to be the same `detach mcp`."""
    env = {k: v for k, v in header["env"].items() if k not in PER_SPAWN and (k, v) != COERCED}
    return json.dumps([header["argv"], header["cwd"], env], sort_keys=True)


def fork_ahead(listener: socket.socket, conn: socket.socket, header: dict) -> None:
    _expired(time.monotonic())
    if sum(len(w) for w in _ahead.values()) >= AHEAD_MAX:
        oldest = min(_ahead, key=lambda k: _ahead[k][0][1])
        _ahead[oldest].pop(0)[0].close()  # its fork sees the end and exits
        if not _ahead[oldest]:
            del _ahead[oldest]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.fork() == 0:
        conn.close()
        ours.close()
        in_fork(listener)
        code = 0
        try:
            code = become_ahead(theirs, header)
        except BaseException:
            traceback.print_exc()  # after the hand-over: on the agent's stderr
        finally:
            flushed()
            os._exit(code)
    theirs.close()
    _ahead.setdefault(identity(header), []).append((ours, time.monotonic() + AHEAD_S))


def _expired(now: float) -> None:
    for key in list(_ahead):
        for entry in [e for e in _ahead[key] if e[1] <= now]:
            entry[0].close()
            _ahead[key].remove(entry)
        if not _ahead[key]:
            del _ahead[key]


def handed(conn: socket.socket, header: dict, fds: list[int]) -> bool:
    """The relay handed to a fork made ahead for it (its connection, its descriptors and its
    environment); False: none is waiting (or none took it) and a fresh fork serves it."""
    _expired(time.monotonic())
    body = json.dumps(header["env"]).encode()
    message = len(body).to_bytes(4, "big") + body
    key = identity(header)
    waiting = _ahead.get(key, [])
    handed = False
    while waiting and not handed:
        ours, _deadline = waiting.pop(0)
        with contextlib.suppress(OSError):  # that fork is gone: the next, else a fresh one
            ours.settimeout(READ_S)
            rights = array.array("i", [conn.fileno(), *fds]).tobytes()
            sent = ours.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            # the descriptors are the fork's now, whatever follows: never a second server on
            # them (a fork that read too little exits, and the relay runs the plain command)
            handed = True
            ours.sendall(message[sent:])
        ours.close()
    if not waiting:
        _ahead.pop(key, None)
    return handed


def become_ahead(theirs: socket.socket, header: dict) -> int:
    """In a fork made ahead: `detach mcp` as far as its first read of stdin, quiet until its
    relay comes (``_Relay``: taken at once, while the server still starts), then in the
    relay's environment; it exits when no relay comes."""
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)
    os.environ.clear()
    os.environ.update(header["env"])
    with contextlib.suppress(OSError):
        os.chdir(header["cwd"])
    relay = _Relay(theirs)
    import bot.mcp.command

    bot.mcp.command.stdio_taken = relay.taken
    from bot.cli import main

    try:
        code = main(header["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    if not relay.end() or not relay.handed.wait(GO_S) or relay.conn is None:
        return 0  # it ended before it said yes to a relay: that relay runs the plain command
    sys.stdout.flush()
    with contextlib.suppress(OSError):
        relay.conn.sendall(bytes([code & 0xFF]))
    return code


class _Relay:
    """A fork made ahead's relay, taken by a thread of its own as soon as the zygote hands it
    over: its descriptors become this process's 0, 1 and 2, then its yes and go, as a fresh
    fork's (``become``); no relay within AHEAD_S, or no go: the process exits. Its
    environment becomes the process's only where the server reads its input (``taken``):
    the settings being read meanwhile must not see it change."""

    def __init__(self, theirs: socket.socket) -> None:
        self.handed = threading.Event()
        self.conn: socket.socket | None = None
        self._env: dict[str, str] = {}
        self._lock = threading.Lock()
        self._ended = self._said_yes = False
        threading.Thread(target=self._take, args=(theirs,), daemon=True).start()

    def end(self) -> bool:
        """The server ended (the main thread's): whether it had said yes to a relay, which
        then gets its exit status; if not, a relay that comes now is refused."""
        with self._lock:
            self._ended = True
            return self._said_yes

    async def taken(self) -> None:
        import asyncio

        await asyncio.to_thread(self.handed.wait)  # bounded: AHEAD_S, then GO_S
        os.environ.clear()
        os.environ.update(self._env)

    def _take(self, theirs: socket.socket) -> None:
        try:
            conn = self._received(theirs)
            conn.settimeout(GO_S)
            with self._lock:
                if self._ended:  # it failed before its relay came: never a silent yes
                    os._exit(0)
                self._said_yes = True
                conn.sendall(b"+")
            if conn.recv(1) != b"g":
                os._exit(0)
            conn.settimeout(None)
        except BaseException:  # noqa: BLE001  (any end here is the process's)
            os._exit(0)
        self.conn = conn
        self.handed.set()
        watch(conn)

    def _received(self, theirs: socket.socket) -> socket.socket:
        """The relay's connection; its descriptors are this process's 0, 1 and 2 now."""
        theirs.settimeout(AHEAD_S)
        fds = array.array("i")
        data, ancdata, _flags, _addr = theirs.recvmsg(
            4 + HEADER_MAX, socket.CMSG_LEN(4 * fds.itemsize)
        )
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if len(fds) != 4 or len(data) < 4:
            raise ValueError("no relay")
        size = int.from_bytes(data[:4], "big")
        self._env = json.loads(rest(theirs, data[4:], size, time.monotonic() + READ_S))
        theirs.close()
        flushed()  # (nothing is written before a relay comes; if it were, not to the agent)
        for target, fd in enumerate(fds[1:]):
            os.dup2(fd, target)
            os.close(fd)
        return socket.socket(fileno=fds[0])
