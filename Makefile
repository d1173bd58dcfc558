# The two set-up commands of the README: `make main` and `make test`.
# Both create .venv on first use and install the package as the README says.
VENV ?= .venv
BIN := $(VENV)/bin

$(BIN)/encdec: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e ".[all]"
	touch $@

.PHONY: main test
main: $(BIN)/encdec
	$(BIN)/encdec train configs/main.yaml --out runs/main --resume
	$(BIN)/encdec evaluate runs/main --samples 4 --max-new-tokens 48

test: $(BIN)/encdec
	$(BIN)/python -m pytest
