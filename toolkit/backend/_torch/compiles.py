"""PyTorch's compiles, for the ledger: TorchDynamo's counters, where Keras compiles the step.

Keras's PyTorch trainer runs the step eagerly unless ``jit_compile=True`` (``torch.compile``).
TorchDynamo's ``guard_failures`` (each recompile's cause) is read at the ledger's polls, only where
``torch._dynamo`` was imported. Keras reads each batch between steps: the ledger times the gaps."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from toolkit.backend._common import CompileEvent, CompileWatch


def _dynamo() -> Any:
    return sys.modules.get("torch._dynamo.utils")


def _failures(utils: Any) -> list[str]:
    try:
        return [str(r) for reasons in utils.guard_failures.values() for r in reasons]
    except Exception:  # noqa: BLE001
        return []


class DynamoCounters(CompileWatch):
    """TorchDynamo's guard failures at the ledger's polls: a frame recompiles only after its guards
    failed, so each is a recompile with its reason (a first compile is a first call, counted)."""

    signal = "PyTorch: TorchDynamo's guard failures (jit_compile=True)"
    input_seen = "between"

    def __init__(self, model: Any = None, clock: Callable[[], float] | None = None) -> None:
        super().__init__(model, clock)
        self._reasons = 0

    def start(self) -> None:
        utils = _dynamo()
        if utils is not None:
            self._reasons = len(_failures(utils))

    def poll(self, where: str) -> None:
        utils = _dynamo()
        if utils is None:
            return
        reasons = _failures(utils)
        fresh, self._reasons = reasons[self._reasons :], len(reasons)
        function = "evaluate" if where.startswith("validation") else "train"
        for cause in fresh:
            self.events.append(CompileEvent(function, cause=cause, where=where))
