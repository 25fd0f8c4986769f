"""RunContext: the facts about how a run was set up, typed, written once by the runner. The
device, preflight findings and cluster are their producers' records, read by attribute; in
``report.json`` they are ``context``, and a schema-1 report's ``extra`` is read into one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core._device_types import DeviceInfo, Finding
from toolkit.core.errors import one_line
from toolkit.core.files import ReportError
from toolkit.distribute import Cluster

__all__ = [  # what else this module offers; the rest is offered through toolkit.report
    "Resume",
    "Strategy",
]


@dataclasses.dataclass(frozen=True)
class Strategy(fields.Record):
    """The strategy and the batch it splits: global (a cluster's step), per replica, per process."""

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
    """Whether a run with a backup directory resumed, and from where; filled in during ``fit``."""

    backup_dir: str
    resumed: bool = False
    steps_before: int = 0
    from_epoch: int | None = None
    steps_total: int | None = None


@dataclasses.dataclass
class RunContext(fields.Record):
    """How a run was set up.

    Attributes:
        device: where it trained; None for a ``profile()`` around your own ``fit``.
        preflight: the findings of the device/precision/XLA checks.
        synthetic_data: trained on one batch of the real spec, repeated.
        resume: set when a backup directory was given."""

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
            ReportError: a part this version cannot read, named."""
        try:
            return super().from_dict(d or {}, where)
        except ReportError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise ReportError(f"field context is malformed ({one_line(e)})") from None

    @classmethod
    def from_v1_extra(cls, extra: Mapping[str, Any]) -> tuple[RunContext | None, dict[str, Any]]:
        """A schema-1 report's ``extra`` as its RunContext (None: no runner) and the rest."""
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
