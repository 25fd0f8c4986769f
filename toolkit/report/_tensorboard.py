"""The report's TensorBoard section: where the run's scalars went and how to view them, as a
record (``report.json``'s ``tensorboard``), and its one line."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolkit.core._fields import field_said


@dataclasses.dataclass(frozen=True)
class TensorBoardRuns:
    """The scalars' runs (``train``, ``validation``) under `logdir`, and the command that
    views them (`view`, quoted for the user's shell)."""

    logdir: str
    runs: tuple[str, ...]
    view: str

    def line(self) -> str:
        """``tensorboard: runs train, validation in <dir>; view with `<command>` ...``."""
        return (
            f"tensorboard: runs {', '.join(self.runs)} in {self.logdir}; "
            f"view with `{self.view}` (Scalars tab)"
        )

    def to_dict(self) -> dict[str, object]:
        return {"logdir": self.logdir, "runs": list(self.runs), "view": self.view}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> TensorBoardRuns | None:
        """The record of ``report.json``'s section (None where it has none). Raises
        ValueError naming the field whose value it cannot show."""
        if d is None:
            return None
        if not isinstance(d, Mapping):
            raise ValueError(field_said("tensorboard", d, "an object or null"))
        for name in ("logdir", "view"):
            if not isinstance(d.get(name), str):
                raise ValueError(field_said(f"tensorboard.{name}", d.get(name), "a string"))
        runs = d.get("runs")
        if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
            raise ValueError(field_said("tensorboard.runs", runs, "a list of run names"))
        return cls(d["logdir"], tuple(runs), d["view"])
