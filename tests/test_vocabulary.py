"""One vocabulary per concept: the enums keep the strings already stored in databases and
carried by buttons in chats, byte for byte (no migration; old buttons keep working)."""

from __future__ import annotations

import pytest

from bot.approvals.view import APPROVAL_CHOICES, ApprovalAction, ApprovalChoice
from bot.models import (
    ApprovalAnswer,
    MessageKind,
    OutboxOp,
    QuestionKind,
    TaskStatus,
    WaitState,
    waiting_for,
)
from bot.telegram.callbacks import ACTIONS, TaskAction, TaskButton, run_on
from bot.telegram.held import HeldAction, HeldButton
from bot.telegram.texts import Texts


def test_stored_values_are_the_strings_of_before():
    assert [a.value for a in ApprovalAnswer] == [
        "allow",
        "deny",
        "always",
        "timeout",
        "ended",
        "restart",
        "superseded",
    ]
    assert [k.value for k in QuestionKind] == ["approval", "question", "budget"]
    assert [o.value for o in OutboxOp] == [
        "send",
        "document",
        "edit",
        "markup",
        "delete",
        "close_topic",
    ]
    assert {"ack", "status", "progress", "result", "approval", "followup", "limit"} <= {
        k.value for k in MessageKind
    }


@pytest.mark.parametrize(
    ("data", "packed"),
    [
        (ApprovalAction(qid=7, choice=ApprovalChoice.CONFIRM), "ap:7:confirm"),
        (ApprovalAction(qid=2**53 - 1, choice=ApprovalChoice.ALLOW), f"ap:{2**53 - 1}:allow"),
        (TaskAction(action=TaskButton.DISCARD_YES, task_id=12), "t:discard_yes:12"),
        (TaskAction(action=run_on("codex"), task_id=3), "t:run_codex:3"),
        (HeldAction(action=HeldButton.DROP, message_id=41, task_id=0), "h:drop:41:0"),
    ],
)
def test_callback_data_is_byte_identical(data, packed):
    assert data.pack() == packed
    assert type(data).unpack(packed) == data
    assert len(packed.encode()) <= 64


def test_a_button_of_before_still_unpacks_and_a_forged_one_does_not():
    assert ApprovalAction.unpack("ap:1:always").choice is ApprovalChoice.ALWAYS
    assert TaskAction.unpack("t:cancel:5").action == TaskButton.CANCEL
    with pytest.raises(ValueError):
        ApprovalAction.unpack("ap:1:explode")
    assert set(APPROVAL_CHOICES) == set(ApprovalChoice)
    assert "explode" not in ACTIONS


def test_schedule_buttons_pack_as_before_and_a_forged_action_does_not_unpack():
    from handlers.schedules import ScheduleAction, ScheduleButton

    assert ScheduleAction(action=ScheduleButton.DELETE, schedule_id=4).pack() == "sc:delete:4"
    assert ScheduleAction.unpack("sc:resume:4").action is ScheduleButton.RESUME
    with pytest.raises(ValueError):
        ScheduleAction.unpack("sc:rm_rf:4")


def test_every_waiting_state_has_one_name_in_every_locale_and_one_rule():
    """``WaitState`` is the one vocabulary of what a task waits for: the board sends its value,
    every surface shows its one text (``wait.<value>``), and ``waiting_for`` picks it."""
    assert [w.value for w in WaitState] == [
        "approval", "question", "consent", "budget", "preflight", "usage_limit", "terminal",
    ]  # fmt: skip
    texts = Texts()
    for locale in ("en", "ru"):
        names = {texts.wait(locale, w) for w in WaitState}
        assert len(names) == len(WaitState), names  # no two states share a name
    assert texts.wait("en", WaitState.CONSENT) == "waiting for your consent to its check"
    asked = WaitState.asked
    assert asked(QuestionKind.APPROVAL, check=True) is WaitState.CONSENT
    assert asked(QuestionKind.APPROVAL, check=False) is WaitState.APPROVAL
    assert waiting_for(TaskStatus.DONE, None, at_terminal=True) is WaitState.TERMINAL
    assert waiting_for(TaskStatus.RUNNING, WaitState.CONSENT, False) is WaitState.CONSENT
    # a budget question a follow-up moved past waits no more; a usage limit does
    assert waiting_for(TaskStatus.RUNNING, WaitState.BUDGET, False) is None
    assert waiting_for(TaskStatus.WAITING_FOR_LIMIT, None, False) is WaitState.USAGE_LIMIT
    assert waiting_for(TaskStatus.QUEUED, None, False) is None


def test_an_answer_from_any_surface_is_one_of_the_desks_answers():
    """The chat's buttons and the board's page answer in ``ApprovalAnswer``'s words: the
    answering buttons map onto it (Confirm is "always"), the two others only change the
    message, and the page sends the owner's answers themselves, "always" included."""
    import re

    from bot.approvals.answers import CHOSEN, OWNER_ANSWERS
    from tests.conftest import ROOT

    assert set(CHOSEN.values()) == OWNER_ANSWERS
    assert set(ApprovalChoice) - set(CHOSEN) == {ApprovalChoice.ALWAYS, ApprovalChoice.BACK}
    assert CHOSEN[ApprovalChoice.CONFIRM] is ApprovalAnswer.ALWAYS
    page = (ROOT / "bot" / "board" / "static" / "board.js").read_text()
    sent = set(re.findall(r'answer\(\{ answer: "(\w+)" \}\)', page))
    assert sent == {a.value for a in OWNER_ANSWERS}
