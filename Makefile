# The two commands of the README: `make demo` and `make test`. Both set everything up first.
VENV := .venv
PYTEST_ARGS ?=

.PHONY: setup demo test lint format bench compile clean

setup:
	@scripts/setup.sh

demo: setup
	$(VENV)/bin/paravt demo --out-dir demo-out

test: setup lint
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

compile: setup
	$(VENV)/bin/paravt pipeline compile build/train.yaml

bench: setup
	$(VENV)/bin/python benchmarks/materialize.py

clean:
	rm -rf demo-out build .pytest_cache
