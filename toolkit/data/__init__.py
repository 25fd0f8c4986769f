"""Input pipelines: sources and the one builder that orders shuffle/cache/batch/prefetch."""

from toolkit.data.pipeline import pipeline
from toolkit.data.sources import digits, from_arrays

__all__ = ["digits", "from_arrays", "pipeline"]
