"""Bad arrays and bad specs raise SimError (a ValueError) with the library's message."""

import numpy as np
import pytest

import moe_paging_sim as mps
from conftest import PROSE


def arrays(tokens=4, layers=2, top_k=2, experts=8, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([
        np.stack([rng.choice(experts, top_k, replace=False) for _ in range(layers)])
        for _ in range(tokens)
    ])


def test_sim_error_is_a_value_error():
    assert issubclass(mps.SimError, ValueError)


@pytest.mark.parametrize("bad, words", [
    (arrays().astype(np.float32), "dtype float32 is not an integer type"),
    (arrays()[:, :, 0], "is not [tokens, layers, top_k] (3 dimensions)"),
    ([[[1, 2]]], "not a NumPy array"),
])
def test_bad_arrays_are_named(bad, words):
    with pytest.raises(mps.SimError) as e:
        mps.Trace.from_arrays([bad], [1])
    assert "array 0" in str(e.value) and words in str(e.value)


def test_ids_out_of_range():
    a = arrays()
    a[1, 0, 0] = -1
    with pytest.raises(ValueError, match=r"token 1 layer 0: expert id -1 is out of range"):
        mps.Trace.from_arrays([a], [1])
    with pytest.raises(ValueError, match=r"expert id [4-7] is out of range: ids run from 0 to 3"):
        mps.Trace.from_arrays([arrays()], [1], num_experts=4)


def test_ragged_layers_name_the_request():
    with pytest.raises(ValueError, match=r"request 1 \(\"b\"\).*same layers and top-k"):
        mps.Trace.from_arrays([arrays(layers=2), arrays(layers=3)], [1, 1], names=["a", "b"])


def test_prompt_lengths_must_match():
    with pytest.raises(ValueError, match="2 arrays but 1 prompt lengths"):
        mps.Trace.from_arrays([arrays(), arrays()], [1])
    with pytest.raises(ValueError, match="prompt length 9 exceeds the 4 tokens"):
        mps.Trace.from_arrays([arrays()], [9])


def test_bad_specs_have_the_clis_messages():
    with pytest.raises(mps.SimError, match="--no-such-flag"):
        mps.run({"no_such_flag": 1}, PROSE)
    with pytest.raises(mps.SimError, match="set by this function"):
        mps.run({"json": True}, PROSE)
    with pytest.raises(mps.SimError, match="must be a dict"):
        mps.run(["policy"], PROSE)
    with pytest.raises(mps.SimError, match="no such file"):
        mps.run({}, "no/such/trace.bin")
    with pytest.raises(mps.SimError, match="budget"):
        mps.run({"evict": "lru", "budget": "lots"}, PROSE)
