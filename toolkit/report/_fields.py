"""A report's values checked as it is read: each field the views and ``compare`` use has the
kind they need (a number where a figure is formatted, a list of records where a table is
drawn). A report edited by hand, cut by another tool or written by another version fails here
in one line naming the field (``steps.p50_s``), not later in a ``TypeError`` from a view.

The step statistics are checked from :class:`~toolkit.core.stats.StepStats`'s own fields, so a
field added there is checked without a line here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from toolkit.core._advice import Advice
from toolkit.core._anatomy import Phase
from toolkit.core.errors import one_line
from toolkit.core.files import ReportError, open_regular, parse_json

# Figures under compute and tune that the views format as numbers (the diagnosis's are its
# record's to check: report._diagnosis).
COMPUTE_NUMBERS = (
    "flops_per_step", "flops_forward", "achieved_flops_per_s", "peak_flops_per_s", "mfu",
    "datasheet_peak_flops_per_s", "datasheet_mfu", "peak_spread_pct",
)  # fmt: skip


def read_checked(path: str, from_dict: Callable[[Any], Any], views: Callable[[Any], object]) -> Any:
    """The report in the JSON file `path`, read with `from_dict` (which checks its values)
    and shown once with `views`; every way it can fail is one ReportError naming the file.

    Its numbers must be finite (``1e999`` is not a figure) and only a regular file is read (a
    FIFO or a device would hang or fill the memory). Every string in it is made printable
    (:func:`visible`) before any reader sees it: a report is data anyone may have edited or
    sent, and ``show``, ``compare``, ``merge``, ``trace`` and ``doctor`` print its strings to a
    terminal, where an escape sequence would retitle, clear or rewrite it.
    """
    try:
        with open_regular(path) as f:
            data = parse_json(f, finite=True)
    except FileNotFoundError:
        raise ReportError(f"no report at {path!r}: give a report.json or a run directory") from None
    except (OSError, ValueError) as e:  # JSON, UTF-8, nested too deep, not finite, a FIFO
        raise ReportError(f"cannot read report {path!r}: {e}") from e
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ReportError(f"{path!r} is not a run report: it holds a JSON {kind}")
    data = visible(data)
    try:
        report = from_dict(data)
        check_views(report, views)
        return report
    except ReportError as e:  # name the file: the caller may have given several
        fix = ": fix that field, or run again for a new report" if "field " in str(e) else ""
        raise ReportError(f"{path!r}: {e}{fix}") from None
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        raise ReportError(f"report {path!r} is malformed: {one_line(e)}") from e


# C0 and C1 control characters and DEL, less newline and tab: what a terminal acts on.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def visible(data: Any) -> Any:
    """`data` (parsed JSON) with every control character in its strings and keys, other than
    newline and tab, written as a visible escape (ESC as ``\\x1b``); other characters, ``×``
    and ``µ`` among them, kept. Iterative: a value nested as deep as the JSON reader allows
    does not reach the recursion limit here."""
    root = [data]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        value = parent[key]
        if isinstance(value, str):
            parent[key] = _escape(value)
        elif isinstance(value, list):
            stack.extend((value, i) for i in range(len(value)))
        elif isinstance(value, dict):
            if any(_CONTROL.search(k) for k in value):
                value = {_escape(k): v for k, v in value.items()}
                parent[key] = value
            stack.extend((value, k) for k in value)
    return root[0]


def inside_run(run_dir: str, name: str, field: str, report: str) -> str:
    """The real path of `name` (a file named in the report `report`'s `field`), which must lie
    inside `run_dir`: a relative name is taken from the run directory, not the current one,
    and symlinks are resolved before the check. A report is data anyone may have edited or
    sent, and reading what it names (``trace`` prints what a trace file holds) must not
    reach ``../../secret.json``, ``/etc/...`` or a symlink leading out of the run.

    Raises:
        ReportError: `name` is empty or leads outside `run_dir` (one line naming the report,
            the field and the name).
    """
    root = os.path.realpath(run_dir)
    sound = bool(name) and "\0" not in name
    real = os.path.realpath(os.path.join(root, name)) if sound else root
    if real == root or os.path.commonpath([root, real]) != root:
        plain = os.path.normpath(os.path.join(root, name)) if sound else real
        link = f" (a symbolic link to {real})" if plain != real else ""
        raise ReportError(
            f"{report!r}: field {field} names {name!r}{link}, outside its run directory "
            f"{root}: a report's files are read only from inside its own run directory"
        )
    return real


def field_said(field: str, value: Any, what: str) -> str:
    """What is wrong with a field, in the words every report reader uses (a record's
    ``from_dict`` raises ValueError with them, and the reader says ``field <them>``)."""
    if value is None:
        return f"{field} is missing or null, not {what}"
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    return f"{field} is {shown}, not {what}"


def _bad(field: str, value: Any, what: str) -> ReportError:
    return ReportError(f"field {field_said(field, value, what)}")


def _number(field: str, value: Any, optional: bool = False, counts: bool = False) -> None:
    if value is None and optional:
        return
    kinds = "an integer" if counts else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(field, value, f"{kinds}{' or null' if optional else ''}")
    if counts and not isinstance(value, int):
        raise _bad(field, value, "an integer")
    if not math.isfinite(value) or value < 0:
        raise _bad(field, value, f"{kinds} >= 0")


MOST_PER_STEP_S = 86_400.0  # a day a step: past it, a figure was edited, not measured


def _per_step(field: str, value: Any) -> None:
    """Seconds per step no training step takes (1e300: compare then reads runs "as fast"
    under a 1e296× figure): refused, naming the field."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > MOST_PER_STEP_S:
        raise _bad(field, value, f"seconds per step up to {MOST_PER_STEP_S:,.0f} (a day)")


def _mapping(field: str, value: Any, optional: bool = True) -> Mapping[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(field, value, "an object" + (" or null" if optional else ""))
    return value


def _records(field: str, value: Any) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(r, Mapping) for r in value):
        raise _bad(field, value, "a list of objects")
    return value


def check_report(d: Mapping[str, Any], statuses: tuple[str, ...]) -> None:
    """Raises ReportError naming the first field of `d` (a report's JSON) whose value is not
    of the kind the views need."""
    for name in ("name", "status"):
        if not isinstance(d.get(name), str):
            raise _bad(name, d.get(name), "a string")
    if d["status"] not in statuses:
        raise _bad("status", d["status"], f"one of {', '.join(statuses)}")
    for name in ("error", "created_utc"):
        if d.get(name) is not None and not isinstance(d[name], str):
            raise _bad(name, d[name], "a string or null")
    _number("fit_seconds", d.get("fit_seconds"), optional=True)
    for name in ("environment", "args", "extra", "memory", "trace", "context",
                 "tune", "cluster", "ledger", "anatomy"):  # fmt: skip
        _mapping(name, d.get(name))
    check_ledger(d.get("ledger"))
    check_anatomy(d.get("anatomy"))
    for key, value in _mapping("metrics", d.get("metrics")).items():
        _number_or_nan(f"metrics.{key}", value)
    timeline = d.get("timeline") or []
    if not isinstance(timeline, list) or not all(
        isinstance(c, list) and len(c) == 4 for c in timeline
    ):
        raise _bad("timeline", timeline, "a list of [seconds, steps, epoch, kind] entries")
    compute = _mapping("compute", d.get("compute"))
    for key in COMPUTE_NUMBERS:
        _number(f"compute.{key}", compute.get(key), optional=True)
    tune = _mapping("tune", d.get("tune"))
    if tune:
        _number("tune.seconds", tune.get("seconds", 0.0))
        for i, trial in enumerate(_records("tune.trials", tune.get("trials"))):
            _number(f"tune.trials[{i}].examples_per_sec", trial.get("examples_per_sec"), True)
    trace = _mapping("trace", d.get("trace"))
    files = trace.get("files")
    if files is not None and not (
        isinstance(files, list) and all(isinstance(f, str) for f in files)
    ):
        raise _bad("trace.files", files, "a list of file names")


def check_ledger(value: Any) -> None:
    """The ``ledger`` object (``docs/report.md``): its wall time and each part a number of
    seconds (a part may be null: not seen), its callbacks and compiles records."""
    ledger = _mapping("ledger", value)
    if not ledger:
        return
    _number("ledger.wall_s", ledger.get("wall_s"))
    for key in ("recompiles", "epochs", "epochs_planned", "steps", "steps_per_epoch",
                "validations"):  # fmt: skip
        _number(f"ledger.{key}", ledger.get(key), optional=True, counts=True)
    parts = _mapping("ledger.parts", ledger.get("parts"), optional=False)
    for key, part in parts.items():
        if part is not None and (isinstance(part, bool) or not isinstance(part, int | float)):
            raise _bad(f"ledger.parts.{key}", part, "a number of seconds or null")
        _number(f"ledger.parts.{key}", part, optional=True)
    _adds_up(parts, ledger["wall_s"])
    for key in ("part_samples", "part_spread_s"):
        for name, v in _mapping(f"ledger.{key}", ledger.get(key)).items():
            _number(f"ledger.{key}.{name}", v, optional=True, counts=key == "part_samples")
    for name, c in _mapping("ledger.callbacks", ledger.get("callbacks")).items():
        c = _mapping(f"ledger.callbacks.{name}", c, False)
        _number(f"ledger.callbacks.{name}.seconds", c.get("seconds"))
        _number(f"ledger.callbacks.{name}.calls", c.get("calls"), optional=True, counts=True)
    for name, seconds in _mapping("ledger.overlapped", ledger.get("overlapped")).items():
        _number(f"ledger.overlapped.{name}", seconds)
    for i, c in enumerate(_records("ledger.compiles", ledger.get("compiles"))):
        for key in ("seconds", "backend_seconds", "step_spread_s"):
            _number(f"ledger.compiles[{i}].{key}", c.get(key), optional=key != "seconds")
    for key in ("validation_runs_s", "validation_calls"):
        for i, v in enumerate(_list(f"ledger.{key}", ledger.get(key))):
            _number(f"ledger.{key}[{i}]", v, counts=key == "validation_calls")
    for name, v in _mapping("ledger.step_s", ledger.get("step_s")).items():
        _number(f"ledger.step_s.{name}", v)
    _number("ledger.input_read_s", ledger.get("input_read_s"), optional=True)
    other = 0.0
    for i, o in enumerate(_records("ledger.other_where", ledger.get("other_where"))):
        _number(f"ledger.other_where[{i}].seconds", o.get("seconds"))
        other += o["seconds"]
    if other > (parts.get("other") or 0.0) + _tolerance(ledger["wall_s"]):
        raise _bad(
            "ledger.other_where", other, f"spans within the other part's {parts.get('other')} s"
        )
    for i, f in enumerate(_records("ledger.fixes", ledger.get("fixes"))):
        if not isinstance(f.get("words"), str):
            raise _bad(f"ledger.fixes[{i}].words", f.get("words"), "a string")
        for key in ("saves_s", "seconds", "break_even_ms"):
            _number(f"ledger.fixes[{i}].{key}", f.get(key), optional=True)
    check_memory(ledger.get("memory"))


def _tolerance(wall_s: float) -> float:
    """How far a ledger's parts may sum from its wall time: each is rounded to the µs."""
    return max(1e-3, 1e-4 * wall_s)


def _adds_up(parts: Mapping[str, Any], wall_s: float) -> None:
    """The ledger's promise: its parts add up to the fit's wall time."""
    total = sum(v for v in parts.values() if v is not None)
    if parts and abs(total - wall_s) > _tolerance(wall_s):
        raise _bad(
            "ledger.parts", f"{total:.6f} s in all", f"parts adding up to wall_s ({wall_s} s)"
        )


def _list(field: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(field, value, "a list")
    return value


def check_memory(value: Any) -> None:
    """The ledger's ``memory`` object (``docs/report.md``): MiB as numbers >= 0 or null, each
    part's and callback's figures, the growth records and the timeline's rows."""
    if value is None:
        return
    m = _mapping("ledger.memory", value)
    _number("ledger.memory.every_s", m.get("every_s"))
    if m["every_s"] <= 0:
        raise _bad("ledger.memory.every_s", m["every_s"], "a number > 0")
    _number("ledger.memory.readings", m.get("readings", 0), counts=True)
    for key in ("host_start_mb", "host_peak_mb", "device_peak_mb"):
        _number(f"ledger.memory.{key}", m.get(key), optional=True)
    for group in ("parts", "callbacks"):
        for name, p in _mapping(f"ledger.memory.{group}", m.get(group)).items():
            where = f"ledger.memory.{group}.{name}"
            p = _mapping(where, p, optional=False)
            for key in ("host_peak_mb", "host_end_mb", "device_peak_mb", "device_end_mb"):
                _number(f"{where}.{key}", p.get(key), optional=True)
            _number(f"{where}.readings", p.get("readings", 0), counts=True)
    for i, g in enumerate(_records("ledger.memory.growth", m.get("growth"))):
        _string(f"ledger.memory.growth[{i}].part", g.get("part"))
        _number(f"ledger.memory.growth[{i}].mb", g.get("mb"))
        for key in ("steps", "epoch"):
            _number(f"ledger.memory.growth[{i}].{key}", g.get(key, 0), counts=True)
    for i, row in enumerate(_list("ledger.memory.timeline", m.get("timeline"))):
        where = f"ledger.memory.timeline[{i}]"
        if not isinstance(row, list) or len(row) < 3:
            raise _bad(where, row, "a [seconds, step, host MiB, device MiB, part] row")
        _number(where, row[0])
        _number(where, row[1], counts=True)
        _number(where, row[2])
        _number(where, row[3] if len(row) > 3 else None, optional=True)


ANATOMY_NUMBERS = ("step_s", "traced_s", "fused_s")
ANATOMY_OPTIONAL = ("untraced_s", "raw_s", "fit_s", "fed_s", "model_alone_s",
                    "model_alone_forward_s", "other_between_s", "ops_per_step")  # fmt: skip
ANATOMY_WORDS = ("device", "signal", "raw_how")
PHASES = tuple(p.value for p in Phase)


def _string(field: str, value: Any, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise _bad(field, value, "a string" + (" or null" if optional else ""))


def check_anatomy(value: Any) -> None:
    """The ``anatomy`` object (``docs/report.md``, ``Anatomy.to_dict``): seconds per step as
    numbers >= 0, each phase one of :class:`~toolkit.core._anatomy.Phase`'s, each layer named,
    the notes strings; null where no anatomy was taken."""
    if value is None:
        return
    a = _mapping("anatomy", value)
    _string("anatomy.backend", a.get("backend"))
    for key in ANATOMY_WORDS:
        _string(f"anatomy.{key}", a.get(key, ""))
    _string("anatomy.error", a.get("error"), optional=True)
    if a.get("other_fix"):
        try:
            Advice.from_dict(a["other_fix"])
        except ValueError:
            raise _bad(
                "anatomy.other_fix", a["other_fix"], "advice: {text, tries} or null"
            ) from None
    _number("anatomy.steps", a.get("steps", 0), counts=True)
    for key in ANATOMY_NUMBERS:
        _number(f"anatomy.{key}", a.get(key, 0.0))
    for key in ANATOMY_OPTIONAL:
        _number(f"anatomy.{key}", a.get(key), optional=True)
    for key in ("phases", "traced_phases"):
        for i, p in enumerate(_records(f"anatomy.{key}", a.get(key))):
            if p.get("phase") not in PHASES:
                raise _bad(f"anatomy.{key}[{i}].phase", p.get("phase"),
                           f"one of {', '.join(PHASES)}")  # fmt: skip
            _number(f"anatomy.{key}[{i}].seconds", p.get("seconds"))
            _per_step(f"anatomy.{key}[{i}].seconds", p.get("seconds"))
            _string(f"anatomy.{key}[{i}].unseen", p.get("unseen", ""))
    for i, layer in enumerate(_records("anatomy.layers", a.get("layers"))):
        where = f"anatomy.layers[{i}]"
        _string(f"{where}.name", layer.get("name"))
        _string(f"{where}.kind", layer.get("kind", ""))
        for key in ("forward_s", "backward_s"):
            _number(f"{where}.{key}", layer.get(key))
            _per_step(f"{where}.{key}", layer.get(key))
        _number(f"{where}.fused_s", layer.get("fused_s", 0.0))
        _number(f"{where}.calls", layer.get("calls", 1), counts=True)
        _number(f"{where}.flops", layer.get("flops"), optional=True)
        for key in ("traced_forward_s", "traced_backward_s", "alone_s", "alone_forward_s",
                    "held_traced_s"):  # fmt: skip
            _number(f"{where}.{key}", layer.get(key), optional=True)
        if not isinstance(layer.get("alone_with_held", False), bool):
            raise _bad(f"{where}.alone_with_held", layer.get("alone_with_held"), "true or false")
        _string(f"{where}.check", layer.get("check", ""))
    notes = a.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise _bad("anatomy.notes", notes, "a list of strings")
    if a.get("error") is None:  # a taken anatomy: a step, and the phases it splits into
        if a.get("phases") is None:
            raise ReportError("field anatomy.phases is missing")
        for key in ("step_s", "traced_s"):
            value = a.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
                raise _bad(f"anatomy.{key}", value, "a time above 0 (seconds per step)")


def anatomy_error(error: BaseException) -> ReportError:
    """`error` from reading the ``anatomy`` object (``Anatomy.from_dict``), as its field."""
    return ReportError(f"field anatomy is malformed ({one_line(error)})")


def _number_or_nan(field: str, value: Any) -> None:
    """A metric: any number (a loss may be NaN, an R² negative; null where it was not
    finite), as Keras logs it."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise _bad(field, value, "a number")


_PARTS = {"DeviceInfo": "device", "Strategy": "strategy", "Cluster": "cluster",
          "Finding": "preflight", "Resume": "resume"}  # fmt: skip


def context_error(error: BaseException) -> ReportError:
    """`error` from reading the ``context`` object, as the field it is about."""
    text = str(error)
    found = re.match(r"(\w+)\.__init__\(\) (.*)", text)
    if found:
        part = _PARTS.get(found.group(1))
        where = f"context.{part}" if part else "context"
        return ReportError(f"field {where} is malformed: {found.group(2)}")
    return ReportError(f"field context is malformed ({one_line(error)})")


def check_views(report: Any, views: Callable[[Any], object]) -> None:
    """Raises ReportError naming the top-level field whose value `views(report)` (the
    summary and the Markdown) cannot show: the one without which they render."""
    try:
        views(report)
        return
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        error = e
    for f in dataclasses.fields(report):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            continue
        empty = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        try:
            views(dataclasses.replace(report, **{f.name: empty}))
        except (TypeError, ValueError, KeyError, AttributeError, IndexError):
            continue
        raise ReportError(
            f"field {f.name} holds a value this toolkit cannot show ({one_line(error)})"
        )
    raise ReportError(f"a field holds a value this toolkit cannot show ({one_line(error)})")
