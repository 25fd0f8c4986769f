"""PyTorch's compiles, for the ledger: TorchDynamo's counters, where Keras compiles the step.

Keras's PyTorch trainer runs the step eagerly unless ``jit_compile=True``, which hands it to
``torch.compile``. TorchDynamo keeps why a compiled frame's guards failed (``guard_failures``:
the cause of each recompile, a new input shape or dtype). It is read at the ledger's polls
(epoch and validation ends), never per step, and only where ``torch._dynamo`` was imported:
an eager fit compiles nothing and costs nothing here.

Keras fetches each batch in its loop, between one step's end and the next step's begin: the
ledger times those gaps as the input."""

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
    """PyTorch: TorchDynamo's guard failures, read at the ledger's polls. A compiled frame is
    compiled again only after its guards failed, so each new failure is a recompile, with
    its reason; a function's first compile is its first call, which the ledger counts."""

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
