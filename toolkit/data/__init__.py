"""Input pipelines: tf.data sources, the one builder (ordering shuffle/cache/map/batch/prefetch and
checking for traps), a pipeline-only benchmark; without TensorFlow, arrays in batches (a
``PyDataset``); Grain pipelines by the same rules (``loader="grain"``; ArrayRecord files)."""

from toolkit.data._array_record import ArrayRecords, write_array_records
from toolkit.data.arrays import ArraySource, array_batches, resize_images
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
)
from toolkit.data.tfrecord import (
    check_tfrecords,
    find_unreadable_tfrecord,
    tfrecord_parser,
    tfrecord_records,
    tfrecords,
    write_tfrecords,
)
from toolkit.data.throughput import PipelineBenchmark, benchmark

__all__ = [
    "ArrayRecords",
    "ArraySource",
    "PipelineBenchmark",
    "PipelineWarning",
    "array_batches",
    "benchmark",
    "check_tfrecords",
    "class_names",
    "decode_image",
    "describe_pipeline",
    "digits",
    "find_unreadable_tfrecord",
    "from_arrays",
    "image_folder",
    "infer_batch_size",
    "normalize_images",
    "parallel_generator",
    "pipeline",
    "resize_images",
    "synthetic",
    "tfds_dataset",
    "tfrecord_parser",
    "tfrecord_records",
    "tfrecords",
    "write_array_records",
    "write_tfrecords",
]
