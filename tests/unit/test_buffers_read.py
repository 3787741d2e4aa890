"""A buffer's end values read back from a rank's result file: a non-finite value is written as a
string (``"nan"``), and the judge's comparison of the copies' end buffers reads it as the float.
A MindSpore BatchNorm net whose running variance was NaN in both copies ended its job in a
numpy type error before."""

from __future__ import annotations

import json

import numpy as np

from sweep.analysis.trace import final_buffers
from sweep.io import read_array, read_floats, write_json


def test_non_finite_buffer_values_written_as_strings_are_read_back_as_floats(tmp_path):
    path = tmp_path / "rank_0.json"
    write_json(path, {"bn.moving_variance": [float("nan"), 1.0, float("inf")], "bn.moving_mean": [0.5, -0.25]})
    held = json.loads(path.read_text())
    read = {k: read_array(v) for k, v in held.items()}
    assert read["bn.moving_variance"].dtype == np.float64
    assert np.isnan(read["bn.moving_variance"][0]) and read["bn.moving_variance"][2] == np.inf
    assert read["bn.moving_mean"].tolist() == [0.5, -0.25]
    # the comparison of the end buffers runs on them: equal NaNs are no difference, a moved mean is
    moved = dict(read, **{"bn.moving_mean": np.array([0.5, -0.5])})
    assert final_buffers(read, read, 3) is None
    found = final_buffers(read, moved, 3)
    assert found["name"] == "bn.moving_mean" and found["step"] == 3 and found["after_last_step"]


def test_a_tensor_and_a_loss_list_read_non_finite_strings_alike():
    values = [["nan", "1.5"], ["-inf", "inf"]]
    array = read_array(values)
    assert array.shape == (2, 2) and array.dtype == np.float64
    assert [float(x) for x in array.reshape(-1)][1:] == read_floats(["1.5", "-inf", "inf"])
    assert np.isnan(array[0, 0])
    plain = read_array([[1.0, 2.0]])  # numbers stay as they are
    assert plain.dtype == np.float64 and plain.tolist() == [[1.0, 2.0]]
