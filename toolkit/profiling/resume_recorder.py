"""ResumeRecorder: whether a run resumed from a ``BackupAndRestore`` backup, and from where.

Place it after ``BackupAndRestore``; it fills in any object with ``resumed``, ``steps_before``,
``from_epoch`` (0-based) and ``steps_total`` (the runner's ``toolkit.report.context.Resume``)."""

from __future__ import annotations

from typing import Any

from toolkit.core import compat

__all__ = ["ResumeRecorder"]


class ResumeRecorder(compat.keras().callbacks.Callback):
    """Reads the optimizer's step count once at the start (right after the restore) and at the
    end, and the first epoch this process ran: no read per step."""

    def __init__(self, resume: Any) -> None:
        super().__init__()
        self.resume = resume

    def _steps(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs: Any = None) -> None:
        self.resume.steps_before = self._steps()
        self.resume.resumed = self.resume.steps_before > 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.resume.from_epoch is None:
            self.resume.from_epoch = epoch

    def on_train_end(self, logs: Any = None) -> None:
        self.resume.steps_total = self._steps()
