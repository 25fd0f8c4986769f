"""Devices: detect, select, place, report where ops ran, preflight, runtime. Metal, CUDA, CPU.

The backend-neutral front, one job a module (``selection``, ``placement``, ``compatibility``,
``runtime``); each backend's own device calls and rules sit with its seam module
(``toolkit.backend._<name>.devices``), which these ask. Everything public is re-exported here:
``from toolkit import devices; devices.select("gpu")``."""

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
