# openbus: two commands. `make run` installs the runtime and starts the daemon in local mode;
# `make test` installs everything the tests need and runs the gates and the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HARNESS_DIR := .harness
CLAUDE_VERSION := 2.1.197
CODEX_VERSION := 0.171.0
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# OPENBUS_REQUIRE (a comma list: harness, root, tmux, chromium; CI sets it) makes the tests'
# skips for those parts failures; a part it names that cannot be installed fails the install.
comma := ,
required = $(filter $(1),$(subst $(comma), ,$(OPENBUS_REQUIRE)))
# $(call or_skip,PART,WHAT): after a failed install of PART, fail if it is required, else go on
or_skip = { echo "$(2); $(if $(call required,$(1)),OPENBUS_REQUIRE names $(1): failing,the tests that need it will skip and say why)"; $(if $(call required,$(1)),exit 1,true); }

.PHONY: run openbus test lint types layers unit wheel-check harnesses system-deps bench clean

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

# The real Claude Code and Codex CLIs, for the tests that drive them against a stub model.
harnesses: $(HARNESS_DIR)/.installed
$(HARNESS_DIR)/.installed:
	mkdir -p $(HARNESS_DIR)
	cd $(HARNESS_DIR) && { [ -f package.json ] || echo '{"private":true}' > package.json; } && \
	  npm install --no-audit --no-fund --loglevel=error \
	    @anthropic-ai/claude-code@$(CLAUDE_VERSION) @openai/codex@$(CODEX_VERSION) && \
	  node_modules/.bin/claude --version >/dev/null && node_modules/.bin/codex --version >/dev/null && \
	  touch .installed \
	  || $(call or_skip,harness,npm could not install the harness CLIs (retried next run))

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

# nginx only as the tunnel benchmark's peer (a bare TLS proxy); it is never started as a service
bench: system-deps $(VENV)/.installed
	@[ -x /usr/sbin/nginx ] || { apt-get update -q && apt-get install -y -q --no-install-recommends nginx-light; } || echo "nginx could not be installed; the tunnel bench runs without its peer"
	$(PY) -m bench

clean:
	rm -rf $(VENV) build $(HARNESS_DIR) .mypy_cache .ruff_cache
