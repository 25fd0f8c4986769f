"""The whole ``fit`` call in words: start-up + steps + exit, the parts adding up to it.

Why it is in the report: StepTimer times train begin to train end, but a ``fit`` call costs more
than that, before its first step (the data adapter, building, the callbacks' train begin, the
input iterator) and after its last (on TensorFlow, destroying the tf.data iterator, which took
seconds with tf.data's autotune model on). That is wall time every user pays and no step shows.
"""

from __future__ import annotations

from toolkit.core.stats import format_s
from toolkit.profiling._timing import FitCall

# An exit this long, and this share of the call, gets its likely cause named.
SLOW_EXIT_S, SLOW_EXIT_SHARE = 0.5, 0.05
SLOW_EXIT_HINT = (
    "on TensorFlow a slow exit is the tf.data iterator's teardown waiting for the autotune "
    "thread; options.autotune.enabled = False on the dataset ends it"
)


def fit_call_line(parts: FitCall) -> str:
    """``fit call: 12.3 s = start-up 1.20 s + steps 10.1 s + exit 1.00 s``. Counted from
    train begin, and without the exit, when nothing timed the call itself
    (``model.fit(callbacks=prof.callbacks)`` rather than ``prof.fit``)."""
    head = "fit call" if parts.timed else "fit from train begin"
    line = (
        f"{head}: {format_s(parts.whole_s)} = start-up {format_s(parts.start_up_s)} + steps "
        f"{format_s(parts.steps_s)}"
    )
    if parts.exit_s is not None:
        line += f" + exit {format_s(parts.exit_s)}"
        if parts.exit_s >= SLOW_EXIT_S and parts.exit_s >= SLOW_EXIT_SHARE * parts.whole_s:
            line += f" ({SLOW_EXIT_HINT})"
        return line
    if parts.timed:
        return f"{line} (fit raised before its end)"
    return f"{line} (exit not timed: call fit through profile().fit)"
