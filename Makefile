# Two commands for a new user: `make demo` and `make test`. Both create .venv when it is missing,
# install the project into it (editable) once, and skip that on later runs: the install is redone
# only when setup.py, pyproject.toml or this file change. The [profile] extra (TensorBoard, XProf)
# reads traces back into the report.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.toolkit-installed
PYTEST_FLAGS ?= -q
# Two pytest workers (pytest-xdist), each handed the next test as it is free: most tests wait on
# the processes they start (recipes, clusters, terminals), so two workers take about half the
# time on 2 cores (measured: a 34 min pass in 19). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest $(PYTEST_FLAGS) -n $(TEST_WORKERS) --dist worksteal

.PHONY: demo test lint format bench accelerator accelerator-wheels install clean

demo: $(STAMP)
	$(PY) -m recipes.mlp

test: $(STAMP)
	$(PY) -m ruff check .
	$(PYTEST)
	@echo "== profiling tests again under tf_keras (TF_USE_LEGACY_KERAS=1) =="
	TF_USE_LEGACY_KERAS=1 $(PYTEST) -m legacy_keras
	@echo "== the profiling contracts again under Keras 3 on JAX, then on PyTorch =="
	KERAS_BACKEND=jax $(PYTEST) -m every_backend
	KERAS_BACKEND=torch $(PYTEST) -m every_backend

# The GPU benchmark (benchmarks/accelerator.py): every installed Keras backend, no TensorFlow needed.
accelerator: $(STAMP)
	$(PY) benchmarks/accelerator.py

# Keras and the pure-Python packages it needs, as wheels in .whl/, for a machine with JAX or
# PyTorch but no network and no Keras (BUILD.md "GPU machines"). Python 3.12, manylinux x86-64.
WHEEL_PYTHON ?= 3.12
accelerator-wheels: $(STAMP)
	rm -rf .whl && mkdir -p .whl
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(WHEEL_PYTHON) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl \
	  keras==$$($(PY) -c "import importlib.metadata as m; print(m.version('keras'))") namex optree filelock
	@ls .whl

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: $(STAMP)
	$(PY) benchmarks/profiler_overhead.py
	$(PY) benchmarks/foreign_profiler.py
	$(PY) benchmarks/step_timer_accuracy.py
	$(PY) benchmarks/pipeline_generator.py
	$(PY) benchmarks/pipeline_images.py
	$(PY) benchmarks/pipeline_grain.py
	$(PY) benchmarks/pipeline_tfrecord.py
	$(PY) benchmarks/seed_mlp.py
	$(PY) benchmarks/recipe_mfu.py
	$(PY) benchmarks/diagnose_accuracy.py
	$(PY) benchmarks/ledger.py
	$(PY) benchmarks/tune_vs_defaults.py
	$(PY) benchmarks/backends.py
	$(PY) benchmarks/own_models.py
	$(PY) benchmarks/scaling.py
	$(PY) benchmarks/op_modes.py
	$(PY) benchmarks/xla_fusion.py
	$(PY) benchmarks/data_service.py

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): setup.py pyproject.toml Makefile | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,report,profile]'
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
