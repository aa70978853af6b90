"""The local tritonserver's environment: a tree named by TRITONPIPELINE_SERVER_HOME, and the numpy warning.
Here the pure tests; those on real components are in tests/component/test_server_env.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonpipeline.local.tritonserver import HOME_ENV, TritonError, numpy_warning, server_home


def test_numpy_warning_only_for_numpy_2() -> None:
    assert numpy_warning(None) is None
    assert numpy_warning("1.26.4") is None
    message = numpy_warning("2.2.6")
    assert message is not None and "numpy 2.2.6" in message and "numpy<2" in message


def test_server_home_refuses_a_tree_without_tritonserver(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "backends").mkdir()
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    with pytest.raises(TritonError, match=r"not a tritonserver tree \(missing bin/tritonserver\)"):
        server_home()
