# The two set-up commands of the README: `make main` and `make test`.
# Both create .venv on first use and install the package as the README says.
VENV ?= .venv
BIN := $(VENV)/bin
# Where `make test` runs the device-aware tests: cpu, or cuda on a machine with a GPU.
DEVICE ?= cpu
# Test processes (pytest-xdist): auto is one per core; each runs torch on its share of the cores. The tests
# marked serial (process groups stopped by signals, timing-sensitive under a loaded CPU) run alone after.
TEST_WORKERS ?= auto
# An extra wheel index for torch, e.g. PyTorch's CPU index for the CPU-only build; empty: pip's default.
TORCH_INDEX ?=

$(BIN)/encdec: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -c constraints.txt -e ".[all]"
	touch $@

.PHONY: main test
main: $(BIN)/encdec  # THREADS=N: torch's threads (default: the cores other processes leave free)
	$(BIN)/encdec train configs/main.yaml --out runs/main --resume $(if $(THREADS),--threads $(THREADS))
	$(BIN)/encdec evaluate runs/main --samples 4 --max-new-tokens 48 $(if $(THREADS),--threads $(THREADS))

test: $(BIN)/encdec
	$(BIN)/python -m pytest --device $(DEVICE) -n $(TEST_WORKERS) --dist loadfile -m "not serial"
	$(BIN)/python -m pytest --device $(DEVICE) -m serial
