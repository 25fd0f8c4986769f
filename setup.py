"""Packaging for the Keras/TensorFlow training-performance toolkit.

TensorFlow comes from a different distribution per platform, chosen by environment markers:

* Linux and Intel macOS: ``tensorflow``.
* Apple silicon (``darwin``/``arm64``): ``tensorflow-macos``; the ``metal`` extra adds the
  ``tensorflow-metal`` PluggableDevice. tensorflow-macos stops at 2.16.2 (a shim over
  ``tensorflow==2.16.2``), and tensorflow-metal declares no TensorFlow requirement, so the
  bounds here pair 2.15/2.16 with tensorflow-metal 1.1.x; BUILD.md has the known-broken pairs.

Versions are bounded to what the tested matrix in BUILD.md covers.
"""

from setuptools import find_packages, setup

APPLE_SILICON = 'sys_platform == "darwin" and platform_machine == "arm64"'
NOT_APPLE_SILICON = 'sys_platform != "darwin" or platform_machine != "arm64"'
LINUX_X86 = 'sys_platform == "linux" and platform_machine == "x86_64"'
NOT_LINUX_X86 = 'sys_platform != "linux" or platform_machine != "x86_64"'
# array_record (ArrayRecord files) has no Windows wheels; Grain itself needs it only off Windows.
NOT_WINDOWS = 'sys_platform != "win32"'

# The project's home (its issues and docs hang off it); change it here if the project moves.
HOME = "https://github.com/keras-perf-toolkit/keras-perf-toolkit"


def _version() -> str:
    scope: dict[str, str] = {}
    with open("toolkit/core/version.py", encoding="utf-8") as f:
        exec(f.read(), scope)  # our own one-line version file
    return scope["__version__"]


def _readme() -> str:
    with open("README.md", encoding="utf-8") as f:
        return f.read()


setup(
    name="keras-perf-toolkit",
    version=_version(),
    description="Step-time profiling, input pipelines and measured tuning for Keras training.",
    long_description=_readme(),
    long_description_content_type="text/markdown",
    url=HOME,
    project_urls={
        "Source": HOME,
        "Documentation": f"{HOME}/blob/main/docs/guide.md",
        "Issues": f"{HOME}/issues",
        "Build and tested matrix": f"{HOME}/blob/main/BUILD.md",
    },
    license="Apache-2.0",
    license_files=["LICENSE"],
    keywords="keras tensorflow jax pytorch profiling performance tf.data benchmark mfu",
    python_requires=">=3.10",
    packages=find_packages(include=["toolkit", "toolkit.*", "recipes", "recipes.*"]),
    # the digits the default recipe trains on (UCI, CC BY 4.0: toolkit/data/sources.py)
    package_data={"toolkit.data": ["digits.csv.gz"]},
    install_requires=[
        f"tensorflow>=2.16,<2.22; {NOT_APPLE_SILICON}",
        f"tensorflow-macos>=2.15,<2.17; {APPLE_SILICON}",
        "tensorflow-datasets>=4.9,<5",
        "absl-py>=2.0",
        "numpy>=1.26",
        "psutil>=5.9",
        "tqdm>=4.60",  # progress bars on long work (doctor, tune, ops, backends)
        "rich>=13",  # tables on a terminal (Keras 3 draws its own summaries with it too)
        # No scikit-learn: the digits ship in the package. Installed, it costs every
        # `import keras` 0.6 s of CPU (Keras's scikit-learn wrapper loads it, and SciPy).
        # a lock around a cache's read-modify-write (tune, backends, matmul peak), so that
        # processes updating one cache at once all keep their entry (toolkit/core/files.py)
        "filelock>=3.12",
        # Not ml_dtypes 0.7.0, which TensorFlow, JAX and Keras all import: with NumPy 2.4 its
        # import takes 0.88 s against 0.015 s for 0.6.0 (measured 2026-12-02, perf: NumPy's
        # PyUFunc_AddLoop comparing each new loop against every loop added before it). Every
        # recipe, tune round and fresh process pays it. 0.6.0 has every name the frameworks use.
        "ml_dtypes>=0.5.1,!=0.7.0",
    ],
    extras_require={
        "metal": [f"tensorflow-metal>=1.1,<1.2; {APPLE_SILICON}"],
        "report": ["matplotlib>=3.7"],
        # google-crc32c: the C CRC of the event files StepTimer writes (TensorBoard's own CRC
        # is pure Python, ~50x slower: toolkit/profiling/scalars.py).
        "profile": ["tensorboard>=2.16", "xprof>=2.19", "google-crc32c>=1.5"],
        "jax": ["jax>=0.4.34"],
        # Linux x86-64 gets PyTorch's CUDA build from PyPI unless a CPU build is asked for:
        # see BUILD.md for the CPU, CUDA and Mac installs.
        "torch": ["torch>=2.3"],
        # Grain pipelines (toolkit.data.pipeline(..., loader="grain"), --data_loader=grain):
        # JAX's data loader, which Keras 3's fit reads on every backend.
        # array_record: ArrayRecord files (toolkit.data.write_array_records, ArrayRecords).
        "grain": ["grain>=0.2.18", f"array_record>=0.8; {NOT_WINDOWS}"],
        "test": [
            "pytest>=8",
            # Two test workers (`make test`): most tests wait on the processes they start, so
            # two halve the suite's time on a 2-core machine.
            "pytest-xdist>=3.6",
            "ruff>=0.5",
            # A VT100 emulator: the screen tests read what a terminal shows (tests/terminal.py).
            "pyte>=0.8",
            "matplotlib>=3.7",
            # tf_keras must match the TensorFlow minor version; CI runs the profiling tests
            # a second time under TF_USE_LEGACY_KERAS=1 with it.
            f"tf-keras>=2.16,<2.22; {NOT_APPLE_SILICON}",
            f"tf-keras>=2.16,<2.17; {APPLE_SILICON}",
            # The report side and StepTimer are tested in a process where TensorFlow cannot
            # be imported, with Keras on JAX (an 85 MB CPU wheel); the profiling contracts run
            # under Keras 3 on JAX and on PyTorch too. torch 2.13.0's CPU build (190 MB) is
            # what a Linux x86-64 CI machine installs from its local wheel cache; elsewhere any
            # recent torch. The pin stays (checked 2026-11-28): 2.13.0+cpu is the newest CPU
            # build the registries here serve. 2.14.1 there is the CUDA build (555 MB, and its
            # cuda-toolkit, cuDNN, NCCL and Triton requirements add gigabytes to every CI
            # install, for a machine with no GPU), and this machine's pip constraints stop
            # at 2.14.1, so 2.15.0 does not install.
            "jax>=0.4.34",
            f"torch==2.13.0; {LINUX_X86}",
            f"torch>=2.3; {NOT_LINUX_X86}",
            # The Grain pipelines are tested with real Grain on all three backends.
            "grain>=0.2.18",
            f"array_record>=0.8; {NOT_WINDOWS}",
        ],
    },
    entry_points={"console_scripts": ["keras-perf=toolkit.cli:main"]},
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Environment :: Console",
        "Environment :: GPU :: NVIDIA CUDA",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Operating System :: MacOS",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Software Development :: Testing",
        "Topic :: System :: Benchmark",
    ],
)
