"""Shared fixtures: the pinned claude binary, a scripted model server, an isolated agent env."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import stalls, workers
from tests.support.anthropic_mock import AnthropicMock
from tests.support.openai_mock import OpenAIMock

ROOT = Path(__file__).resolve().parent.parent
# a test that uses one of these runs a real agent CLI: the slow tier (`make test-fast` skips it)
REAL_AGENT_FIXTURES = frozenset({"claude_bin", "codex_bin", "agent_env", "codex_env"})


# whole modules of drills and real processes of the bot (detach run/add/worker, kill -9)
SLOW_MODULES = frozenset(
    {
        "test_add_plans_as_chat",
        "test_archive_all",
        "test_burst_stop",
        "test_chaos",
        "test_cli",
        "test_crash_windows",
        "test_daemon_outlives",
        "test_every_door",
        "test_fleet",
        "test_fleet_chaos",
        "test_followup_doors",
        "test_launch",
        "test_mcp_zygote",  # real processes: the zygote's imports, forks and the plain server
        "test_board_hosts_browser",  # chromium and a fleet's heartbeats
        "test_one_owner",
        "test_orphans",
        "test_preflight_doors",
        "test_progress_takeover",
        "test_restart",
        "test_setup",
        "test_systemd",
        "test_wait_names",
        "test_workers",
    }
)
# single tests of other modules that take seconds (a subprocess, a burst, a long bounded wait)
SLOW_TESTS = frozenset(
    {
        "test_architecture.py::test_the_bot_on_sqlite_loads_no_orm_no_postgresql_and_no_fuzzy_matcher",
        "test_architecture.py::test_a_worker_imports_no_telegram_library_and_no_scheduler",
        "test_architecture.py::test_nothing_is_built_at_import_time",
        "test_e2e_telegram.py::test_progress_never_outlives_its_turn_in_a_backed_up_chat",
        "test_session.py::test_the_types_answers_build_no_response_model_of_their_own",
        "test_mcp.py::test_http_transport_wants_the_token_from_the_config_home",
        "test_codex_orphans.py::test_a_restart_sweeps_what_its_crashed_run_left_and_only_that",
        "test_chat_order.py::test_a_chats_messages_are_handled_in_order_and_nothing_else_waits",
        "test_limits.py::test_a_burst_of_tasks_meets_the_limit_and_each_waits_once_and_goes_on_in_order",
        "test_limit_times.py::test_one_tasks_sooner_reset_does_not_release_the_others",
        "test_hostile_read.py::test_local_commands_read_no_secret",
        "test_lazy_types.py::test_telegram_types_are_built_on_first_use_and_work",
        "test_local_tools_hostile.py::test_a_catastrophic_pattern_neither_hangs_nor_stalls_the_loop",
        "test_hostile_files.py::test_a_fifo_detach_toml_neither_freezes_the_bot_nor_stops_the_task",
        "test_hostile_files.py::test_planted_task_files_are_rejected_at_once",
        "test_hostile_streams.py::test_the_bot_answers_another_chat_while_an_endpoint_streams_pieces",
        "test_hostile_streams.py::test_a_megabyte_argument_in_one_character_pieces_stops_at_the_piece_bound",
        "test_hostile_streams.py::test_a_long_line_costs_linear_time",
        "test_attachments.py::test_a_caption_less_photo_asks_and_a_reply_starts_the_task",
        "test_check_consent.py::test_no_tap_is_a_no_and_the_card_says_the_check_did_not_run",
        "test_agent_faults.py::test_an_agent_that_lingers_after_its_result_is_stopped_and_answered",
        "test_pool.py::test_a_turn_claimed_by_its_creator_starts_at_once_or_first_when_a_slot_frees",
        "test_pool.py::test_cap_is_honoured_and_tasks_run_in_parallel",
        "test_store.py::test_a_write_waits_for_another_process_lock_without_blocking_the_loop",
        "test_stall.py::test_a_silent_model_gets_one_message_and_stop_ends_the_turn",
        "test_stall.py::test_keep_waiting_silences_the_turn_and_a_tool_is_named",
        "test_stall.py::test_a_turn_waiting_on_an_approval_gets_no_watchdog",
        "test_stall.py::test_keep_waiting_tapped_at_the_bot_silences_a_workers_watchdog",
        # a forum group's messages are paced to Telegram's 20 a minute: tens of seconds
        "test_topics.py::test_a_forum_group_shares_a_topic_per_directory_and_only_the_owner_continues",
        "test_topics.py::test_a_deleted_topic_or_one_that_cannot_be_opened_loses_nothing",
        # the fast tier's slowest (0.7 s and more each on this 2-core VM): under a minute
        "test_stall.py::test_a_restart_closes_the_stall_message_of_the_turn_it_interrupts",
        "test_stall.py::test_an_old_runs_end_leaves_the_running_watchdogs_message",
        "test_stall.py::test_a_takeover_closes_the_stall_message_of_the_dead_runners_turn",
        "test_pending_copies.py::test_extend_tapped_again_on_its_copy_says_it_was_answered",
        "test_pending_copies.py::test_pending_again_keeps_one_live_copy_per_chat_and_settling_edits_each",
        "test_pending_copies.py::test_a_budget_decision_a_follow_up_moved_past_expires_when_tapped",
        "test_pending_copies.py::test_a_copy_and_a_toggle_at_once_lose_neither[toggle]",
        "test_pending_copies.py::test_a_copy_and_a_toggle_at_once_lose_neither[copy]",
        "test_pending_copies.py::test_a_follow_up_between_extends_read_and_its_answer_wins_whole",
        "test_pending_copies.py::test_a_follow_up_at_the_budget_again_leaves_one_decision_open",
        "test_redaction.py::test_a_worktrees_patch_shown_inline_holds_no_secret",
        "test_agent_faults.py::test_a_stubborn_agent_and_its_daemon_stop_on_cancel",
        "test_attachments.py::test_a_captioned_file_is_acknowledged_with_its_words_and_name",
        "test_board.py::test_follow_up_merge_and_discard_from_the_board",
        "test_afterlife.py::test_the_card_offers_merge_and_discard_only_while_the_worktree_holds_work",
        "test_afterlife.py::test_to_terminal_after_a_merge_cuts_the_worktree_again_where_the_line_says",
        "test_afterlife.py::test_after_a_merge_the_board_says_so_at_once_and_a_follow_up_goes_on_in_place",
        "test_afterlife.py::test_a_file_sent_as_a_reply_after_a_merge_lands_in_the_worktree_cut_again",
        "test_board.py::test_the_stream_brings_new_transcript_lines_within_a_second",
        # the board's limits (issue #51): a second board, floods, every route of the board
        "test_board_limits.py::test_a_25_digit_id_is_a_json_404_on_every_route_that_takes_one",
        "test_board_limits.py::test_a_25_digit_cursor_limit_or_question_is_a_json_400",
        "test_board_limits.py::test_a_100000_deep_json_body_is_a_400_and_one_over_the_size_cap_a_413",
        "test_board_limits.py::test_an_unsigned_flood_is_capped_and_closed_while_a_signed_in_page_answers",
        "test_board_limits.py::test_a_users_event_streams_are_capped_and_a_closed_one_frees_its_place_at_once",
        "test_board_limits.py::test_a_taken_port_costs_the_board_only_in_one_log_line",
        "test_buzzes.py::test_a_budget_stop_is_one_message_with_extend_and_stop",
        "test_buzzes.py::test_a_cancel_is_one_message_edited_to_its_end",
        "test_buzzes.py::test_a_long_answer_buzzes_once",
        "test_buzzes.py::test_follow_ups_by_reply_by_button_and_during_a_turn_end_true",
        "test_check_consent.py::test_a_check_the_owner_typed_runs_without_asking_sandboxed_in_every_mode",
        "test_check_consent.py::test_allow_runs_it_in_the_sandbox",
        "test_check_consent.py::test_always_is_remembered_per_command_until_revoked",
        "test_fake_engine.py::test_a_new_task_with_a_free_slot_is_created_running_and_waits_when_none_is",
        "test_mcp.py::test_bad_input_is_a_tool_error_with_the_reason",
        "test_phone.py::test_acknowledgements_after_failed_and_cancelled",
        "test_phone.py::test_after_a_restart_the_notice_and_acknowledgements_follow_the_buttons_used",
        "test_phone.py::test_archive_all_takes_the_buttons_off_every_archived_card",
        "test_phone.py::test_card_buttons_follow_archive_and_retry",
        "test_phone.py::test_files_go_into_the_task_directory_and_their_paths_reach_the_agent",
        "test_phone.py::test_the_card_lists_new_files_and_small_budgets_read_true",
        "test_pool.py::test_a_stop_while_starting_applies_when_the_agent_would_start",
        "test_pool.py::test_a_turn_submitted_again_while_it_runs_is_offered_once_more_after",
        "test_pool.py::test_timeout_stops_the_turn_with_a_reason",
        "test_topics.py::test_a_task_keeps_its_messages_in_its_topic_and_the_topic_continues_it",
        "test_topics.py::test_without_topics_no_message_names_a_thread",
        "test_voice.py::test_a_note_over_the_bound_is_cut_and_says_so",
        "test_voice.py::test_a_voice_note_in_a_tasks_topic_continues_that_task_there",
        "test_voice.py::test_a_voice_note_is_a_draft_that_only_its_owners_start_begins",
        "test_voice.py::test_the_servers_failures_are_one_clear_line",
        "test_waiting.py::test_a_pending_copy_follows_the_original_when_it_is_settled",
        "test_waiting.py::test_tasks_puts_the_waiting_first_and_progress_says_it_waits",
        "test_secrets.py::test_an_answer_error_or_stderr_stores_and_shows_no_secret",
        "test_secrets.py::test_a_presets_key_of_any_name_is_redacted_and_hidden_from_commands",
        "test_redaction.py::test_a_running_tasks_progress_and_approval_card_show_no_secret",
        "test_redaction.py::test_a_checks_output_is_redacted_stored_shown_and_fed_back",
        "test_stall.py::test_each_new_state_speaks_once",
        "test_stall.py::test_an_agent_that_answered_but_does_not_exit_is_named",
        "test_stall.py::test_a_long_wait_on_the_owner_is_no_stall_after_the_answer",
        "test_routing_strength.py::test_the_hand_over_offers_and_takes_only_an_engine_as_strong",
        "test_board_browser.py::test_a_task_held_by_its_preflight_is_listed_and_dropped_on_the_page",
        # the fast tier's slowest on two workers (1 s and more each): under a minute
        "test_mcp.py::test_watch_returns_on_its_bound_and_cancel_of_a_queued_task",
        "test_board.py::test_nothing_answers_without_a_session",
        "test_board.py::test_with_an_https_public_url_board_and_cards_open_the_mini_app",
        "test_fake_engine.py::test_a_turn_of_a_replayed_engine_reports_through_the_real_bot",
        "test_hostile_streams.py::test_an_answer_of_too_many_pieces_in_all_stops_too",
        "test_plain_checkout.py::test_a_plain_checkout_card_lists_the_turns_commit_not_the_owners_edits",
        "test_afterlife.py::test_a_merged_worktree_is_cut_again_from_its_branch_as_it_is_now",
        "test_board_browser.py::test_while_a_turn_runs_the_follow_up_form_offers_steer_now_and_queue",
        # each a `detach` process of its own (2-5 s): the slow tier (2026-12-07, 65 s in all)
        "test_jsonl_export.py::test_export_jsonl_in_the_shell_prints_the_same_items",
        "test_managed.py::test_the_sdk_is_imported_on_the_first_remote_turn_not_at_start_up",
        "test_slips.py::test_export_of_a_missing_task_answers_in_the_shells_words",
        "test_slips.py::test_detach_add_prints_the_number_and_the_chat_names_the_goal",
        "test_audit.py::test_audit_lists_an_always_a_deny_an_extend_and_a_consent",
    }
)


# the longest drills (a minute or two each, mostly waiting on paced sends): started first, so
# that on two workers (make test: pytest-xdist) none of them is left running alone at the end
LONG_FIRST = (
    "test_fleet_chaos.py::test_forty_tasks_while_workers_are_killed_in_turn",
    "test_outbox.py::test_a_burst_of_100_real_tasks_into_one_chat_delivers_everything_in_order",
    "test_chaos.py::test_thirty_tasks_through_kill_9_and_bot_api_faults",
    "test_topics.py::test_a_forum_group_shares_a_topic_per_directory_and_only_the_owner_continues",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fast tier (`make test-fast`: ``-m "not slow"``, under a minute) is every test that
    runs no real agent CLI, no PostgreSQL and none of the drills named above. CI runs both
    tiers (`make test`). A test that takes seconds belongs in SLOW_TESTS. The LONG_FIRST drills
    come first."""
    rank = {name: n for n, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(f"{item.path.name}::{item.name}", len(rank)))
    for item in items:
        module = item.path.stem
        test = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        if (
            REAL_AGENT_FIXTURES & set(getattr(item, "fixturenames", ()))
            or module in SLOW_MODULES
            or test in SLOW_TESTS
            or "postgres" in item.name
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _reap_workers() -> Iterator[None]:
    """No scale-out worker a test started outlives it (a timed-out test's included)."""
    yield
    workers.reap()


@pytest.fixture(autouse=True)
def _tasks_shown_before_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test about to reach its time-out prints what its event loop's tasks await
    (tests/support/stalls.py)."""
    marker = request.node.get_closest_marker("timeout")
    limit = marker.args[0] if marker and marker.args else request.config.getini("timeout")
    with stalls.shown_before(float(limit or 0)):
        yield


@pytest.fixture(scope="session")
def claude_bin() -> str:
    path = os.environ.get("DETACH_TEST_CLAUDE_BIN") or str(ROOT / "agents/node_modules/.bin/claude")
    if not Path(path).exists():
        pytest.fail(f"pinned claude CLI missing at {path}: run `make test` (it installs it)")
    return path


@pytest.fixture
def anthropic() -> Iterator[AnthropicMock]:
    mock = AnthropicMock().start()
    yield mock
    mock.stop()


@pytest.fixture
def agent_env(tmp_path: Path, anthropic: AnthropicMock) -> dict[str, str]:
    """An environment for agent CLIs that reaches nothing but the mock on 127.0.0.1."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    env.update(anthropic.env())
    return env


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


CODEX_NATIVE = (
    "agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
)


@pytest.fixture(scope="session")
def codex_bin() -> str:
    """The native codex binary (the npm launcher orphans it on SIGKILL under Node 20)."""
    path = os.environ.get("DETACH_TEST_CODEX_BIN") or str(ROOT / CODEX_NATIVE)
    if not Path(path).exists():
        pytest.fail(f"pinned codex CLI missing at {path}: run `make test` (it installs it)")
    return path


@pytest.fixture
def openai() -> Iterator[OpenAIMock]:
    mock = OpenAIMock().start()
    yield mock
    mock.stop()


@pytest.fixture
def codex_env(tmp_path: Path, openai: OpenAIMock) -> dict[str, str]:
    """HOME, CODEX_HOME (its config.toml points at the mock) and a TMPDIR that is not a parent
    of CODEX_HOME; nothing but 127.0.0.1 is reachable by configuration."""
    home = tmp_path / "chome"
    (tmp_path / "ctmp").mkdir()
    openai.write_codex_home(home / ".codex")
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "TMPDIR": str(tmp_path / "ctmp"),
        "LANG": "C.UTF-8",
        "MOCK_API_KEY": "sk-test",
        "NO_PROXY": "127.0.0.1",
    }
