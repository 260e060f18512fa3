"""The bot's side of a claude process's stdin: the prompt, steering, and the answers to its
control requests (permission prompts), each answered without blocking the reader."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.ports import Approver, SteerInbox
from executors.claude_protocol import approval_request, control_error
from executors.claude_steer import ClaudeSteering
from executors.json_lines import JsonLines


class ClaudeChannel:
    """The bot's side of the CLI's stdin: the prompt, and answers to control requests."""

    def __init__(
        self, proc: asyncio.subprocess.Process, approver: Approver, inbox: SteerInbox
    ) -> None:
        self._proc = proc
        self._approver = approver
        self._lines = JsonLines(proc)
        self._pending: set[asyncio.Task[None]] = set()
        self.steering = ClaudeSteering(inbox, self._lines)

    async def send(self, message: dict[str, Any]) -> None:
        await self._lines.write(message)

    def answer(self, data: dict[str, Any]) -> None:
        """Answer without blocking the reader: a person may take minutes to decide."""
        task = asyncio.create_task(self._answer(data))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _answer(self, data: dict[str, Any]) -> None:
        request_id = str(data.get("request_id", ""))
        request = data.get("request")
        request = request if isinstance(request, dict) else {}
        if request.get("subtype") != "can_use_tool":
            await self.send(control_error(request_id, f"unsupported: {request.get('subtype')}"))
            return
        decision = await self._approver.decide(approval_request(request))
        tool_input = request.get("input")
        tool_input = tool_input if isinstance(tool_input, dict) else {}
        if decision.answers is not None:  # AskUserQuestion: allowed, with the answers added
            tool_input = {**tool_input, "answers": decision.answers}
        body: dict[str, Any] = (  # always echo updatedInput on allow (2.1.197 requires it)
            {"behavior": "allow", "updatedInput": tool_input}
            if decision.allow
            else {"behavior": "deny", "message": decision.message}
        )
        await self.send(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": body},
            }
        )

    def close(self) -> None:
        self._lines.close()

    async def aclose(self) -> None:
        await self.steering.aclose()
        for task in list(self._pending):
            task.cancel()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        self.close()
