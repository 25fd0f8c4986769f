"""The command line's verbs, one module each under ``toolkit/verbs/``: every module found there
is registered in the parser and declares the verbs' interface, and neither the command line
nor a verb branches on a verb's name (read from the source and the parser); each verb's options
are checked, in one line and status 2, before anything loads or runs."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import pathlib
import pkgutil

import pytest

from toolkit import cli, verbs

VERB_DIR = pathlib.Path(verbs.__file__).parent
# The verb modules, found, not listed: a new file under toolkit/verbs/ is held to these rules.
FOUND = sorted(m.name for m in pkgutil.iter_modules(verbs.__path__) if not m.name.startswith("_"))
SOURCES = [pathlib.Path(cli.__file__), *sorted(VERB_DIR.glob("*.py"))]
MAX_FUNCTION_LINES = 60


def _parser_verbs() -> dict[str, argparse.ArgumentParser]:
    root = cli.parser()
    action = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_verbs_are_found():
    assert {"compare", "show", "doctor", "tune", "data_service", "merge"} <= set(FOUND)


@pytest.mark.parametrize("name", FOUND)
def test_every_verb_module_declares_the_interface(name):
    module = importlib.import_module(f"toolkit.verbs.{name}")
    assert module.__all__ == [], "a verb is the command line's own, not API"
    assert isinstance(module.NAME, str) and module.NAME.replace("-", "_") == name
    assert isinstance(module.HELP, str) and module.HELP
    assert module.DESCRIPTION is None or isinstance(module.DESCRIPTION, str)
    assert isinstance(module.LOADS_TENSORFLOW, bool)
    assert isinstance(module.RECIPE_FLAGS, bool)
    for function in ("options", "check", "run"):
        assert len(inspect.signature(getattr(module, function)).parameters) == 1, function


@pytest.mark.parametrize("name", FOUND)
def test_every_verb_module_is_registered_in_the_parser(name):
    module = importlib.import_module(f"toolkit.verbs.{name}")
    assert module in verbs.MODULES
    registered = _parser_verbs()
    assert module.NAME in registered
    verb = cli.BY_NAME[module.NAME]
    assert (verb.run, verb.check, verb.options) == (module.run, module.check, module.options)


def test_the_parser_has_no_verb_without_a_module():
    assert sorted(_parser_verbs()) == sorted(m.NAME for m in verbs.MODULES)
    assert len(verbs.MODULES) == len(FOUND) == len(verbs.VERBS)


def _names_a_verb(node: ast.AST) -> bool:
    """`verb`, `args.verb`, `verb.name`, `NAME`: an expression that is a verb's name."""
    if isinstance(node, ast.Name):
        return node.id in ("verb", "NAME")
    if isinstance(node, ast.Attribute):
        return node.attr in ("verb", "name", "NAME")
    return False


def _is_literal(node: ast.AST) -> bool:
    """A string constant, or a tuple/list/set/dict of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_literal(e) for e in node.elts)
    return isinstance(node, ast.Dict)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_nothing_branches_on_a_verb_s_name(path):
    """What a verb does, checks or needs is its module's to declare: no ``if verb ==
    "preflight"``, no ``args.verb in (...)``, no table keyed by verb names."""
    source = path.read_text(encoding="utf-8")
    said = [w for w in ("verb ==", "args.verb in") if w in source]
    assert not said, f"{path.name} compares a verb's name: {said}"
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_verb(s) for s in sides) and any(_is_literal(s) for s in sides):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_function_of_the_command_line_is_long(path):
    long = [
        f"{path.name}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "split into named phases:\n" + "\n".join(long)


# ---------------------------------------------------------------------------- the verbs' options

VERB_OPTIONS = [
    ("compare a b --z=-1", "compare: --z must be a finite number > 0, got -1.0"),
    ("compare a b --z=nan", "compare: --z must be a finite number > 0, got nan"),
    (
        "compare a b --min_rel=-0.1",
        "compare: --min_rel must be a finite number >= 0 and <= 0.9, got -0.1",
    ),
    (
        "compare a b --min_rel=1",
        "compare: --min_rel must be a finite number >= 0 and <= 0.9, got 1.0",
    ),
    ("trace x --ops=-3", "trace: --ops must be an integer >= 0, got -3"),
    ("placement --batch_size=0", "placement: --batch_size must be an integer >= 1, got 0"),
    ("ops --repeats=0", "ops: --repeats must be an integer >= 1, got 0"),
    ("ops --min_time=inf", "ops: --min_time must be a finite number > 0, got inf"),
    ("preflight --precision=float8", "preflight: --precision must be one of float32, "),
    ("data-service --dispatcher --port=70000", "data-service: --port must be an integer >= 0"),
    ("data-service --dispatcher --host=", "data-service: --host must name this host"),
    ("data-service --worker --dispatcher=notaurl",
     "data-service: --dispatcher='notaurl': give the dispatcher as grpc://host:port"),
    ("data-service --worker --dispatcher=grpc://h:99999",
     "data-service: --dispatcher='grpc://h:99999': give the dispatcher as grpc://host:port"),
]  # fmt: skip


def test_the_verbs_options_are_checked_before_anything_loads(capsys):
    """Each in one line naming the option, status 2, before anything runs."""
    from toolkit.cli import main

    for argv, words in VERB_OPTIONS:
        assert main(argv.split()) == 2, argv
        err = capsys.readouterr().err
        assert err == f"error: {err[7:]}" and err.count("\n") == 1, err
        assert err.startswith(f"error: {words}"), err


# ---------------------------------------------------------------------------- before any framework

# Each verb's bad options, numbers, names and files, as typed: (argv, the flag or file the one
# line names). {file}: a JSON file that is not a report; {run}: a real run directory.
BAD_OPTIONS = [
    ("compare {file} {run}", "not a run report"),
    ("compare {run} /nonexistent/run", "no report at '/nonexistent/run'"),
    ("compare {run} {run} --z=nan", "--z"),
    ("show {file}", "not a run report"),
    ("show /nonexistent/run", "no report at"),
    ("trace /nonexistent/run", "no such run directory"),
    ("trace {run} --ops=-1", "--ops"),
    ("merge {run} {file}", "not a run report"),
    ("devices --backend=nonsense", "--backend"),
    ("preflight --device=banana", "--device"),
    ("preflight --precision=float8", "--precision"),
    ("placement --recipe=nope", "--recipe"),
    ("placement --device=banana", "--device"),
    ("placement --batch_size=0", "--batch_size"),
    ("doctor --report {file}", "not a run report"),
    ("doctor --report /nonexistent/run", "no report at"),
    ("doctor --recipe=nope", "--recipe"),
    ("doctor --batch_size=0", "--batch_size"),
    ("doctor --diagnose_steps=-5", "--diagnose_steps"),
    ("doctor --model_fn=not/a:spec", "--model_fn"),
    ("anatomy --steps=1", "--steps"),
    ("anatomy --out={file}", "--out"),
    ("anatomy --out={held}", "already holds a result (anatomy.json)"),
    ("anatomy --epochs=-1", "--epochs"),
    ("tune --tune_budget=-5", "--tune_budget"),
    ("tune --tune_budget=nan", "--tune_budget"),
    ("tune --across_backends --tune_budget=0", "--tune_budget"),
    ("tune --recipe=bert --mode=inference --batch_size=-1", "--batch_size"),
    ("tune --no_such_flag=1", "no_such_flag"),
    ("backends --steps=0", "--steps"),
    ("backends --rounds=0", "--rounds"),
    ("backends --backend=jax", "--backend=jax"),
    ("backends --out={file}", "--out"),
    ("backends --out={held}", "already holds a result (backends.json)"),
    ("memory --batch_sizes=0,8", "--batch_sizes"),
    ("ops --ops=nosuchop", "--ops"),
    ("ops --modes=bogus", "--modes"),
    ("ops --dtype=int99", "--dtype"),
    ("ops --device=banana", "--device"),
    ("ops --fusion --modes=jax_jit", "--modes"),
    ("ops --min_time=-1", "--min_time"),
    ("data-service --worker", "--dispatcher"),
    ("data-service --dispatcher --all_interfaces --work_dir={file}", "--work_dir"),
    ("data-service --dispatcher --port=-1", "--port"),
]
FRAMEWORKS = ("tensorflow", "jax", "torch", "keras")
# The verb run as the program runs it, then which frameworks it imported: checked on
# sys.modules after it returned, not on how long it took.
RUN_VERB = (
    "import sys\n"
    "from toolkit import cli\n"
    "try:\n"
    "    status = cli.main(sys.argv[1:])\n"
    "except SystemExit as e:\n"
    "    status = e.code\n"
    f"print('loaded:', sorted(set({FRAMEWORKS!r}) & set(sys.modules)))\n"
    "sys.exit(status)\n"
)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """A real run directory (its report.json) and a JSON file that is not a report."""
    from tests.test_report import make_report

    where = tmp_path_factory.mktemp("reports")
    make_report("a").write(where / "run", plot=False)
    (where / "not-a-report.json").write_text('{"name": "x"}')
    held = where / "held"  # an earlier anatomy's and backends' results
    held.mkdir()
    for name in ("anatomy.json", "backends.json"):
        (held / name).write_text("{}")
    return {"run": str(where / "run"), "file": str(where / "not-a-report.json"), "held": str(held)}


@pytest.mark.parametrize(("argv", "named"), BAD_OPTIONS, ids=[a for a, _ in BAD_OPTIONS])
def test_every_verb_s_bad_option_is_refused_before_any_framework_is_imported(argv, named, reports):
    """A bad number, name, report or directory, for every verb: one ``error:`` line naming
    it, status 2, and no framework imported (Keras, TensorFlow, JAX or PyTorch: each takes
    seconds to load, and a verb says what is wrong with what was typed before that)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", RUN_VERB, *argv.format(**reports).split()],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "loaded: []", done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and named in line, line
    assert "Traceback" not in done.stderr


def test_a_verb_that_passes_flags_on_reads_none_as_an_abbreviation_of_its_own():
    """argparse's abbreviations would read a recipe flag as a prefix of the verb's own
    option: ``--backend`` as ``--backends``, bert's ``--mode`` as ``--model_fn``."""
    root = cli.parser()
    args, rest = root.parse_known_args(["backends", "--backend=jax"])
    assert args.backends is None and rest == ["--backend=jax"]
    args, rest = root.parse_known_args(["tune", "--recipe", "bert", "--mode=inference"])
    assert args.model_fn is None and rest == ["--mode=inference"]
    args, rest = root.parse_known_args(["memory", "--batch_size=64"])
    assert args.batch_sizes is None and rest == ["--batch_size=64"]
    args, _ = root.parse_known_args(["compare", "a", "b", "--fail-on"])  # its own: still
    assert args.fail_on_slower


def test_show_reads_what_every_verb_writes(tmp_path, capsys):
    """``show`` on anatomy's ``anatomy.json`` and backends' ``backends.json`` (a file or its
    directory) prints them as their verbs did; a memory result is named, with its verb."""
    import json

    from tests.test_chooser import TF, row
    from tests.test_report_anatomy import anatomy
    from toolkit.search import chooser as ch

    a = anatomy()
    (tmp_path / "an").mkdir()
    (tmp_path / "an" / "anatomy.json").write_text(json.dumps(a.to_dict()))
    assert cli.main(["show", str(tmp_path / "an")]) == 0
    assert capsys.readouterr().out.startswith("inside the step:")
    result = ch.BackendsResult(ch.Target("mlp"), [row(TF, [0.01] * 3)], TF, "k", 100, 3, 1.0)
    (tmp_path / "backends.json").write_text(json.dumps(result.to_dict()))
    assert cli.main(["show", str(tmp_path / "backends.json")]) == 0
    assert "tensorflow" in capsys.readouterr().out
    assert cli.main(["show", "--json", str(tmp_path / "an" / "anatomy.json")]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == a.backend
    memory = {"target": "recipe mlp", "points": [], "limit_mb": 100.0, "batch_size": None}
    (tmp_path / "memory-1.json").write_text(json.dumps(memory))
    assert cli.main(["show", str(tmp_path / "memory-1.json")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "a memory result (python -m toolkit memory wrote it" in line and "schema" not in line
