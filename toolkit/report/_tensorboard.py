"""The report's TensorBoard section: where the run's scalars went and how to view them, as a
record (``report.json``'s ``tensorboard``), and its one line."""

from __future__ import annotations

import dataclasses
from typing import Any

from toolkit.core import _fields as fields


def _runs(runs: Any, where: str) -> tuple[str, ...]:
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise fields.bad(where, runs, "a list of run names")
    return tuple(runs)


@dataclasses.dataclass(frozen=True)
class TensorBoardRuns(fields.Record):
    """report.json's ``tensorboard``: the scalars' runs under `logdir`, `view` (shell-quoted)."""

    WHERE = "tensorboard"

    logdir: str
    runs: tuple[str, ...] = fields.field(read=_runs)
    view: str

    def line(self) -> str:
        """``tensorboard: runs train, validation in <dir>; view with `<command>` ...``."""
        return (
            f"tensorboard: runs {', '.join(self.runs)} in {self.logdir}; "
            f"view with `{self.view}` (Scalars tab)"
        )

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> TensorBoardRuns | None:
        """The record of ``report.json``'s section (None where none), each field checked."""
        return None if d is None else super().from_dict(d, where)
