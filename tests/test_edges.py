"""The upper floors' rules, checked on the source: the command line is read once, at the edge
(the app layer: ``toolkit.app``, ``toolkit.cli``, ``toolkit.verbs``, ``toolkit._child``,
``toolkit._argv``), and orchestrators read as named phases (no long function).

Below the edge, layers hand each other typed objects (a ``TrainConfig``, a ``Candidate``, a
``Target``): nothing there imports an argv helper, parses absl flags, or builds a string that is
one whole flag (``f"--{name}={value}"``). The flag *definitions* (``toolkit.runner.flags``)
and the settings table that names each setting's flag (``toolkit.runner.config``) are the
exceptions: they are what the edge reads with. Messages may name a flag (``--batch_size=64 is
larger than ...``): a message is words, not a command line.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.test_layers import MODULES, _imports

BELOW_THE_EDGE = ("toolkit.search", "toolkit.runner", "toolkit.profiling", "toolkit.report")
FLAG_DEFINITIONS = ("toolkit.runner.flags", "toolkit.runner.config")
ARGV_HELPERS = "toolkit._argv"  # the app layer's: reading, renaming and rewriting a command line
WHOLE_FLAG = re.compile(r"^--?[A-Za-z_][\w-]*=?$")  # "--backend", "--port=", "-v"
# Functions no longer than this, less their docstring: the rooms that orchestrate (search,
# runner, app, verbs), and those where the typed records are built and shown (profiling,
# report, data).
LONGEST = 60
PHASED = ("toolkit.search", "toolkit.runner", "toolkit.app", "toolkit.cli", "toolkit.verbs",
          "toolkit._child", "toolkit._argv", "toolkit.profiling", "toolkit.report",
          "toolkit.data")  # fmt: skip


def _below(prefixes: tuple[str, ...]) -> list[str]:
    return sorted(
        m for m in MODULES if m.startswith(prefixes) and not m.startswith(FLAG_DEFINITIONS)
    )


def _flag_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Strings that are one whole flag: an f-string whose text before its first value is
    ``--name=`` or ``--`` (a flag built from values), or a constant ``--name`` in a list or
    tuple (a command line being built). A flag's name handed to a message is neither."""
    found = []
    inside = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    listed = {id(e) for n in ast.walk(tree) if isinstance(n, (ast.List, ast.Tuple)) for e in n.elts}
    for node in ast.walk(tree):
        if id(node) in inside:  # an f-string's text: judged with its f-string
            continue
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            text = head.value if isinstance(head, ast.Constant) else ""
            literal = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            flag = isinstance(text, str) and (WHOLE_FLAG.match(text) or text == "--")
            if flag and text.startswith("--") and " " not in literal:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) in listed:
            value = node.value
            if value.startswith("--") and WHOLE_FLAG.match(value):
                found.append((node.lineno, value))
    return sorted(found)


@pytest.mark.parametrize("module", _below(BELOW_THE_EDGE))
def test_below_the_edge_no_command_line_is_read_or_built(module):
    path = MODULES[module]
    imports = [(m, line) for m, _names, line in _imports(module, type_checking=True)]
    helpers = [f"{path.name}:{line} imports {m}" for m, line in imports if m == ARGV_HELPERS]
    assert not helpers, "argv helpers are the app layer's: " + "; ".join(helpers)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    built = [f"{path.name}:{line}: {text}" for line, text in _flag_strings(tree)]
    assert not built, "a flag string below the edge (hand typed values instead): " + "; ".join(
        built
    )
    parses = [
        f"{path.name}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "FLAGS"
    ]
    assert not parses, "absl's flags parsed below the edge: " + "; ".join(parses)


def test_the_rule_catches_what_it_is_for():
    """The checker itself: a flag built from values is caught, a message naming one is not."""
    caught = _flag_strings(ast.parse('a = f"--{name}={value}"\nb = ["--worker"]\nc = f"--x={v}"'))
    assert [line for line, _ in caught] == [1, 2, 3]
    words = 'm = f"--batch_size={n} is larger than the data"\nn = "--steps_per_execution=8 is"'
    assert _flag_strings(ast.parse(words)) == []


def _long_functions(module: str) -> list[str]:
    path = MODULES[module]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        doc = node.body[0] if node.body else None
        if isinstance(doc, ast.Expr) and isinstance(getattr(doc, "value", None), ast.Constant):
            lines -= doc.end_lineno - doc.lineno + 1
        if lines > LONGEST:
            out.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_orchestrators_read_as_named_phases():
    """No function in the search, the runner, the app, the verbs, the profiling, the report
    or the data rooms is longer than :data:`LONGEST` lines of code: a long one is split into
    phases with names."""
    long = [f for module in sorted(MODULES) if module.startswith(PHASED)
            for f in _long_functions(module)]  # fmt: skip
    assert not long, "split into named phases: " + "; ".join(long)
