"""Run reports: the record (:class:`RunReport`, JSON + Markdown + PNG), the typed run context,
comparing two runs, merging a multi-worker run's reports, and the step's anatomy in lines.
Imports neither TensorFlow nor Keras. The schema is documented in ``docs/report.md``."""

from toolkit.report._anatomy import anatomy_lines
from toolkit.report.comparison import Comparison, compare
from toolkit.report.context import RunContext
from toolkit.report.merge import merge_reports, render_merged
from toolkit.report.run_report import (
    COMPLETE,
    DIVERGED,
    PARTIAL,
    SCHEMA_VERSION,
    ReportError,
    RunReport,
)

__all__ = [
    "COMPLETE",
    "DIVERGED",
    "PARTIAL",
    "SCHEMA_VERSION",
    "Comparison",
    "ReportError",
    "RunContext",
    "RunReport",
    "anatomy_lines",
    "compare",
    "merge_reports",
    "render_merged",
]
