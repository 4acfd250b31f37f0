# The README's two set-up commands: `make demo` and `make test`.
# The dev install includes the `export`, `onnx` and `argos` extras, whose tests run in CI.
# torch is pinned so that pip takes the local CPU build and never resolves a multi-GB CUDA one.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0

.PHONY: demo test install clean

$(BIN)/aiayn: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e '.[dev,export,onnx,serve,plot,argos]'
	touch $(BIN)/aiayn

install: $(BIN)/aiayn

demo: install
	$(BIN)/aiayn demo

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) runs
