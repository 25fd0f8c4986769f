"""What the callbacks share with each other and with the code that sets up a run, without
importing any framework: the profiler's activity and the fused-steps mark on a model.

Steps that run while a profiler trace is active (or during which one starts or stops, which
costs tens of milliseconds to export) are not representative; StepTimer reads this state to leave
them out of its statistics and count them apart. Only plain Python values are read per step.
"""

from __future__ import annotations

__all__: list[str] = []

# Set on a model whose every Keras batch runs this many training steps (fused in one call).
FUSED_STEPS_ATTR = "_toolkit_fused_steps"


class ProfilerState:
    """Whether a trace is running, and a counter bumped at every start and stop."""

    __slots__ = ("active", "generation")

    def __init__(self) -> None:
        self.active = False
        self.generation = 0

    def started(self) -> None:
        self.active = True
        self.generation += 1

    def stopped(self) -> None:
        self.active = False
        self.generation += 1


PROFILER = ProfilerState()
