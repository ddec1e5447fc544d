# openbus: two commands. `make run` installs the runtime and starts the daemon in local mode;
# `make test` installs everything the tests need and runs the gates and the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HARNESS_DIR := .harness
# The harness CLIs the tests drive, each pinned version in its own npm prefix
# (.harness/<name>-<version>/node_modules/.bin/<name>). The first pin of a harness is the one
# in use; a second is the newest the registry served when it was added (`make harness-bump`).
# tests/support/harnesses.py reads this list.
HARNESS_PINS := claude-2.1.197 claude-2.1.332 codex-0.171.0 \
  opencode-1.18.28 opencode-1.18.33 gemini-0.59.0 gemini-0.61.0 omp-18.2.0 omp-18.2.3
HARNESS_PACKAGE_claude := @anthropic-ai/claude-code
HARNESS_PACKAGE_codex := @openai/codex
HARNESS_PACKAGE_opencode := opencode-ai
HARNESS_PACKAGE_gemini := @google/gemini-cli
HARNESS_PACKAGE_omp := @oh-my-pi/pi-coding-agent
# What a harness needs beside its package in the same prefix: omp's CLI is a Bun script.
HARNESS_EXTRA_omp := bun@1.4.5
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# OPENBUS_REQUIRE (a comma list: harness, root, tmux, chromium; CI sets it) makes the tests'
# skips for those parts failures; a part it names that cannot be installed fails the install.
comma := ,
required = $(filter $(1),$(subst $(comma), ,$(OPENBUS_REQUIRE)))
# $(call or_skip,PART,WHAT): after a failed install of PART, fail if it is required, else go on
or_skip = { echo "$(2); $(if $(call required,$(1)),OPENBUS_REQUIRE names $(1): failing,the tests that need it will skip and say why)"; $(if $(call required,$(1)),exit 1,true); }

.PHONY: run openbus test lint types layers unit wheel-check harnesses harness-bump system-deps bench clean

# The runtime alone (what `make run` needs), and the runtime with the test extras.
$(VENV)/.runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PY) -m pip install -q -e '.[test]'
	touch $@

run: $(VENV)/.runtime
	$(VENV)/bin/openbus serve

# `make openbus ARGS="directory --json"`: the CLI without putting .venv/bin on PATH
openbus: $(VENV)/.runtime
	@$(VENV)/bin/openbus $(ARGS)

system-deps:
	@command -v tmux >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q tmux; }
	@command -v sudo >/dev/null 2>&1 && command -v visudo >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q sudo; }
	@command -v npm >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q nodejs npm; }
	@command -v systemd-analyze >/dev/null 2>&1 && command -v systemd-sysusers >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q systemd; }
	@/usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null || { apt-get update -q && apt-get install -y -q python3-venv; }
	@command -v chromium >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q chromium; } || $(call or_skip,chromium,chromium could not be installed)

# The real harness CLIs at every pinned version, for the tests that drive them against a stub
# model. $* is a pin, <name>-<version>; the name picks the npm package. The registry fails a
# fetch now and then, so an install is tried three times before it counts as failed.
harness_name = $(firstword $(subst -, ,$(1)))
harnesses: $(foreach pin,$(HARNESS_PINS),$(HARNESS_DIR)/$(pin)/.installed)
$(HARNESS_DIR)/%/.installed:
	@pin='$*'; name=$${pin%%-*}; version=$${pin#*-}; \
	  mkdir -p $(HARNESS_DIR)/$* && cd $(HARNESS_DIR)/$* && \
	  { [ -f package.json ] || echo '{"private":true}' > package.json; } && \
	  attempt=1 && \
	  while ! npm install --no-audit --no-fund --loglevel=error \
	      $(HARNESS_PACKAGE_$(call harness_name,$*))@$$version $(HARNESS_EXTRA_$(call harness_name,$*)); do \
	    [ $$attempt -lt 3 ] || { attempt=failed; break; }; \
	    echo "npm could not install $* (attempt $$attempt of 3); trying again in $$((attempt * 10)) s"; \
	    sleep $$((attempt * 10)); attempt=$$((attempt + 1)); \
	  done && [ $$attempt != failed ] && \
	  PATH="$$PWD/node_modules/.bin:$$PATH" node_modules/.bin/$$name --version >/dev/null && \
	  touch .installed && echo "installed $*" \
	  || $(call or_skip,harness,npm could not install $* (retried next run))

# A new version of a harness: `make harness-bump PIN=claude-2.1.340` installs it, captures its
# screens of every state into tests/daemon/screens/captured/PIN/ and prints, case by case, how
# the parsers read them against the expected state and what changed from the pin in use. Add
# PIN to HARNESS_PINS once the parsers read it right (tests/daemon/screens/README.md).
harness-bump: $(VENV)/.installed
	@[ -n "$(PIN)" ] || { echo "usage: make harness-bump PIN=<name>-<version>"; exit 2; }
	$(MAKE) $(HARNESS_DIR)/$(PIN)/.installed
	$(PY) -m tests.harness.capture_screens $(PIN)
	$(PY) -m tests.harness.bump_report $(PIN)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check daemon tunnel policy kernel tests bench
	$(VENV)/bin/ruff format --check daemon tunnel policy kernel tests bench

# The layers and forbidden imports (pyproject.toml's [tool.importlinter] contracts).
layers: $(VENV)/.installed
	$(VENV)/bin/lint-imports --no-cache

types: $(VENV)/.installed
	$(VENV)/bin/mypy

unit: $(VENV)/.installed
	$(VENV)/bin/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The wheel must import under the openbus namespace in a fresh venv, shadowing nothing.
wheel-check: $(VENV)/.installed
	rm -rf build/wheel-check && mkdir -p build/wheel-check
	$(PY) -m pip wheel -q --no-deps . -w build/wheel-check
	$(PYTHON) -m venv build/wheel-check/venv
	build/wheel-check/venv/bin/pip install -q build/wheel-check/openbus-*.whl
	cd build/wheel-check && venv/bin/python -c "import openbus.daemon.app, openbus.policy, openbus.tunnel, openbus.kernel.errors; import importlib.util as u; assert u.find_spec('daemon') is None and u.find_spec('kernel') is None, 'wheel installs a top-level package'; print('wheel imports as openbus.*')"
	cd build/wheel-check && venv/bin/openbus --help >/dev/null && venv/bin/openbus-policy --help >/dev/null

test: system-deps harnesses $(VENV)/.installed lint types layers wheel-check unit

# nginx only as the tunnel benchmark's peer (a bare TLS proxy); it is never started as a service;
# valgrind counts the history reindex's instructions against its floor's
bench: system-deps harnesses $(VENV)/.installed
	@[ -x /usr/sbin/nginx ] || { apt-get update -q && apt-get install -y -q --no-install-recommends nginx-light; } || echo "nginx could not be installed; the tunnel bench runs without its peer"
	@command -v valgrind >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q --no-install-recommends valgrind; } || echo "valgrind could not be installed; the history bench counts no instructions"
	$(PY) -m bench

clean:
	rm -rf $(VENV) build $(HARNESS_DIR) .mypy_cache .ruff_cache
