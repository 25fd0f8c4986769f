"""JAX's anatomy reader (``toolkit.backend._jax.anatomy``): what it says of ops' time it could
not join to a layer. The reader itself runs in the anatomy tests on JAX; this is the part
only a GPU's trace reaches (XLA's command buffers), checked on its figures."""

from __future__ import annotations

from toolkit.backend._jax.anatomy import COMMAND_BUFFER, unjoined_notes


def test_unjoined_notes_name_command_buffers_apart_from_programs_without_metadata():
    """On an NVIDIA GPU XLA runs kernels as CUDA graphs, and the trace names their time by
    the buffer (``command_buffer_1``, the whole step of a small MLP on an H200): said with
    the flag that shows it layer by layer, apart from metadata the trace did not carry."""
    assert COMMAND_BUFFER == "command_buffer"
    (buffers,) = unjoined_notes(joined=0.0, unjoined=0.0, buffered=141.3)
    assert buffers.startswith("100% of the ops' time ran inside XLA's command buffers")
    assert "XLA_FLAGS=--xla_gpu_enable_command_buffer= " in buffers
    both = unjoined_notes(joined=51.0, unjoined=10.0, buffered=39.0)
    assert [n.split(" of the ops' time ")[0] for n in both] == ["39%", "10%"]
    assert both[1].endswith("metadata the trace did not carry: counted as other")


def test_unjoined_notes_say_nothing_under_five_percent():
    assert unjoined_notes(joined=96.0, unjoined=2.0, buffered=2.0) == []
    assert unjoined_notes(joined=0.0, unjoined=0.0, buffered=0.0) == []
