"""What the callbacks share with each other and with the code that sets up a run, without
importing any framework: the profiler's activity and the fused-steps mark on a model.

Steps that run while a profiler trace is active (or during which one starts or stops, which
costs tens of milliseconds to export) are not representative; StepTimer reads this state to leave
them out of its statistics and count them apart. Only plain Python values are read per step."""

from __future__ import annotations

__all__: list[str] = []

# Set on a model whose every Keras batch runs this many training steps (fused in one call).
FUSED_STEPS_ATTR = "_toolkit_fused_steps"


class ProfilerState:
    """Whether a trace is running, a counter bumped at every start and stop, and which of those
    came after the device had finished its queue.

    ``synced[g]`` is ``(active before, perf_counter time)`` for a start or stop (the one that
    made generation ``g``) that waited for the device first: every step dispatched before it
    had ended by that time, whenever an asynchronous backend's batch-end hook got to say so."""

    __slots__ = ("active", "generation", "synced")
    KEEP = 64  # synced events remembered (two per trace window)

    def __init__(self) -> None:
        self.active = False
        self.generation = 0
        self.synced: dict[int, tuple[bool, float]] = {}

    def _changed(self, active: bool, synced_at: float | None) -> None:
        before, self.active = self.active, active
        self.generation += 1
        if synced_at is not None:
            self.synced[self.generation] = (before, synced_at)
            for old in sorted(self.synced)[: -self.KEEP]:
                del self.synced[old]

    def started(self, synced_at: float | None = None) -> None:
        self._changed(True, synced_at)

    def stopped(self, synced_at: float | None = None) -> None:
        self._changed(False, synced_at)


PROFILER = ProfilerState()
