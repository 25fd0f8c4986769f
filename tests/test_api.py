"""The public API: every exported name exists and is documented; importing is cheap."""

from __future__ import annotations

import toolkit

from .helpers import run_python


def test_every_public_name_exists_and_is_documented():
    assert toolkit.__all__ == sorted(toolkit.__all__)
    for name in toolkit.__all__:
        obj = getattr(toolkit, name)
        if name != "__version__":
            assert (obj.__doc__ or "").strip(), f"toolkit.{name} has no docstring"


def test_unknown_name_is_an_attribute_error():
    try:
        toolkit.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_the_package_and_report_does_not_load_tensorflow():
    code = (
        "import sys, toolkit, toolkit.report, toolkit.core.stats, toolkit.__main__; "
        "print('tensorflow' in sys.modules)"
    )
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_data_api_names_exist_and_are_documented():
    from toolkit import data

    assert data.__all__ == sorted(data.__all__)
    for name in data.__all__:
        assert (getattr(data, name).__doc__ or "").strip(), f"toolkit.data.{name} has no docstring"
