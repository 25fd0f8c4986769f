"""The ledger of one ``fit``: where its wall time went, in parts that add up to it.

A user pays for the whole call, not the step. StepTimer knows the steps; the ledger lays the
rest of the call beside them:

* **start-up**: the fit called -> its first batch begins (the data adapter, building, the
  callbacks' train begin, the input iterator);
* **compile**: each function's first call beyond its later calls' median (``train``, and
  ``evaluate`` in the first validation), and every later retrace or recompile that the
  backend's own signal found (``toolkit.backend._common.CompileWatch``: TensorFlow's tracing
  counts, JAX's monitoring events, TorchDynamo's guard failures), each timed as its
  execution's excess over the median, with its epoch, step and cause;
* **steps**: the training executions, less all of the above inside them;
* **input**: where it can be timed without a device sync: each batch read inside JAX's train
  function, the gaps between PyTorch's steps where Keras fetches the next batch. On
  TensorFlow the batch is read inside the traced step: only a profiler sees it (``None``);
* **validation**: on_test_begin -> on_test_end, less its callbacks and its compile;
* **callbacks**: every other callback's hooks, timed by its class name (``ModelCheckpoint``,
  ``TensorBoard``, ``CSVLogger``, Keras's own ``ProgbarLogger`` and ``History``, yours), on
  the fit's thread; time a callback spent on Keras's callback thread overlapped the steps and
  is shown apart (``overlapped``);
* **exit**: train end -> the fit returned (on TensorFlow, the tf.data iterator's teardown);
* **other**: what is left (Keras's own work between epochs); never hidden.

How it sees the other callbacks: at train begin StepTimer finds Keras's callback list (the
object calling its hook) and times each overridden hook of the others in place (an instance
attribute wrapping the bound method, taken out at train end, or when the fit call returns):
nothing is added to the list, ``is_default`` answers as before, so Keras dispatches exactly
as it would have. A callback listed before StepTimer has run its train begin by then: that
is in the start-up.

Every part is built from clock readings the hooks take anyway (two more per timed hook,
none per step on TensorFlow); the intervals tile the call, so the parts add up to its wall
time by construction, and what no interval explains is ``other``.
"""

from __future__ import annotations

import bisect
import contextlib
import statistics
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit.core.stats import FIRST

__all__ = ["PARTS", "CallbackClock", "FitLedger"]

PARTS = ("start_up", "compile", "steps", "input", "validation", "callbacks", "exit", "other")
HOOKS = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_batch_begin",
    "on_batch_end",
)
_MISSING = object()


def keras_callbacks(me: Any) -> list[Any] | None:
    """The callback list Keras is calling `me` from (walked up from the hook's frame), or
    None where none is found (a hook called by hand)."""
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        found = getattr(owner, "callbacks", None) if owner is not me else None
        if isinstance(found, list) and any(c is me for c in found):
            return found
        frame = frame.f_back
    return None


def _restore(cb: Any, hook: str, previous: Any) -> None:
    with contextlib.suppress(AttributeError):
        if previous is _MISSING:
            delattr(cb, hook)
        else:
            setattr(cb, hook, previous)


def _base(cb: Any, hook: str) -> bool:
    """Whether `hook` of `cb` is Keras's own no-op, the base ``Callback``'s (tf_keras does not
    mark its no-ops as Keras 3 does)."""
    if hook in getattr(cb, "__dict__", {}):
        return False
    owner = next((k for k in type(cb).__mro__ if hook in vars(k)), None)
    return owner is not None and owner.__name__ == "Callback"


class CallbackClock:
    """Times other callbacks' hooks in place, by class name, for the ledger."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.records: list[tuple[float, float, str]] = []  # (start, seconds, name), fit thread
        self.off: list[tuple[str, float]] = []  # (name, seconds) on another thread
        self._patched: list[tuple[Any, str, Any]] = []

    def watch(self, callbacks: Sequence[Any], skip: Any) -> None:
        main = threading.get_ident()
        for cb in callbacks:
            if cb is skip:
                continue
            name = type(cb).__name__
            for hook in HOOKS:
                method = getattr(cb, hook, None)
                if method is None or getattr(method, "_is_default", False) or _base(cb, hook):
                    continue  # Keras's no-op: nothing to time, and its async choice stays
                if getattr(method, "_toolkit_timed", False):
                    continue
                previous = vars(cb).get(hook, _MISSING) if hasattr(cb, "__dict__") else _MISSING
                try:
                    setattr(cb, hook, self._timed(method, name, main, cb, hook))
                except (AttributeError, TypeError):  # __slots__, a frozen object: untimed
                    continue
                self._patched.append((cb, hook, previous))

    def _timed(
        self, method: Callable[..., Any], name: str, main: int, cb: Any, hook: str
    ) -> Callable[..., Any]:
        clock, records, off, ident = self._clock, self.records, self.off, threading.get_ident

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return method(*args, **kwargs)
            finally:  # a hook that raised is timed too
                if ident() == main:
                    records.append((t0, clock() - t0, name))
                else:
                    off.append((name, clock() - t0))
                if hook == "on_train_end":  # the fit's last hook: out it goes
                    self._take_out(cb)

        timed._toolkit_timed = True  # type: ignore[attr-defined]
        timed.__wrapped__ = method  # type: ignore[attr-defined]
        return timed

    def _take_out(self, owner: Any) -> None:
        for entry in list(self._patched):
            cb, hook, previous = entry
            if cb is owner and hook == "on_train_end":
                _restore(cb, hook, previous)
                self._patched.remove(entry)

    def release(self, but_train_end: bool = False) -> None:
        """Takes every timing wrapper out again; with `but_train_end` (StepTimer's own train
        end, which callbacks listed after it have not reached yet) each ``on_train_end`` one
        stays, and takes itself out once it has run."""
        kept = []
        for cb, hook, previous in reversed(self._patched):
            if but_train_end and hook == "on_train_end":
                kept.append((cb, hook, previous))
                continue
            _restore(cb, hook, previous)
        self._patched = kept[::-1]


class FitLedger:
    """One fit's clock readings, kept by StepTimer's hooks, and the ledger made of them."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.clear()

    def clear(self) -> None:
        self.train_begin: float | None = None
        self.train_end: float | None = None
        self.epochs: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []
        self.gaps: list[tuple[float, float]] = []  # (start, seconds): input between steps
        self._test: dict[str, Any] | None = None
        self.callbacks = CallbackClock(self._clock)
        self.found_callbacks = False
        self.model: Any = None
        self.watch: Any = None
        self._stopped: Any = None  # the watch after finish(), for the result's reading
        self.backend = ""
        self.overlaps = False  # the backend dispatches asynchronously: reads overlap steps
        self._per_step: dict[str, float] = {}
        self._epoch = 0

    # ------------------------------------------------------------ fed by StepTimer

    def begin(self, timer: Any, model: Any, at: float) -> None:
        self.finish()
        self.clear()
        self.train_begin = at
        self.model = model
        from toolkit import backend
        from toolkit.backend._common import CompileWatch

        try:
            seam = backend.get()
            self.backend = backend.name()
            self.overlaps = bool(seam.dispatches_asynchronously())
            self.watch = seam.compile_watch(model, self._clock)
        except Exception:  # noqa: BLE001 - a backend the toolkit does not measure: no signal
            self.watch = CompileWatch(model, self._clock)
        try:
            self.watch.start()
        except Exception:  # noqa: BLE001 - the signal is a view; training goes on
            self.watch = CompileWatch(model, self._clock)
        found = keras_callbacks(timer)
        if found is not None:
            self.found_callbacks = True
            self.callbacks.watch(found, skip=timer)

    def _poll(self, where: str) -> None:
        if self.watch is not None:
            with contextlib.suppress(Exception):  # never stops training
                self.watch.poll(where)

    def epoch_begin(self, epoch: int) -> None:
        self._epoch = epoch

    def epoch_end(
        self,
        epoch: int,
        begin: float,
        first: float | None,
        steps_end: float | None,
        end: float,
        gaps: list[tuple[float, float]],
    ) -> None:
        self._poll(f"train epoch {epoch}")
        self.epochs.append(
            {"epoch": epoch, "begin": begin, "first": first, "steps_end": steps_end, "end": end}
        )
        self.gaps.extend(gaps)

    def test_begin(self, at: float) -> None:
        self._poll(f"train epoch {self._epoch}")
        if self.watch is not None:
            with contextlib.suppress(Exception):  # never stops training
                self.watch.test_begin()
        self._test = {"begin": at, "end": None, "begins": [], "epoch": self._epoch}

    def test_batch(self, batch: int, at: float) -> None:
        if self._test is not None:
            self._test["begins"].append((batch, at))

    def test_end(self, at: float) -> None:
        if self._test is None:
            return
        self._test["end"] = at
        self.validations.append(self._test)
        self._test = None
        self._poll(f"validation {len(self.validations) - 1}")

    def end(self, at: float) -> None:
        self.train_end = at
        self._poll(f"train epoch {self._epoch}")
        self.finish(but_train_end=True)  # the callbacks after StepTimer end the fit after it

    def finish(self, but_train_end: bool = False) -> None:
        """Stops the backend's watch and takes the callbacks' timers out (idempotent; also
        after a fit that raised, where Keras never called train end; `but_train_end`: see
        :meth:`CallbackClock.release`)."""
        watch, self.watch = self.watch, None
        if watch is not None:
            with contextlib.suppress(Exception):  # never stops training
                watch.stop()
            self._stopped = watch
        self.callbacks.release(but_train_end)

    # ------------------------------------------------------------ the ledger

    def result(
        self,
        calls: Sequence[tuple[float, int, int, str]],
        span: tuple[float | None, float | None],
        current: dict[str, Any] | None,
        params: Mapping[str, Any] | None,
        now: float,
    ) -> dict[str, Any] | None:
        """The ledger as a dict (``docs/report.md``, "ledger"), or None: no fit was timed.

        `calls` are StepTimer's executions, `span` the fit call's (called, returned) where
        something timed it, `current` the epoch a fit stopped inside (its first begin and the
        end of its last recorded execution), `params` Keras's."""
        if self.train_begin is None:
            return None
        watch = self.watch or self._stopped
        called, returned = span
        if called is None or returned is None or not called <= self.train_begin <= returned:
            called = returned = None
        start = called if called is not None else self.train_begin
        train_end = self.train_end
        if train_end is not None and returned is not None and train_end > returned:
            train_end = None
        stop = returned if returned is not None else train_end if train_end is not None else now
        # A fit that never reached train end (it raised, or is still running); one that
        # stopped early on purpose (EarlyStopping) ended whole. The report marks a stopped
        # run partial too.
        partial = self.train_end is None
        epochs = list(self.epochs)
        if current is not None and current.get("first") is not None:
            epochs.append({"epoch": current["epoch"], **current})
        validations = list(self.validations)
        if self._test is not None:  # stopped inside a validation
            validations.append({**self._test, "end": stop})

        # The intervals that tile [start, stop], each of one part.
        spans: list[tuple[float, float, str]] = []
        first = next((e["first"] for e in epochs if e.get("first") is not None), None)
        spans.append((start, first if first is not None else (train_end or stop), "start_up"))
        # On a backend that queues steps ahead of the device, the host reads the next batch
        # while the device runs the last step: its reads are not a wait the run paid. They are
        # said apart (``input_read_s``), and the input part is left unseen.
        read_s = sum(d for _, d in self.gaps)
        read_s += sum(d for _, d in getattr(watch, "input_spans", []) if watch is not None)
        gaps = [] if self.overlaps else sorted(self.gaps)
        for e in epochs:
            a, b = e.get("first"), e.get("steps_end")
            if a is None or b is None:
                continue
            i = bisect.bisect_left(gaps, (a, 0.0))
            cur = a
            while i < len(gaps) and gaps[i][0] < b:
                g0, gd = gaps[i]
                spans.append((cur, g0, "steps"))
                spans.append((g0, min(b, g0 + gd), "input"))
                cur = min(b, g0 + gd)
                i += 1
            spans.append((cur, b, "steps"))
        ends = {e["epoch"]: e.get("steps_end") for e in epochs}
        runs_s = []
        for v in validations:
            # From the epoch's last step: Keras builds the validation's iterator (and its
            # evaluate call) before on_test_begin.
            after = ends.get(v.get("epoch"))
            begin = after if after is not None and after <= v["begin"] else v["begin"]
            spans.append((begin, v["end"], "validation"))
            runs_s.append(round(v["end"] - begin, 6))
        if train_end is not None and returned is not None:
            spans.append((train_end, returned, "exit"))
        spans.sort(key=lambda s: s[0])
        tiles: list[tuple[float, float, str]] = []
        cursor = start
        for a, b, part in spans:
            a, b = max(a, cursor), min(b, stop)
            if b <= a:
                continue
            if a > cursor:
                tiles.append((cursor, a, "other"))
            tiles.append((a, b, part))
            cursor = b
        if cursor < stop:
            tiles.append((cursor, stop, "other"))
        totals = dict.fromkeys(PARTS, 0.0)
        for a, b, part in tiles:
            totals[part] += b - a
        # Where the unexplained time sits, the largest first, said by where in the fit it is.
        others = sorted(
            ((b - a, _where(a, b, epochs)) for a, b, part in tiles if part == "other"),
            key=lambda o: -o[0],
        )[:3]
        starts = [t[0] for t in tiles]

        def part_at(t: float) -> str | None:
            i = bisect.bisect_right(starts, t) - 1
            return tiles[i][2] if i >= 0 and t < tiles[i][1] else None

        # Callbacks, by name: moved out of the part they ran in.
        by_name: dict[str, dict[str, Any]] = {}
        for t0, dt, name in self.callbacks.records:
            part = part_at(t0)
            if part is None:
                continue
            totals[part] -= dt
            totals["callbacks"] += dt
            entry = by_name.setdefault(name, {"seconds": 0.0, "calls": 0})
            entry["seconds"] += dt
            entry["calls"] += 1
        overlapped: dict[str, float] = {}
        for name, dt in self.callbacks.off:
            overlapped[name] = overlapped.get(name, 0.0) + dt
        # The input read inside the train function (JAX): out of the steps.
        input_seen = getattr(watch, "input_seen", "") if watch is not None else ""
        if self.overlaps:
            input_seen = ""
        for t0, dt in getattr(watch, "input_spans", []) if input_seen else []:
            part = part_at(t0)
            if part is not None:
                totals[part] -= dt
                totals["input"] += dt

        compiles = self._compiles(calls, epochs, validations, watch, part_at, totals)
        if runs_s:  # each validation's own time: the first without its compile
            first_eval = sum(
                c["seconds"] for c in compiles if c["function"] == "evaluate" and c["first"]
            )
            runs_s[0] = round(max(0.0, runs_s[0] - first_eval), 6)
        named = sum(v for k, v in totals.items() if k != "other")
        wall = stop - start
        totals["other"] = wall - named
        parts: dict[str, float | None] = {k: round(v, 6) for k, v in totals.items()}
        if not input_seen:
            # Nothing was moved into it: the input is inside the steps, unseen.
            parts["input"] = None
        if returned is None or train_end is None:  # not timed, or the fit never ended
            parts["exit"] = None
        unseen = []
        if called is None:
            unseen.append(
                "the fit call before train begin and after train end (call fit through "
                "profile().fit, or wrap it in StepTimer.around_fit())"
            )
        if self.overlaps:
            unseen.append(
                f"the input's wait: the host read its batches for {read_s:.3f} s while the "
                "device ran queued steps (an asynchronous backend), so how long the steps "
                "waited for them is not known without a device sync (diagnose measures it)"
            )
        elif not input_seen:
            unseen.append(
                "the input: read inside the traced step, in its time (diagnose measures the "
                "pipeline alone; a trace shows it)"
            )
        if not self.found_callbacks:
            unseen.append("the callbacks by name (Keras's callback list was not found)")
        done_epochs = len(self.epochs)
        steps = sum(c[1] for c in calls)
        ran = [v for v in validations if v.get("end") is not None]
        model = self.model
        return {
            "from": "fit call" if called is not None else "train begin",
            "partial": partial,
            "wall_s": round(wall, 6),
            "parts": parts,
            "callbacks": {
                k: {**v, "seconds": round(v["seconds"], 6)}
                for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]["seconds"])
            },
            "overlapped": {k: round(v, 6) for k, v in overlapped.items()},
            "compiles": _largest(compiles),
            "recompiles": sum(1 for c in compiles if not c["first"]),
            "signal": getattr(watch, "signal", None) if watch is not None else None,
            "epochs": done_epochs,
            "epochs_planned": int((params or {}).get("epochs") or done_epochs or 0),
            "steps": steps,
            "steps_per_epoch": (params or {}).get("steps"),
            "validations": len(ran),
            "validation_calls": [len(v["begins"]) for v in ran],
            "validation_runs_s": runs_s,
            # The median execution's seconds a step, per function (a fix's unit of time).
            "step_s": {k: round(v, 6) for k, v in getattr(self, "_per_step", {}).items()},
            "backend": self.backend,
            "jit_compile": _jit(model),
            "unseen": unseen,
            "input_read_s": round(read_s, 6) if read_s else None,
            "other_where": [{"seconds": round(d, 6), "where": where} for d, where in others],
        }

    def _compiles(
        self,
        calls: Sequence[tuple[float, int, int, str]],
        epochs: list[dict[str, Any]],
        validations: list[dict[str, Any]],
        watch: Any,
        part_at: Callable[[float], str | None],
        totals: dict[str, float],
    ) -> list[dict[str, Any]]:
        """Each compile, timed, and moved out of the part it happened in."""
        # Every execution: (start, seconds, steps, function, epoch, index in its run, batch).
        runs: list[list[tuple[float, float, int, str, int, int, int]]] = []
        val_runs: list[list[tuple[float, float, int, str, int, int, int]]] = []
        by_epoch: dict[int, list[tuple[float, int, int, str]]] = {}
        for c in calls:
            by_epoch.setdefault(c[2], []).append(c)
        for e in epochs:
            t, batch, run = e.get("first"), 0, []
            if t is None:
                continue
            for k, (d, n, _, _) in enumerate(by_epoch.get(e["epoch"], [])):
                run.append((t, d, n, "train", e["epoch"], k, batch))
                t, batch = t + d, batch + n
            runs.append(run)
        for r, v in enumerate(validations):
            begins = v["begins"]
            run = []
            for k, (batch, t) in enumerate(begins):
                t_next = begins[k + 1][1] if k + 1 < len(begins) else v["end"]
                n = begins[k + 1][0] - batch if k + 1 < len(begins) else 1
                run.append((t, t_next - t, max(1, n), "evaluate", v.get("epoch", r), k, batch))
            val_runs.append(run)
        runs = runs + val_runs
        per_step: dict[str, float] = {}
        self._per_step = per_step
        for function in ("train", "evaluate"):
            rest = [
                x[1] / x[2]
                for run in runs
                for x in run[1:]  # a run's first execution may wait on its input's start
                if x[3] == function
                and (x[5] < len(run) - 1 or len(run) <= 2)  # the last may be ragged
            ]
            if function == "train":  # StepTimer's own steady steps when it has them
                rest = [d / n for d, n, _, kind in calls if kind != FIRST and n] or rest
            elif not rest:  # one execution a validation: the later validations' executions
                rest = [x[1] / x[2] for run in val_runs[1:] for x in run]
            if rest:
                per_step[function] = statistics.median(rest)
        out: list[dict[str, Any]] = []
        taken: set[tuple[str, int, int]] = set()

        def add(x: tuple[Any, ...], first: bool, cause: Any, own: float | None) -> None:
            start, d, n, function, epoch, k, batch = x
            key = (function, epoch if function == "train" else id(x), k)
            if key in taken:
                return
            taken.add(key)
            median = per_step.get(function)
            excess = max(0.0, d - n * median) if median is not None else None
            if excess is None:
                return
            part = part_at(start)
            if part is not None:
                excess = min(excess, max(0.0, totals[part]))
                totals[part] -= excess
            totals["compile"] += excess
            out.append(
                {
                    "function": function,
                    "first": first,
                    "epoch": epoch,
                    "step": batch,
                    "seconds": round(excess, 6),
                    "backend_seconds": round(own, 6) if own is not None else None,
                    "cause": cause,
                }
            )

        firsts = {}
        for run in runs:
            if run and run[0][3] not in firsts:
                firsts[run[0][3]] = run[0]
        events = list(getattr(watch, "events", []) if watch is not None else [])
        for x in firsts.values():
            own = sum(
                ev["seconds"] or 0.0
                for ev in events
                if ev.get("at") is not None and x[0] <= ev["at"] < x[0] + x[1]
            )
            add(x, True, "first call", own or None)
        flat = sorted((x for run in runs for x in run), key=lambda x: x[0])
        starts = [x[0] for x in flat]
        polled: dict[str, list[dict[str, Any]]] = {}
        for ev in events:
            at = ev.get("at")
            if at is not None:
                i = bisect.bisect_right(starts, at) - 1
                if i >= 0 and at < flat[i][0] + flat[i][1]:
                    x = flat[i]
                    if x is not firsts.get(x[3]):
                        own = sum(
                            e.get("seconds") or 0.0
                            for e in events
                            if e.get("at") is not None and x[0] <= e["at"] < x[0] + x[1]
                        )
                        add(x, False, ev.get("cause") or "a new trace", own or None)
                    continue
                part = part_at(at)  # outside any step: a compile of Keras's own, timed by JAX
                seconds = float(ev.get("seconds") or 0.0)
                if part is not None and seconds > 0:
                    seconds = min(seconds, max(0.0, totals[part]))
                    totals[part] -= seconds
                    totals["compile"] += seconds
                    out.append(
                        {
                            "function": ev.get("function") or part.replace("_", "-"),
                            "first": True,  # a function of Keras's own, compiled once
                            "epoch": None,
                            "step": None,
                            "seconds": round(seconds, 6),
                            "backend_seconds": round(seconds, 6),
                            "cause": ev.get("cause") or f"compiled in the {part.replace('_', '-')}",
                            "outside_steps": True,
                        }
                    )
                continue
            polled.setdefault(str(ev.get("where") or ""), []).append(ev)
        for where, found in polled.items():
            # A counter read at the interval's end: its slowest executions, in time order.
            kind, _, index = where.rpartition(" ")
            try:
                index_n = int(index)
            except ValueError:
                continue
            if kind == "train epoch":
                pool = [x for run in runs for x in run if x[3] == "train" and x[4] == index_n]
            else:
                pool = list(val_runs[index_n]) if 0 <= index_n < len(val_runs) else []
            pool = [x for x in pool if x is not firsts.get(x[3])]
            slowest = sorted(pool, key=lambda x: -x[1] / x[2])[: len(found)]
            for x, ev in zip(sorted(slowest, key=lambda x: x[0]), found, strict=False):
                add(x, False, _first_line(ev.get("cause")) or "a new trace", None)
        return [c for c in out if c["seconds"] > 0 or c["first"]]


MAX_COMPILES = 100  # compiles listed in a ledger at most (the largest; all are counted)


def _where(a: float, b: float, epochs: list[dict[str, Any]]) -> str:
    """Where in the fit the unexplained span ``[a, b)`` lies, in words."""
    mid = (a + b) / 2
    for k, e in enumerate(epochs):
        n = e["epoch"] + 1
        first, end = e.get("first"), e.get("end")
        if first is not None and e.get("begin") is not None and e["begin"] <= mid < first:
            return f"the start of epoch {n}: its input iterator, before the first step"
        if end is not None and first is not None and first <= mid < end:
            return f"the end of epoch {n}: Keras's epoch logs and the callbacks before StepTimer"
        following = epochs[k + 1].get("begin") if k + 1 < len(epochs) else None
        if end is not None and mid >= end and (following is None or mid < following):
            return f"after epoch {n}: the callbacks after StepTimer and Keras's epoch end"
    return "between the fit's parts"


def _largest(compiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first calls and the :data:`MAX_COMPILES` largest recompiles, in the order they
    happened (a step recompiled at every batch would fill the report)."""
    if len(compiles) <= MAX_COMPILES:
        return compiles
    keep = {
        id(c)
        for c in sorted(compiles, key=lambda c: (not c["first"], -c["seconds"]))[:MAX_COMPILES]
    }
    return [c for c in compiles if id(c) in keep]


def _first_line(cause: Any) -> str | None:
    """A backend's reason in one line (TorchDynamo's ``1/0: reason`` and its stack dropped)."""
    if not cause:
        return None
    line = str(cause).strip().splitlines()[0]
    head, sep, rest = line.partition(": ")
    return rest if sep and head.replace("/", "").isdigit() else line


def _jit(model: Any) -> str | None:
    """How the model compiles its step (``True``, ``False``, ``auto``), as Keras holds it."""
    value = getattr(model, "jit_compile", None)
    return None if value is None else str(value)


def epoch_gaps(
    begins: Sequence[tuple[Any, ...]], ends: Sequence[tuple[Any, ...]]
) -> list[tuple[float, float]]:
    """``(start, seconds)`` from each step's end to the next step's begin in one epoch: where
    Keras's PyTorch loop fetches the next batch."""
    end_of = {m[0]: m[1] for m in ends}
    out = []
    for k in range(len(begins) - 1):
        last = begins[k + 1][0] - 1
        t = end_of.get(last, end_of.get(begins[k][0]))
        if t is not None and begins[k + 1][1] > t:
            out.append((t, begins[k + 1][1] - t))
    return out
