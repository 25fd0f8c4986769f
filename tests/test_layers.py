"""The house rules, checked on the source: imports point one way (no cycle, no layer imports
one above it), every public module says what it exports, no private name crosses a module, and
the report side and StepTimer run where TensorFlow cannot be imported."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

import toolkit

ROOT = pathlib.Path(toolkit.__file__).parent
# The card's two top-level packages: the toolkit, and the recipes a user runs with python -m.
PACKAGES = (ROOT, ROOT.parent / "recipes")

# Lower layers never import higher ones (reference.md, Layout). Modules of one layer may import each
# other as long as there is no cycle.
LAYERS = (
    ("core", ("toolkit.core",)),
    (
        "backends",
        (
            "toolkit.backend",
            "toolkit.devices",
            "toolkit.data",
            "toolkit.distribute",
            "toolkit.bench",
        ),
    ),
    ("measure", ("toolkit.profiling",)),
    ("report", ("toolkit.report",)),
    ("runner", ("toolkit.runner",)),
    ("search", ("toolkit.search",)),
    (
        "app",
        (
            "toolkit.app",
            "toolkit.cli",
            "toolkit.verbs",
            "toolkit._child",
            "toolkit.__main__",
            "toolkit",
        ),
    ),
    ("recipes", ("recipes",)),  # what a user runs: loaded by name, never imported below
)


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            parts = list(path.relative_to(package.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()
# The recipes are programs (``python -m recipes.mlp``), not API: each offers
# ``build_task`` and ``main`` to the app, and none is part of the reviewed surface.
PROGRAMS = ("recipes",)
NAMESPACES = ("toolkit.profiling", "toolkit.core", "toolkit.runner")


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    module: str, type_checking: bool = False, path: pathlib.Path | None = None
) -> list[tuple[str, list[str], int]]:
    """``(imported toolkit module, names imported from it, line)`` for every import of
    `module` (read from `path`, default its file), those inside functions included;
    ``if TYPE_CHECKING`` blocks only when `type_checking` (a cycle through them is still a
    cycle: the two modules need each other)."""
    path = path or MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, [], child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [a.name for a in child.names]
                # `from toolkit import train` imports the submodule; the package itself only
                # where a name comes from it (its lazy export table loads nothing else).
                subs = [n for n in names if f"{base}.{n}" in MODULES]
                if len(subs) < len(names) or base != "toolkit":
                    found.append((base, [n for n in names if n not in subs], child.lineno))
                found.extend((f"{base}.{name}", [], child.lineno) for name in subs)
            visit(child)

    visit(tree)
    return [(m, n, line) for m, n, line in found if m.split(".")[0] in ("toolkit", "recipes")]


def _owner(name: str) -> str:
    """The toolkit module `name` resolves to (the longest known prefix)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


GRAPH = {
    module: sorted({_owner(m) for m, _, _ in _imports(module)} - {module}) for module in MODULES
}
# With the type checker's imports: what each module needs to be read, not only to run.
TYPED_GRAPH = {
    module: sorted({_owner(m) for m, _, _ in _imports(module, type_checking=True)} - {module})
    for module in MODULES
}


def _layer(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"{module} is in no layer: add it to LAYERS (and reference.md)"
    return rank


def test_the_import_graph_has_no_cycle():
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in TYPED_GRAPH[module]:
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                walk(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            walk(module)


def test_imports_point_down_the_layers():
    upward = []
    for module, deps in TYPED_GRAPH.items():
        if module == "toolkit":  # the package's lazy export table names every layer
            continue
        for dep in deps:
            if dep != "toolkit" and _layer(dep) > _layer(module):
                upward.append(
                    f"{module} ({LAYERS[_layer(module)][0]}) imports {dep} "
                    f"({LAYERS[_layer(dep)][0]})"
                )
    assert not upward, "\n".join(upward)


def test_a_fourth_backend_module_keeps_the_house_rules():
    """The fake fourth backend of the seam test (``tests/fake_backend.py``), read as if it were
    ``toolkit.backend._fake``: it imports nothing above its layer, no private name, and nothing
    that imports a backend module back (no cycle)."""
    fake = pathlib.Path(__file__).parent / "fake_backend.py"
    module = "toolkit.backend._fake"
    imports = _imports(module, type_checking=True, path=fake)
    assert imports, "the fake backend imports the seam's helpers"
    for source, names, line in imports:
        owner = _owner(source)
        assert _layer(owner) <= _layer(module), f"fake_backend.py:{line} imports {owner}"
        assert owner == "toolkit.backend._common" or owner.startswith("toolkit.core"), (
            f"fake_backend.py:{line}: a backend module builds on core and the seam's helpers, "
            f"not {owner}"
        )
        private = [n for n in names if n.startswith("_") and f"{source}.{n}" not in MODULES]
        assert not private, f"fake_backend.py:{line} imports {private} from {source}"
        assert not any(
            dep.startswith("toolkit.backend._") and dep != owner for dep in TYPED_GRAPH[owner]
        ), f"{owner} imports a backend module"


def test_no_private_name_crosses_a_module():
    """A private module (``toolkit.verbs._target``) is the package's own implementation, shared
    inside it behind a public front; a private name (``_helper``) is its module's alone."""
    crossing = [
        f"{module}:{line} imports {name} from {source}"
        for module in MODULES
        for source, names, line in _imports(module)
        for name in names
        if name.startswith("_") and not name.startswith("__") and f"{source}.{name}" not in MODULES
    ]
    assert not crossing, "\n".join(crossing)


def test_public_modules_declare_all_and_it_names_what_is_there():
    import importlib

    """A public module says what it offers; a private one (``_name``, or inside a ``_package``)
    offers nothing, so it has no ``__all__`` to keep."""
    missing = []
    for module in sorted(MODULES):
        private = any(part.startswith("_") for part in module.split(".")[1:])
        if private and module != "toolkit.__main__":
            mod = importlib.import_module(module)
            seam = module in {f"toolkit.backend._{name}" for name in ("tensorflow", "jax", "torch")}
            if hasattr(mod, "__all__") and not seam:  # a backend's __all__ is the seam's list
                missing.append(f"{module} is private: its __all__ offers what nobody imports")
            continue
        if module == "toolkit.__main__" or module.startswith(PROGRAMS):
            continue
        mod = importlib.import_module(module)
        names = getattr(mod, "__all__", None)
        if names is None:
            if MODULES[module].name == "__init__.py" and module == "toolkit.profiling":
                continue  # a namespace of submodules, nothing of its own
            missing.append(f"{module} has no __all__")
            continue
        missing += [f"{module}.__all__ names {n!r}, which is not there" for n in names
                    if not hasattr(mod, n)]  # fmt: skip
    assert not missing, "\n".join(missing)


def test_the_lazy_exports_are_the_public_api():
    assert toolkit.__all__ == sorted([*toolkit._EXPORTS, "__version__"])
    for name, module in toolkit._EXPORTS.items():
        assert module in MODULES, f"toolkit.{name} points at a missing module {module}"
        # The export points at the module that defines the name, the one place it lives.
        obj = getattr(toolkit, name)
        defined = getattr(obj, "__module__", module)
        assert defined == module, f"toolkit.{name} is defined in {defined}, not {module}"


BLOCK_TF = """
import importlib.abc, sys
class NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("tensorflow", "tf_keras", "tensorflow_datasets"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, NoTensorFlow())
"""

NO_TF = (
    BLOCK_TF
    + r"""
import json, os, tempfile
try:
    import tensorflow
except ImportError:
    pass
else:
    raise SystemExit("tensorflow imported")

from toolkit import StepTimer, TraceWindow, compare, profile
from toolkit.cli import main as cli
from toolkit.report import RunContext, RunReport, merge_reports, render_merged

assert issubclass(TraceWindow, sys.modules["keras"].callbacks.Callback)

timer = StepTimer(batch_size=8, warmup_steps=1)
timer.set_params({"steps": 12, "epochs": 1})
timer.on_train_begin()
timer.on_epoch_begin(0)
for i in range(12):  # as Keras calls the hooks
    timer.on_train_batch_begin(i)
    timer.on_train_batch_end(i, {"loss": 1.0})
timer.on_epoch_end(0, {"loss": 0.5})
timer.on_train_end()
report = RunReport.from_callbacks("no-tf", timer, context=RunContext(backend="jax"))
out = tempfile.mkdtemp()
paths = report.write(out, plot=False)
loaded = RunReport.load(out)
assert loaded == report and loaded.steps.timed_steps == 10, loaded.steps
print(compare(loaded, report).verdict)
from toolkit.distribute import Cluster

hosts = ("a:1", "b:1")
workers = [
    RunReport.from_callbacks(
        "no-tf", timer, context=RunContext(backend="jax", cluster=Cluster("worker", i, hosts))
    )
    for i in range(2)
]
print(render_merged(merge_reports(workers)).splitlines()[-1])
try:
    merge_reports([loaded, report])
except ValueError as e:
    print("refused:", e)
assert cli(["show", out]) == 0 and cli(["compare", out, out]) == 0
with profile("no-tf-profile", report_dir=out, batch_size=8, warmup_steps=0) as prof:
    t = prof.timer
    t.set_params({"steps": 3, "epochs": 1})
    t.on_train_begin()
    t.on_epoch_begin(0)
    for i in range(3):
        t.on_train_batch_begin(i)
        t.on_train_batch_end(i)
    t.on_train_end()
assert prof.report.steps.timed_steps == 2 and os.path.exists(prof.paths["json"])
assert "tensorflow" not in sys.modules
print("keras backend:", sys.modules["keras"].config.backend())
print("OK")
"""
)


def test_the_report_side_and_step_timer_run_where_tensorflow_cannot_be_imported():
    out = subprocess.run(
        [sys.executable, "-c", NO_TF],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "OK" and "keras backend: jax" in lines
    # a run against itself claims no change: its hooks-only steps may be too noisy to tell
    assert lines[0] in ("within noise", "too noisy") and "cluster: 2 workers" in out.stdout
    assert "refused: merge: no-tf, no-tf ran on one machine" in out.stdout


def test_reading_reports_needs_no_framework_at_all():
    code = BLOCK_TF + (
        "import sys\n"
        "import toolkit, toolkit.report, toolkit.core.files, toolkit.core.machine\n"
        "import toolkit.cli\n"
        "from toolkit.report import compare, merge_reports\n"
        "loaded = [m for m in ('tensorflow', 'keras', 'jax', 'torch') if m in sys.modules]\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["toolkit.report", "toolkit.core.stats"])
def test_report_side_modules_import_no_framework_at_import_time(module):
    for dep in GRAPH[module]:
        assert _layer(dep) <= _layer(module)


def test_no_package_attribute_hides_one_of_its_submodules():
    """``from toolkit.devices import select`` must not mean two things: a package never
    exports a name that is also one of its submodules."""
    import importlib

    hidden = []
    for module in MODULES:
        package, _, leaf = module.rpartition(".")
        if not package or MODULES[module].name == "__init__.py":
            continue
        value = getattr(importlib.import_module(package), leaf, None)
        if value is not None and value is not importlib.import_module(module):
            hidden.append(f"{package}.{leaf} is {value!r}, not the submodule {module}")
    assert not hidden, "\n".join(hidden)


def test_the_public_surface_is_small_and_reviewed():
    """``__all__`` is the reviewed public surface: what users call. Helpers shared inside the
    package stay out of it (or in private modules), so the surface does not grow with them.
    A name re-exported by a package front counts once."""
    import importlib

    things, constants = set(), {}
    for module in MODULES:
        if any(part.startswith("_") for part in module.split(".")[1:]):
            continue
        if module.startswith(PROGRAMS):
            continue
        mod = importlib.import_module(module)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            defined = getattr(obj, "__module__", None) if callable(obj) else None
            if defined is None:  # a constant: the same object under the same name, once
                things.add(constants.setdefault((name, id(obj)), (module, name)))
                continue
            things.add((defined, getattr(obj, "__qualname__", name)))
    # 200, and the step's anatomy (issue 65): its function, its record and its reading
    # (toolkit.report.anatomy_lines: how toolkit.anatomy's result is printed)
    # ... and the records two public functions return (issue 66): flops.matmul_peak's Peak and
    # flops.compute_facts's Compute
    # ... and the largest batch that fits (issue 67): toolkit.fits and the BatchFit it returns
    # ... and diagnose's fourth verdict (issue 68): UNCERTAIN, beside INPUT_BOUND and the rest
    # ... and a layer timed alone (issue 73): layers_alone.time_alone, the anatomy's check
    # ... then 194 (issue 76): helpers the rooms share (has_tensorflow, MIN_GAIN, whole_calls,
    # utilization, ...) left reachable from their modules, not in __all__
    assert len(things) <= 194, f"{len(things)} public names: keep helpers out of __all__"


def test_importing_the_recipes_changes_nothing():
    """A recipe's start-up (the backend before Keras loads, --backend=auto, the log level, the
    compile cache) is toolkit.app.start, run by the program that starts: importing a recipe, as
    a notebook or the search does, leaves sys.argv, the environment and the modules alone."""
    code = (
        "import os, sys\n"
        "sys.argv = ['kernel.py', '--backend=auto', '--compile_cache', '-f', 'x.json']\n"
        "before = (list(sys.argv), dict(os.environ))\n"
        "import recipes, recipes.mlp, recipes.cnn\n"
        "assert (list(sys.argv), dict(os.environ)) == before, (sys.argv, set(os.environ) ^ "
        "set(before[1]))\n"
        "loaded = [m for m in ('tensorflow', 'keras', 'jax', 'torch') if m in sys.modules]\n"
        "print(loaded)\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL")
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]" and out.stderr == ""


def test_a_recipe_s_info_flags_start_nothing(tmp_path):
    """--helpfull and --version print and end: no backend chosen, no cache read."""
    for flag in ("--helpfull", "--version"):
        out = subprocess.run(
            [sys.executable, "-m", "recipes.mlp", flag, "--backend=auto"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path)},
        )  # fmt: skip
        assert out.returncode in (0, 1) and out.stdout, out.stderr[-2000:]  # absl's --helpfull: 1
        assert "--backend=auto" not in out.stderr and "Traceback" not in out.stderr
