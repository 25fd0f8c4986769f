"""``placement``: where each op of one training step of a recipe ran (its device, and the
ops that fell back to the CPU)."""

from __future__ import annotations

import argparse
from typing import Any

from toolkit.verbs._options import add_backend, backend_name, check_device

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "placement"
HELP = "where each op of one training step ran"
DESCRIPTION = None
LOADS_TENSORFLOW = True
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    add_backend(p)
    p.add_argument(
        "--recipe", default="mlp", help="a recipe under recipes/ (doctor --help lists them)"
    )
    p.add_argument("--device", default="auto", help="auto, cpu, gpu, cuda, metal (mps)[:index]")
    p.add_argument("--batch_size", type=int, default=32)


def check(args: argparse.Namespace) -> None:
    from toolkit.runner.config import check_number

    check_number("--batch_size", args.batch_size, integer=True, least=1)
    check_device(args.device)  # its spelling; whether it is here, once TensorFlow sees it


def run(args: argparse.Namespace) -> int:
    from toolkit import app, devices
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig

    recipe = app.load_recipe(args.recipe)
    device = devices.select(args.device)
    task = recipe.build_task()
    model = task.build_model()
    model.compile(optimizer="adam", loss=task.loss, metrics=list(task.metrics))
    # The runner's own input: tf.data, array batches (a PyDataset) or Grain (--data_loader).
    batch = _first_batch(train.input_pipeline(task, TrainConfig(batch_size=args.batch_size)))
    report = devices.placement_report(
        lambda: model.train_on_batch(*batch), gpu_selected=device.is_gpu
    )
    print(f"placement of one {args.recipe} training step on {device} (--backend={backend_name()})")
    print(report.render())
    return 0


def _first_batch(pipeline: Any) -> Any:
    """The first batch of a tf.data pipeline, a PyDataset or any iterable of batches."""
    if hasattr(pipeline, "as_numpy_iterator"):
        return next(pipeline.as_numpy_iterator())
    if hasattr(pipeline, "__getitem__"):
        return pipeline[0]
    return next(iter(pipeline))
