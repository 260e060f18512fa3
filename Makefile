# Detach — the two commands the README promises: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
AGENTS := agents/node_modules/.bin
CODEX_NATIVE := agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
CATALOGS := $(patsubst %.po,%.mo,$(wildcard locales/*/LC_MESSAGES/detach.po))

.PHONY: run test venv dev agents locales lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml $(VENV)/.installed
	$(PIP) install --quiet -e '.[dev]'
	touch $@

agents/node_modules/.installed: agents/package.json
	cd agents && npm install --no-audit --no-fund --loglevel=error
	test -x $(AGENTS)/claude && test -x $(CODEX_NATIVE)
	touch $@

# The gettext catalogs aiogram's I18n reads, compiled from the .po sources.
locales/%/LC_MESSAGES/detach.mo: locales/%/LC_MESSAGES/detach.po $(VENV)/.installed
	$(VENV)/bin/pybabel compile --statistics -i $< -o $@ -l $*

venv: $(VENV)/.installed locales
locales: $(CATALOGS)
dev: $(VENV)/.dev-installed
agents: agents/node_modules/.installed

run: venv
	$(PY) -m bot run

test: dev agents locales
	$(VENV)/bin/ruff check bot handlers executors tests
	$(VENV)/bin/ruff format --check bot handlers executors tests bench
	$(VENV)/bin/mypy bot handlers executors
	DETACH_TEST_CLAUDE_BIN=$(CURDIR)/$(AGENTS)/claude DETACH_TEST_CODEX_BIN=$(CURDIR)/$(CODEX_NATIVE) \
		$(PY) -m pytest -q

bench: dev agents locales
	DETACH_TEST_CLAUDE_BIN=$(CURDIR)/$(AGENTS)/claude $(PY) bench/turn_overhead.py

lint: dev
	$(VENV)/bin/ruff check bot handlers executors tests
	$(VENV)/bin/ruff format --check bot handlers executors tests bench
	$(VENV)/bin/mypy bot handlers executors

clean:
	rm -rf $(VENV) agents/node_modules $(CATALOGS)
