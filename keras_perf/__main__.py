"""``python -m keras_perf <verb>``: see ``keras_perf.cli`` for the verbs."""

import sys

from keras_perf.cli import main

if __name__ == "__main__":
    sys.exit(main())
