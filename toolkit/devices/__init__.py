"""Devices: detect, select, place, report where ops ran, preflight, runtime. Metal, CUDA, CPU.

The backend-neutral front, one job a module; each backend's own device calls and rules sit with
its seam module (``toolkit.backend._<name>.devices``), which these ask:

* ``selection``: :func:`detect` (CPUs and GPUs as :class:`DeviceInfo`, Metal told from CUDA),
  :func:`resolve`, and :func:`select` (as ML Compute's ``set_mlc_device``), which each
  backend makes its own way;
* ``placement``: :func:`on`, :func:`augmentation_device`, :func:`placement_report`;
* ``compatibility``: :func:`preflight` (the backend's rules, then the device's precision and
  XLA rules; TensorFlow's :data:`METAL_COMPATIBILITY` table), :func:`recommend_precision`;
* ``runtime``: :func:`configure_threads`.

Everything public is re-exported here: ``from toolkit import devices; devices.select("gpu")``."""

from toolkit.devices.compatibility import (
    METAL_COMPATIBILITY,
    Finding,
    preflight,
    recommend_precision,
)
from toolkit.devices.placement import PlacementReport, augmentation_device, on, placement_report
from toolkit.devices.runtime import configure_threads
from toolkit.devices.selection import (
    DeviceError,
    DeviceInfo,
    detect,
    framework_device,
    parse_device_spec,
    resolve,
    select,
)

__all__ = [
    "METAL_COMPATIBILITY",
    "DeviceError",
    "DeviceInfo",
    "Finding",
    "PlacementReport",
    "augmentation_device",
    "configure_threads",
    "detect",
    "framework_device",
    "on",
    "parse_device_spec",
    "placement_report",
    "preflight",
    "recommend_precision",
    "resolve",
    "select",
]
