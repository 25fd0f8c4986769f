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
# Runs a pass ("$(TIMED) NAME command...") and says how long it took, passed or failed: where
# the suite's time goes, pass by pass (each ends with its 15 slowest tests).
TIMED = sh -c 'start=$$(date +%s); "$$@"; rc=$$?; echo "== $$0: $$(( $$(date +%s) - start )) s (exit $$rc) =="; exit $$rc'
# The test files that set a marker ($(call MARKED,every_backend|next_keras)): a marked pass
# collects only those, since a marker is only ever set in its own test file's text, as
# `mark.NAME` (the word alone also matched a keyword argument or a test's name, and three files
# were collected for no test). Each worker collecting the whole suite took 14 s of CPU; the
# marked files alone, 10 s.
MARKED = $$(grep -rlE 'mark\.($(1))\b' tests --include='test_*.py')
# The project's own modules compiled once, before the passes: with PYTHONDONTWRITEBYTECODE set
# (as on these machines), no process writes its .pyc, so each of the ~500 processes the suite
# starts compiled every toolkit module it imported again: 0.35 s of its start-up, 0.09 s from
# the .pyc (`-X importtime`, a recipe's imports). Only changed files are compiled again.
COMPILE = -m compileall -q toolkit recipes tests benchmarks

.PHONY: demo test test-next lint format bench accelerator accelerator-wheels install clean

demo: $(STAMP)
	$(PY) -m recipes.mlp

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) $(COMPILE)
	$(TIMED) "the suite (TensorFlow)" $(PYTEST)
	@echo "== profiling tests again under tf_keras (TF_USE_LEGACY_KERAS=1) =="
	TF_USE_LEGACY_KERAS=1 $(TIMED) "tf_keras" $(PYTEST) -m legacy_keras $(call MARKED,legacy_keras)
	@echo "== the profiling contracts again under Keras 3 on JAX, then on PyTorch =="
	KERAS_BACKEND=jax $(TIMED) "JAX" $(PYTEST) -m every_backend $(call MARKED,every_backend)
	KERAS_BACKEND=torch $(TIMED) "PyTorch" $(PYTEST) -m every_backend $(call MARKED,every_backend)

# Keras's next release, today: the same project in a second environment (.venv-next) whose Keras
# is a pinned keras-nightly (pinned, so CI is reproducible; moving the pin is a commit). It runs
# what the nightly changes (marked next_keras: the distribution tests that reach Keras, which
# there include PyTorch's data_parallel over two processes, and JAX's fused steps as one scan;
# not the failures the toolkit says before Keras is reached: tests/test_data_parallel.py) on
# JAX, and the profiling contracts (every_backend, but for the recipes' smoke runs) once, on
# PyTorch, whose trainer the toolkit reaches into most; `make test` runs those contracts, and
# every recipe, on the stable Keras on all three backends. (The contracts also ran on the
# nightly's JAX: 4 minutes more of CI's 35 for a third JAX run of the same checks; the six
# recipes on the nightly's PyTorch, about 50 s more for what the contracts check of its
# trainer already.)
# .venv-next is an overlay on .venv, not a second install of every framework (4.1 GB and
# about 2 minutes of CI's 35, measured): a .pth file adds .venv's site-packages after its own,
# so it holds only the nightly (the project comes editable with .venv's packages), whose
# `keras` package shadows the release's; a dependency the nightly needs newer lands in
# .venv-next too. Both Keras
# distributions are then installed, as after `pip install keras-nightly` over a release, and
# the toolkit reads the nightly as the one in use (`compat.keras_release`). It is made again
# whenever .venv is.
KERAS_NEXT ?= keras-nightly==3.16.0.dev2026102704
NEXT_VENV ?= .venv-next
NEXT_PY := $(NEXT_VENV)/bin/python
NEXT_STAMP := $(NEXT_VENV)/.toolkit-installed
PURELIB := -c 'import sysconfig; print(sysconfig.get_path("purelib"))'
NEXT_PYTEST := $(NEXT_PY) -m pytest $(PYTEST_FLAGS) -n $(TEST_WORKERS) --dist worksteal

test-next: $(NEXT_STAMP)
	$(NEXT_PY) $(COMPILE)
	@echo "== against $(KERAS_NEXT): what its JAX changes (distribution, fused steps) =="
	KERAS_BACKEND=jax $(TIMED) "next, JAX" $(NEXT_PYTEST) -m next_keras $(call MARKED,next_keras)
	@echo "== against $(KERAS_NEXT): the profiling contracts on PyTorch =="
	KERAS_BACKEND=torch $(TIMED) "next, PyTorch" $(NEXT_PYTEST) -m every_backend $$(grep -rlE 'mark\.every_backend\b' tests --include='test_*.py' | grep -v '^tests/recipes/')

$(NEXT_PY):
	$(PYTHON) -m venv $(NEXT_VENV)

$(NEXT_STAMP): $(STAMP) setup.py pyproject.toml Makefile | $(NEXT_PY)
	$(NEXT_PY) -m pip install --quiet --upgrade pip
	echo "import site; site.addsitedir('$$($(PY) $(PURELIB))')" > "$$($(NEXT_PY) $(PURELIB))/toolkit-base-venv.pth"
	$(NEXT_PY) -m pip install --quiet --no-deps --force-reinstall '$(KERAS_NEXT)'
	$(NEXT_PY) -m pip install --quiet '$(KERAS_NEXT)'
	$(NEXT_PY) -c "import keras; print('.venv-next: Keras', keras.__version__, 'over', '$(VENV)')"
	touch $@

# The GPU benchmark (benchmarks/accelerator.py): every installed Keras backend, no TensorFlow needed.
accelerator: $(STAMP)
	$(PY) benchmarks/accelerator.py

# Keras and the pure-Python packages it needs, as wheels in .whl/, for a machine with JAX or
# PyTorch but no network and no Keras (BUILD.md "GPU machines"). Python 3.12, manylinux x86-64.
# KERAS_WHEEL=$(KERAS_NEXT) brings the pinned nightly instead of this Keras.
WHEEL_PYTHON ?= 3.12
KERAS_WHEEL ?= keras==$$($(PY) -c "import importlib.metadata as m; print(m.version('keras'))")
accelerator-wheels: $(STAMP)
	rm -rf .whl && mkdir -p .whl
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(WHEEL_PYTHON) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl \
	  $(KERAS_WHEEL) namex optree filelock
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
	$(PY) benchmarks/startup.py

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The packages' bytecode compiled on every core at once, not by pip one file after the other:
# 78 s for the whole install became 35 s for pip and 25 s for compileall (a clean clone on 2
# cores, pip's cache warm; the same 16,420 .pyc files). Without the .pyc files every process
# would compile what it imports, PYTHONDONTWRITEBYTECODE being set here. A few files do not
# compile on this Python (PyTorch's tests of 3.12 syntax), as under pip, which skips them too.
$(STAMP): setup.py pyproject.toml Makefile | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[test,report,profile]'
	$(PY) -m compileall -qq -j 0 "$$($(PY) $(PURELIB))" || true
	touch $@

clean:
	rm -rf $(VENV) $(NEXT_VENV) build *.egg-info .pytest_cache .ruff_cache
