# The everyday commands (CONTRIBUTING.md explains them). `make lint` is what .ci/run and the
# pre-commit hooks run; `make test-quick` is the everyday test loop (CONTRIBUTING.md gives its time).
#
# Python tools come from the environment: PYTHON=.venv/bin/python make lint (or an activated
# venv with the `dev` or `test` extra installed).

PYTHON ?= python3
PY_SOURCES := python tests benches examples
QUICK := not slow and not spark and not broker and not faults
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

.PHONY: lint fmt build test test-quick

lint:
	cargo fmt --check
	cargo clippy --all-targets --all-features -- -D warnings
	$(PYTHON) -m ruff check $(PY_SOURCES)
	$(PYTHON) -m ruff format --check $(PY_SOURCES)
	$(PYTHON) -m mypy

fmt:
	cargo fmt
	$(PYTHON) -m ruff check --fix $(PY_SOURCES)
	$(PYTHON) -m ruff format $(PY_SOURCES)

# The native module, built in place for the tests of this checkout (PYTHONPATH=python). Built the
# way `pip install .` builds it (maturin's PEP 517 backend: the same cargo command, environment and
# target/), so after the quick start's `pip install .` nothing compiles again and the tests load the
# same binary as the wheel; a plain `cargo build --release` differs in crate type, LTO and PyO3's
# configuration and recompiled tokio, arrow, kafka-protocol, pyo3 and the engine (3:08 in issue 23).
WHEELS := $(TARGET_DIR)/wheels
build:
	rm -f $(WHEELS)/kafkalite-*.whl
	$(PYTHON) -m pip wheel --no-deps --wheel-dir $(WHEELS) .
	$(PYTHON) -c "import glob, os, zipfile; [wheel] = glob.glob('$(WHEELS)/kafkalite-*.whl'); \
	    open('python/kafkalite/_native.abi3.so.new', 'wb').write(zipfile.ZipFile(wheel).read('kafkalite/_native.abi3.so')); \
	    os.replace('python/kafkalite/_native.abi3.so.new', 'python/kafkalite/_native.abi3.so')"

# `-n 2`: 2 pytest-xdist workers, as the README's test command and .ci/run (CONTRIBUTING.md "xdist").
test: build
	cargo test --locked
	PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q -p no:cacheprovider -n 2

test-quick: build
	PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q -p no:cacheprovider -m "$(QUICK)"
