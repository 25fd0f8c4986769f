"""Profiler activity shared between TraceWindow and StepTimer, without importing TensorFlow.

Steps that run while a profiler trace is active (or during which one starts or stops, which
costs tens of milliseconds to export) are not representative; StepTimer reads this state to leave
them out of its statistics and count them apart. Only plain Python values are read per step.
"""

from __future__ import annotations


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
