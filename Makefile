# The README's two set-up commands: `make demo` and `make test`.
# The dev install includes the `docs`, `export`, `onnx` and `argos` extras, whose tests run in CI.
# torch is pinned so that pip takes the local CPU build and never resolves a multi-GB CUDA one.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
# LibreTranslate, the peer of benchmarks/serve_load.py (`make libretranslate`, for that
# benchmark only), has a venv of its own: it pins packaging, numpy and rich below what the dev
# install needs. It takes no torch; spaCy is its offline sentence splitter for aiayn's Argos
# packages.
LT_VENV := .venv-lt
LT_PIN := libretranslate==1.9.6

.PHONY: demo test docs install libretranslate clean

$(BIN)/aiayn: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e '.[dev,docs,export,onnx,serve,plot,argos]'
	touch $(BIN)/aiayn

install: $(BIN)/aiayn

$(LT_VENV)/bin/libretranslate:
	$(PYTHON) -m venv $(LT_VENV)
	$(LT_VENV)/bin/pip install -q --upgrade pip
	$(LT_VENV)/bin/pip install -q $(LT_PIN) spacy
	touch $@

libretranslate: $(LT_VENV)/bin/libretranslate

demo: install
	$(BIN)/aiayn demo

# The programs the tests drive beyond Python (Chromium, curl): installed where this user may,
# else named in one line and their tests skip (under CI=true they fail).
test: install
	$(BIN)/python tests/system_programs.py install
	$(BIN)/python -m pytest

# The documentation site (mkdocs.yml, docs/) into site/, strict: a broken link fails it.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(LT_VENV) runs site
