"""Progress on long work: a bar on a terminal, lines in a log, on stderr (``> table.md`` clean)."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = [
    "bar",
    "say",
]

OFF, BAR, LINES = "off", "bar", "lines"
_FALSE = ("0", "off", "false", "no", "quiet")
_TRUE = ("1", "on", "true", "yes", "bar")


def mode() -> str:
    """``"bar"`` (stderr a terminal, ``TOOLKIT_PROGRESS=1``), ``"lines"`` or ``"off"`` (``=0``)."""
    value = os.environ.get("TOOLKIT_PROGRESS", "").strip().lower()
    if value in _FALSE:
        return OFF
    if value in _TRUE:
        return BAR
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return BAR if isatty is not None and isatty() else LINES
    except ValueError:  # a closed stream
        return LINES


def say(text: str) -> None:
    """One line of what is being done now, on stderr (above any bar); silent when off."""
    shown = mode()
    if shown == OFF:
        return
    from toolkit.core import terminal

    text = terminal.fit(text, terminal.width(sys.stderr))  # a terminal's width; a log: whole
    if shown == BAR:
        from tqdm.std import tqdm

        tqdm.write(text, file=sys.stderr)
    else:
        print(text, file=sys.stderr, flush=True)


class Bar:
    """A tqdm bar on a terminal, nothing elsewhere; five redraws a second at most, so cheap."""

    def __init__(
        self,
        total: float | None,
        desc: str,
        unit: str = "it",
        *,
        enabled: bool = True,
        **kwargs: Any,
    ) -> None:
        self._bar: Any = None
        if enabled and mode() == BAR:
            from tqdm.std import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                file=sys.stderr,
                leave=False,
                dynamic_ncols=True,
                mininterval=0.2,
                **kwargs,
            )

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def update(self, n: float = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def skip_elapsed(self) -> None:
        """Leaves the time since the last redraw (a compile) out of the rate: tqdm's ``unpause``."""
        if self._bar is not None:
            self._bar.unpause()

    def advance_to(self, done: float) -> None:
        """Moves the bar to `done` (never back): for a bar of seconds or of a running total."""
        if self._bar is not None and done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def reset(self, total: float | None, desc: str, bar_format: str | None = None) -> None:
        """Restarts from zero of `total` (None: unknown) under `desc`; count, time and rate anew."""
        if self._bar is not None:
            self._bar.set_description_str(desc, refresh=False)
            self._bar.total = total  # tqdm's reset keeps the old total when given None
            if bar_format is not None:
                self._bar.bar_format = bar_format
            self._bar.reset(total=total)

    def describe(self, text: str, refresh: bool = True) -> None:
        """A new label (a stage, an epoch): redrawn now unless `refresh` is off."""
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=refresh)

    def keep(self, text: str) -> None:
        """A line above the bar that stays once the bar is gone (Keras's line per epoch)."""
        if self._bar is not None:
            from tqdm.std import tqdm

            tqdm.write(text, file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bar(total: float | None, desc: str, unit: str = "it", **kwargs: Any) -> Bar:
    """A :class:`Bar` of `total` `unit`s described by `desc` (``enabled=False``: none)."""
    return Bar(total, desc, unit, **kwargs)
