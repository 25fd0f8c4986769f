"""The private entry point of the search's fresh processes: ``python -m toolkit._child SPEC
OUT``. SPEC is a JSON file of a ``toolkit.search._processes.ChildSpec`` (the target, backend,
device, settings, and the job: one run's figures or one backend's ``tune`` search); the result
is written to OUT as JSON, atomically. It has no options of its own: what to measure is the
spec, which only the search writes. An error ends it with one ``error:`` line on stderr (the
parent reports that line) and status 1, or 2 for a spec it cannot read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

__all__: list[str] = []  # the search's own; nothing here is API


def _job(spec: Any, recipe_flags: list[str]) -> dict[str, Any]:
    from toolkit import _verbs
    from toolkit.core.files import jsonable

    _what, _flags, config, target, data = _verbs.resolve_target(
        spec.target.recipe, spec.target.model_fn, recipe_flags
    )
    if spec.job == "figures":
        from toolkit.search.workload import workload

        with workload(target, data, config) as work:
            # Your model's settings come as flags: applied as a recompile would (a recipe's
            # config carries them already).
            candidate = work.candidate_of(config) if work.is_model and spec.settings else None
            return jsonable(
                work.figures(spec.steps, count_flops=config.count_flops, candidate=candidate)
            )
    from toolkit.search.tune import tune

    result = tune(target, data, config=config, budget_s=spec.budget_s)
    return {**result.to_dict(), "batch_size": result.batch_size}


def main(argv: Sequence[str]) -> int:
    from toolkit.search._processes import ChildSpec

    if len(argv) != 3:
        print("error: python -m toolkit._child SPEC OUT is the search's own", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            spec = ChildSpec.from_json(f.read())
    except (OSError, ValueError) as e:
        print(f"error: {argv[1]}: {e}", file=sys.stderr)
        return 2
    from absl import flags

    from toolkit import app
    from toolkit.backend import BackendError
    from toolkit.core.files import atomic_write
    from toolkit.devices import runtime
    from toolkit.report import ReportError

    try:
        recipe_flags = app.start(spec.recipe_flags(), recipe=spec.target.recipe or "model_fn")
        if spec.job == "tune":  # as the tune verb: TensorFlow first, its C++ lines held back
            runtime.load_tensorflow()
        result = _job(spec, recipe_flags)
    except (BackendError, ReportError, ValueError, FileNotFoundError, flags.Error) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    atomic_write(argv[2], json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
