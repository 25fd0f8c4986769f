"""profile(): StepTimer (+ TraceWindow) around your own fit, and a report however the run ends."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import logging as std_logging
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from absl import logging

from toolkit.core import interrupts, terminal
from toolkit.core._anatomy import Anatomy, reconcile
from toolkit.core.errors import one_line
from toolkit.core.stats import DEFAULT_WARMUP_STEPS
from toolkit.profiling._compute import Compute
from toolkit.profiling._timing import (
    AFTER_FIT,
    BEFORE_FIT,
    FIT_CALL,
    IN_PROFILE,
    LAUNCH,
    ProcessTime,
    process_start,
)
from toolkit.profiling.anatomy import AnatomyWindow
from toolkit.profiling.loss_guard import LossGuard
from toolkit.profiling.scalars import DEVICE_PEAK, HOST_RSS, TRAIN, Scalars, viewing_hint
from toolkit.profiling.step_timer import StepTimer
from toolkit.profiling.stop_on_signal import StopOnSignal
from toolkit.profiling.trace_window import TraceWindow
from toolkit.report import COMPLETE, DIVERGED, PARTIAL, RunContext, RunReport
from toolkit.report._cluster import ClusterView
from toolkit.report._diagnosis import DiagnosisSection
from toolkit.report._tensorboard import TensorBoardRuns
from toolkit.report._tune import TuneSection
from toolkit.report.run_report import UNTIMED

LEDGER_TAG = "Ledger/where the time went"
ANATOMY_TAG = "anatomy"

__all__ = [
    "Profile",
    "profile",
]


def new_run_dir(report_dir: str | os.PathLike[str]) -> str:
    """Creates and returns ``report_dir/<YYYYmmdd-HHMMSS>`` (suffixed ``-2``, ... when taken)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(os.fspath(report_dir), stamp)
    path, n = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            n += 1
            path = f"{base}-{n}"


class Profile:
    """Profiles one run and writes its RunReport, also when training raises or is interrupted.

    In the ``with`` block call ``prof.fit(model, ...)`` (the whole call timed), pass ``callbacks``
    to your ``fit``, or drive ``timer`` yourself; set ``.context``, ``.compute``, ``.diagnosis``,
    ``.tune``, ``.anatomy``, ``.extra``; ``prof.mark`` ends a stage. If the block raises (SIGTERM:
    ``TrainingInterrupted``) the report is ``partial`` and the error goes on; Ctrl-C and SIGTERM
    stop ``fit`` at the next step (a second one at once).

    Args:
        report_dir: where the run's timestamped directory goes (None: only ``.report``).
        batch_size: examples per step (default: from `data`, a `tf.data.Dataset`).
        warmup_steps: steps left out after the first.
        trace_steps: ``(start, stop)`` steps traced into ``<run dir>/train``, where Keras's go.
        tensorboard: scalars and pictures laid out as Keras's; needs a `report_dir` and TensorBoard.
        args: the run's flags, recorded in the report.
        log_steps: print step time every this many steps.
        stop_on_nan: stop ``fit`` soon after a non-finite loss (the run is ``diverged`` anyway)."""

    def __init__(
        self,
        name: str,
        *,
        report_dir: str | os.PathLike[str] | None = None,
        batch_size: int | None = None,
        data: Any = None,
        warmup_steps: int = DEFAULT_WARMUP_STEPS,
        trace_steps: tuple[int, int] | None = None,
        tensorboard: bool = False,
        args: Mapping[str, Any] | None = None,
        plot: bool = True,
        log_steps: int | None = None,
        stop_on_nan: bool = True,
    ) -> None:
        self.name = name
        self.report_dir = os.fspath(report_dir) if report_dir is not None else None
        self.args = dict(args or {})
        self.plot = plot
        self.extra: dict[str, Any] = {}
        self.compute: Compute | None = None
        self.context: RunContext | None = None
        self.diagnosis: DiagnosisSection | None = None
        self.tune: TuneSection | None = None
        self.anatomy: Anatomy | None = None
        if tensorboard and self.report_dir is None:
            raise ValueError(
                "profile(tensorboard=True) writes into the run's directory: give report_dir"
            )
        self._tensorboard = tensorboard
        self.timer = StepTimer(
            warmup_steps=warmup_steps, batch_size=batch_size, data=data, log_steps=log_steps
        )
        self._trace_steps = trace_steps
        self.trace: TraceWindow | None = None
        self.run_dir: str | None = None
        self.report: RunReport | None = None
        self.paths: dict[str, str] = {}
        self.write_error: str | None = None  # why the report files could not be written
        self._old_handlers: dict[int, Any] = {}
        self._stop = StopOnSignal()
        self._guard = LossGuard(stop=stop_on_nan)
        self._marks: list[tuple[str, float, float | None]] = []  # (stage, end, compile s)
        self._fits: list[tuple[float, float]] = []  # each prof.fit's (called, returned)

    def mark(self, stage: str, at: float | None = None, compile_s: float | None = None) -> None:
        """Ends stage `stage` now or at `at` (perf_counter); `compile_s`: its compile seconds."""
        at = time.perf_counter() if at is None else float(at)
        self._marks.append((str(stage), at, None if compile_s is None else float(compile_s)))

    @property
    def callbacks(self) -> list[Any]:
        """The callbacks for ``fit``: the signal stop, StepTimer, TraceWindow, the NaN guard."""
        return [cb for cb in (self._stop, self.timer, self.trace, self._guard) if cb is not None]

    def fit(self, model: Any, *args: Any, callbacks: Sequence[Any] = (), **kwargs: Any) -> Any:
        """``model.fit`` with these callbacks (+ `callbacks`), the whole call timed; its History."""
        try:
            with self.timer.around_fit():
                return model.fit(*args, callbacks=[*self.callbacks, *(callbacks or ())], **kwargs)
        finally:
            if self.timer.fit_span is not None:
                self._fits.append(self.timer.fit_span)

    def __enter__(self) -> Profile:
        interrupts.check()  # a signal dropped before training (in a gc callback) ends it here
        if not self._marks:  # the process up to here: its launch, your script before it
            self.mark(LAUNCH)
        if self.report_dir is not None:
            self.run_dir = new_run_dir(self.report_dir)
        if self._tensorboard and self.run_dir is not None:
            self.timer.scalars = Scalars(self.run_dir, self.timer.log_steps)
            self.timer.tensorboard_metrics = True
        if self._trace_steps is not None:
            start, stop = self._trace_steps
            if self.run_dir is not None:  # beside the scalars, in Keras's train run
                logdir = os.path.join(self.run_dir, TRAIN)
            else:
                logdir = os.path.join(self.report_dir or ".", "trace")
            self.trace = AnatomyWindow(logdir, start_step=start, stop_step=stop)
        if threading.current_thread() is threading.main_thread():
            for signum in interrupts.handled():  # every one the program handles
                self._old_handlers[signum] = signal.signal(signum, self._stop.on_signal)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self._old_handlers = {}
        # The report is not cut by a signal, nor by a second (an impatient Ctrl-C Ctrl-C).
        with interrupts.held(raise_after=False, firm="the report was being written"):
            self._finish(exc)
        if exc is None:  # one that came while it was written: raised now, the report said
            interrupts.check(toolkit_report=self.report, toolkit_run_dir=self.run_dir)
        elif isinstance(exc, KeyboardInterrupt):  # already going out as one: not again later
            interrupts.clear()

    def _finish(self, exc: BaseException | None) -> None:
        """Builds the report (partial when `exc`) and writes it."""
        try:
            self.timer.stop()
            cluster = self._cluster() if exc is None else None
            error = None if exc is None else one_line(exc)
            diverged = self._guard.found
            status = PARTIAL if error else DIVERGED if diverged else COMPLETE
            error = error or diverged  # a loss that went NaN: a failed run, not complete
            self.report = RunReport.from_callbacks(
                self.name,
                self.timer,
                trace=self.trace,
                args=self.args,
                status=status,
                error=error,
                extra=self.extra,
                compute=self.compute,
                context=self.context,
                diagnosis=self.diagnosis,
                tune=self.tune,
                cluster=cluster,
                anatomy=self.anatomy,
                process=self._process(),
            )
            if self.report.anatomy is None and isinstance(self.trace, AnatomyWindow):
                self.report.anatomy = self._anatomy(self.trace, self.report)
            if status == COMPLETE and not self.report.steps.timed_steps:  # nothing measured
                self.report.status = UNTIMED
                self.report.error = _untimed(self.report.steps, self.timer)
            self._final_scalars()
            self._viewing(self.report)
            if exc is not None:  # the caller that catches it can say what was kept, and where
                exc.toolkit_report = self.report  # type: ignore[union-attr]
                exc.toolkit_run_dir = self.run_dir  # type: ignore[union-attr]
            if self.run_dir is not None:
                try:
                    self.paths = self.report.write(self.run_dir, plot=self.plot)
                    _said_where(self.name, self.run_dir, self.paths)
                except OSError as e:  # a full disk, a directory gone: the report stays here
                    self.write_error = f"{e.strerror or e}"
                    with contextlib.suppress(OSError):
                        os.rmdir(self.run_dir)  # only if nothing made it there
        except Exception:
            if exc is None:
                raise
            # Never let a reporting failure hide the training error that got us here.
            logging.exception("could not write the report of the failed run %s", self.name)

    def _process(self) -> ProcessTime | None:
        """The process to now in stages; None where its start or the timer's clock is unknown."""
        if self.timer._clock is not time.perf_counter:
            return None
        fits = list(self._fits)
        if self.timer.fit_span is not None and self.timer.fit_span not in fits:
            fits.append(self.timer.fit_span)
        timed = [(BEFORE_FIT, c, None) for c, _ in fits] + [(FIT_CALL, r, None) for _, r in fits]
        marks = sorted([*self._marks, *timed], key=lambda m: m[1])  # stable: marked order
        last = AFTER_FIT if fits else IN_PROFILE  # a custom loop's: the block to the report
        marks.append((last, time.perf_counter(), None))
        return ProcessTime.of(process_start(), marks)

    def _anatomy(self, window: AnatomyWindow, report: Any) -> Anatomy | None:
        """The traced steps taken apart, fit to the untraced p50 (as traced: ``traced_phases``)."""
        if window.traced_steps is None and window.error is None:
            return None
        device = ""
        with contextlib.suppress(Exception):
            device = self.context.device.human_name if self.context and self.context.device else ""
        return reconcile(window.anatomy(untraced_s=report.steps.p50_s or None, device=device))

    def _cluster(self) -> ClusterView | None:
        """Each process's figures and weights' fingerprint at the chief in one gather, or None."""
        from toolkit import backend
        from toolkit.report._cluster import WorkerRow, cluster_view

        seam = backend.get()
        index, count = seam.processes()
        if count < 2:
            return None
        s = self.timer.summary()
        model = getattr(self.timer, "model", None)
        digest = seam.weights_digest(model) if model is not None else "0" * 24
        # float32 on the wire: the fingerprint goes as six exact 16-bit pieces.
        pieces = [int(digest[i : i + 4], 16) for i in range(0, 24, 4)]
        values = [s.total_steps, s.p50_s or 0.0, s.examples_per_sec or 0.0, *pieces]
        rows, prints = [], set()
        for i, got in enumerate(seam.gather_processes([float(v) for v in values])):
            weights = "".join(f"{int(p):04x}" for p in got[3:])
            prints.add(weights)
            rows.append(
                WorkerRow(
                    task_index=i,
                    is_chief=i == 0,
                    status=COMPLETE,
                    steps=int(got[0]),
                    p50_ms=got[1] * 1e3 or None,
                    examples_per_sec=got[2] or None,
                    weights=weights if model is not None else None,
                )
            )
        same = len(prints) == 1 if model is not None else None
        return dataclasses.replace(cluster_view(rows), process_index=index, same_weights=same)

    @staticmethod
    def _ledger_image(scalars: Scalars, report: RunReport, step: int) -> None:
        """The ledger's bar as a TensorBoard picture at the last step; none without matplotlib."""
        try:
            from toolkit.report._plot import ledger_png

            png = ledger_png(report.ledger, report.name)
        except ImportError:
            return
        scalars.image(
            LEDGER_TAG,
            png,
            step,
            "The whole fit's wall time as one bar: start-up, compile, steps, input, "
            "validation, callbacks, exit and other, adding up to the fit call "
            "(report.md has the table and the fixes).",
        )

    @staticmethod
    def _anatomy_image(scalars: Scalars, anatomy: Anatomy, step: int) -> None:
        """The step's anatomy as a TensorBoard picture (needs matplotlib and an anatomy)."""
        from toolkit.report._anatomy import anatomy_png_bytes

        png = anatomy_png_bytes(anatomy)
        if png is None:
            return
        scalars.image(
            ANATOMY_TAG,
            png,
            step,
            "Inside one traced training step, in ms per step: the slowest layers (forward + "
            "backward) and the step split into its phases (input, forward, backward, "
            "optimizer, metrics and loss, Keras between steps, other). report.md's "
            '"Inside the step" has the tables.',
        )

    def _viewing(self, report: RunReport) -> None:
        """Where the run's TensorBoard runs are, and the one command that shows them."""
        if self.run_dir is None or self.report_dir is None:
            return
        view = viewing_hint(self.report_dir)
        if report.trace is not None:
            window = report.trace.window  # relative names: a moved run still reads its trace
            files = tuple(os.path.relpath(f, self.run_dir) for f in window.files)
            window = dataclasses.replace(window, files=files)
            report.trace = dataclasses.replace(report.trace, window=window, view=view)
        scalars = self.timer.scalars
        if scalars is not None and scalars.runs:
            report.tensorboard = TensorBoardRuns(self.run_dir, tuple(scalars.runs), view)

    def _final_scalars(self) -> None:
        """MFU per epoch and the memory readings as TensorBoard scalars, then the files closed."""
        scalars, report = self.timer.scalars, self.report
        if scalars is None or report is None:
            return
        try:
            ends, step = {}, 0
            for e in self.timer.epochs:
                step += e.steps
                ends[e.epoch] = step
            compute = report.compute
            if compute is not None and compute.reliable_peak:  # else MFU moves with the load
                scalars.utilization(compute.flops_per_step, compute.peak_flops_per_s)
            if report.ledger and report.ledger.wall_s:
                self._ledger_image(scalars, report, step)
            if report.anatomy is not None:
                self._anatomy_image(scalars, report.anatomy, step)
            if report.ledger and report.ledger.memory is not None:
                _memory_scalars(scalars, report.ledger.memory)
                for r in report.ledger.memory.epochs:
                    at = ends.get(r.epoch, 0) if r.epoch is not None else 0
                    scalars.write(HOST_RSS, r.host_mb, at)
                    if r.device_peak_mb is not None:
                        scalars.write(DEVICE_PEAK, r.device_peak_mb, at)
            scalars.close()
        except Exception as e:  # noqa: BLE001 - the report matters more than the scalars
            logging.warning("TensorBoard scalars not finished: %s: %s", type(e).__name__, e)


def _memory_scalars(scalars: Any, memory: Any) -> None:
    """The ledger's memory readings as TensorBoard scalars: the most read at each step."""
    from toolkit.profiling.scalars import DEVICE_MB, HOST_MB

    most: dict[int, tuple[float, float | None]] = {}
    for s in memory.timeline:
        host, device = most.get(s.step, (0.0, None))
        if s.device_mb is not None:
            device = max(device or 0.0, s.device_mb)
        most[s.step] = (max(host, s.host_mb), device)
    for step, (host, device) in sorted(most.items()):
        scalars.write(HOST_MB, host, step)
        if device is not None:
            scalars.write(DEVICE_MB, device, step)


def _said_where(name: str, run_dir: str, paths: Mapping[str, str]) -> None:
    """Says where the report landed at INFO on the ``toolkit`` logger (stderr if unconfigured)."""
    log = std_logging.getLogger("toolkit")
    if log.level == std_logging.NOTSET and not log.hasHandlers():
        handler = std_logging.StreamHandler()
        handler.setFormatter(std_logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(std_logging.INFO)
    files = ", ".join(os.path.basename(p) for _, p in sorted(paths.items()))
    # folded to the terminal the line lands on (its handlers' streams; a log: as it is)
    streams = [getattr(h, "stream", None) for h in (*log.handlers, *std_logging.root.handlers)]
    columns = next((w for w in map(terminal.width, filter(None, streams)) if w), None)
    log.info("%s", terminal.fit(f"{name}: report in {run_dir} ({files})", columns))


def _untimed(steps: Any, timer: StepTimer) -> str:
    """Why a run that ended timed nothing, and what to change (the runner's flags)."""
    return (
        f"NoTimedSteps: all {steps.total_steps} step(s) were the first call, the "
        f"{timer.warmup_steps} warm-up step(s) or left out: nothing was timed; run more steps "
        "(--train_steps, --epochs) or lower --warmup_steps"
    )


def profile(name: str, **kwargs: Any) -> Profile:
    """Profiles a run in a ``with`` block; see :class:`Profile` for the arguments.

    ```python
    with profile("my-model", report_dir="runs", batch_size=64) as prof:
        prof.fit(model, dataset, epochs=3)  # or model.fit(..., callbacks=prof.callbacks)
    ```"""
    return Profile(name, **kwargs)
