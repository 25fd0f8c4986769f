"""TFRecord parsing: one record at a time vs a whole batch in one op (batch, then parse).

Writes ``--records`` ``(features, label)`` records (``--features`` float32 each) over 4 files,
then iterates each pipeline alone with ``toolkit.data.benchmark``:
  * baseline: ``tfrecords(...)`` parses each record (``parse_single_example``), then batches;
  * toolkit: ``pipeline(tfrecord_records(...), batch_map=tfrecord_parser(...))`` batches the
    serialized records and parses them with one ``parse_example`` per batch.
Prints the ratio.

    python benchmarks/pipeline_tfrecord.py [--records 50000 --features 64]
"""

from __future__ import annotations

import argparse
import tempfile

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=128)
    args = parser.parse_args()

    import numpy as np

    from toolkit import data

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.records, args.features)).astype("float32")
    y = rng.integers(0, 10, size=args.records)
    with tempfile.TemporaryDirectory() as root:
        data.write_tfrecords(root, x, y, num_shards=4)
        pattern = f"{root}/*.tfrecord"
        shape = (args.features,)
        per_record = data.pipeline(data.tfrecords(pattern, shape), args.batch_size, shuffle=False)
        vectorized = data.pipeline(
            data.tfrecord_records(pattern),
            args.batch_size,
            shuffle=False,
            batch_map=data.tfrecord_parser(shape),
        )
        batches = args.records // args.batch_size - 1
        results = {}
        for name, ds in (("baseline", per_record), ("toolkit", vectorized)):
            results[name] = data.benchmark(ds, batches, args.batch_size, verbose=False)
            print(f"# {name}: {results[name]}")
    b, t = results["baseline"].total_s, results["toolkit"].total_s
    print(speedup_line(f"parse after batch vs per record ({args.records} records)", b, t))


if __name__ == "__main__":
    main()
