"""What callbacks and run setup share, importing no framework: profiler activity, fused steps.

Steps in or around a trace are unrepresentative: StepTimer counts them apart, cheaply per step."""

from __future__ import annotations

__all__: list[str] = []

# Set on a model whose every Keras batch runs this many training steps (fused in one call).
FUSED_STEPS_ATTR = "_toolkit_fused_steps"


class ProfilerState:
    """Whether a trace runs, a counter bumped at every start and stop, and which of those came
    after the device finished its queue: ``synced[g]`` is ``(active before, perf_counter time)``,
    by which every step dispatched before had ended, whenever an async backend's hook said so."""

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
