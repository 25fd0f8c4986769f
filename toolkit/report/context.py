"""RunContext: the facts about how a run was set up, typed, written once by the runner.

The records are plain dataclasses: the device, the preflight findings and the cluster are the
records their producers return (``toolkit.devices``' ``DeviceInfo`` and ``Finding``,
``toolkit.distribute``'s ``Cluster``; their modules import no framework at import time).
The report renders them (``RunReport.summary``, the Markdown's "Run" section); other tools read
them by attribute, not by dictionary key. In ``report.json`` (schema 2) they are the
``context`` object; a schema-1 report kept the same facts in ``extra`` and is read into a
RunContext on load (:meth:`RunContext.from_v1_extra`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core._device_types import DeviceInfo, Finding
from toolkit.core.errors import one_line
from toolkit.core.files import ReportError
from toolkit.distribute import Cluster

# What else this module offers; the rest is offered through toolkit.report.
__all__ = [
    "Resume",
    "Strategy",
]


@dataclasses.dataclass(frozen=True)
class Strategy(fields.Record):
    """The distribution strategy and the batch it splits. ``global_batch`` is what one step of
    the whole cluster consumes; each replica (device) gets ``per_replica_batch``, and each
    process ``per_process_batch``."""

    name: str = "default"
    replicas: int = 1
    global_batch: int | None = None
    per_replica_batch: int | None = None
    shard_policy: str = "data"
    data_service: str | None = None
    data_service_mode: str | None = None
    processes: int = 1  # data_parallel: the processes the replicas are spread over
    per_process_batch: int | None = None


@dataclasses.dataclass
class Resume(fields.Record):
    """Whether a run with a backup directory resumed, and from where. Filled in while ``fit``
    runs (the backup is restored when training begins), hence not frozen."""

    backup_dir: str
    resumed: bool = False
    steps_before: int = 0
    from_epoch: int | None = None
    steps_total: int | None = None


@dataclasses.dataclass
class RunContext(fields.Record):
    """How a run was set up: device, backend, precision, strategy, cluster, preflight
    findings, data, and whether it resumed from a backup.

    Attributes:
        device: where it trained; None when the run was not set up by the runner (a
            ``profile()`` around a user's own ``fit``).
        backend: the Keras backend (``tensorflow``, ``jax``, ``torch``).
        precision: the Keras precision policy.
        strategy: the distribution strategy.
        cluster: this process among the workers.
        preflight: the findings of the device/precision/XLA checks.
        dataset: what the data was, in words (``digits (1437 train / 360 validation ...)``).
        synthetic_data: trained on one batch of the real spec, repeated.
        smoke: a seconds-long smoke run.
        resume: the resume record when a backup directory was given."""

    WHERE = "context"

    device: DeviceInfo | None = None
    backend: str = "tensorflow"
    precision: str = "float32"
    strategy: Strategy = dataclasses.field(default_factory=Strategy)
    cluster: Cluster = fields.field(
        default_factory=Cluster, read=lambda v, at: Cluster.from_dict(fields.mapping(at, v))
    )
    preflight: tuple[Finding, ...] = ()
    dataset: str | None = None
    synthetic_data: bool = False
    smoke: bool = False
    resume: Resume | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> RunContext:
        """A report's ``context``.

        Raises:
            ReportError: a part of it this version cannot read, named (``context.device``)."""
        try:
            return super().from_dict(d or {}, where)
        except ReportError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise ReportError(f"field context is malformed ({one_line(e)})") from None

    @classmethod
    def from_v1_extra(cls, extra: Mapping[str, Any]) -> tuple[RunContext | None, dict[str, Any]]:
        """A schema-1 report's ``extra``, split into its RunContext (None when the run was not
        set up by the runner) and the entries that are not context."""
        keys = {f.name for f in dataclasses.fields(cls)}
        context = {k: v for k, v in extra.items() if k in keys}
        rest = {k: v for k, v in extra.items() if k not in keys}
        if not context:
            return None, rest
        return cls.from_dict(context), rest

    def lines(self) -> list[str]:
        """The context as summary lines (none for a bare ``profile()`` run)."""
        out = []
        s = self.strategy
        if self.device is not None:
            out.append(
                f"device: {self.device.label()} ({self.backend}), precision {self.precision}, "
                f"strategy {s.name} ({s.replicas} replica(s))"
                + (", synthetic data" if self.synthetic_data else "")
                + (f", data from the tf.data service {s.data_service}" if s.data_service else "")
            )
        if self.dataset:
            out.append(f"data: {self.dataset}")
        if s.processes > 1:
            out.append(
                f"cluster: process {self.cluster.task_index} of {s.processes}"
                + (" (chief)" if self.cluster.is_chief else "")
                + f", {s.replicas} devices in all, global batch {s.global_batch} "
                f"({s.per_process_batch} per process, {s.per_replica_batch} per device)"
            )
        elif self.cluster.num_workers > 1:
            out.append(
                f"cluster: worker {self.cluster.task_index} of {self.cluster.num_workers}"
                + (" (chief)" if self.cluster.is_chief else "")
                + f", global batch {s.global_batch} ({s.per_replica_batch} per replica)"
            )
        r = self.resume
        if r is not None and r.resumed:
            out.append(
                f"resumed from epoch {r.from_epoch} of the backup in {r.backup_dir} "
                f"({r.steps_before} steps done before; "
                f"{r.steps_total if r.steps_total is not None else '?'} in all)"
            )
        out += [f"preflight [{f.severity}] {f.code}: {f.message}" for f in self.preflight]
        return out
