# The two commands of README.md. Both create .venv on first use and install the project into it
# (with the test tools and the bench extra: MPyC, so the test of the side-by-side comparison runs too).
# The install goes through uv (from PyPI, into the venv: 15 s against pip's 67 s on a fresh clone, the same
# versions), falling back to pip if uv cannot run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast demo lint typecheck bench clean

# Python's bytecode cache stays on for everything these targets start, whatever the shell says: with
# PYTHONDONTWRITEBYTECODE set (this machine kind sets it) every daemon and every `confar` process the tests
# start compiled the project's modules again (0.2 s of CPU each, some hundreds of processes a run).
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml setup.py hss/_field.c
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "confar needs Python >= 3.11, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[test,bench]' \
		|| $(BIN)/pip install --quiet -e '.[test,bench]'
	@touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# every test, two workers (pytest-xdist); the tests that start daemons in other processes (tests/network/)
# run on one of them, one at a time (their conftest's xdist_group), the rest share both; tests/README.md.
# mypy (the typecheck target) runs beside the tests, its report printed after them: both must pass.
test: lint
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & typing=$$!; \
	$(BIN)/pytest -q -n 2 --dist loadgroup; tests=$$?; \
	wait $$typing; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	if [ $$typed -ne 0 ]; then echo "make test: mypy failed (its report above)" >&2; fi; \
	if [ $$tests -ne 0 ] || [ $$typed -ne 0 ]; then exit 1; fi

# while working: no test marked slow (no multi-process consortium, no long statistics), same two workers
test-fast: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadgroup -m "not slow"

# the main job: 7 registry daemons (mTLS on loopback), confidential logistic regression; outputs in out/demo
demo: $(STAMP)
	$(BIN)/confar run examples/demo.toml --simulate --out out/demo --overwrite

bench: $(STAMP)
	$(BIN)/confar bench hss --json docs/bench-hss.json

clean:
	rm -rf $(VENV) build *.egg-info hss/_field*.so
