"""Input pipelines: sources that return ``tf.data.Dataset``s, the one builder that orders
shuffle/cache/map/batch/prefetch and checks for traps, and a pipeline-only throughput benchmark."""

from toolkit.data.builder import PipelineWarning, describe_pipeline, infer_batch_size, pipeline
from toolkit.data.sources import (
    class_names,
    decode_image,
    digits,
    from_arrays,
    image_folder,
    normalize_images,
    parallel_generator,
    synthetic,
    tfds_dataset,
    tfrecord_parser,
    tfrecord_records,
    tfrecords,
    write_tfrecords,
)
from toolkit.data.throughput import PipelineBenchmark, benchmark

__all__ = [
    "PipelineBenchmark",
    "PipelineWarning",
    "benchmark",
    "class_names",
    "decode_image",
    "describe_pipeline",
    "digits",
    "from_arrays",
    "image_folder",
    "infer_batch_size",
    "normalize_images",
    "parallel_generator",
    "pipeline",
    "synthetic",
    "tfds_dataset",
    "tfrecord_parser",
    "tfrecord_records",
    "tfrecords",
    "write_tfrecords",
]
