"""Positions: the paper's sinusoids (formula, rotation property, any length) and learned tables."""

import re

import pytest
import torch
from hypothesis import example, given, settings, strategies as st
from reference.layers import reference_sinusoidal_table

from attnlab.layers import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, build_positional, sinusoidal_table


@pytest.mark.parametrize("d_model", [1, 2, 3, 7, 8, 16, 33])
def test_table_equals_the_formula_per_element(d_model):
    table = sinusoidal_table(200, d_model, dtype=torch.float64)
    assert table.shape == (200, d_model)
    torch.testing.assert_close(table, reference_sinusoidal_table(200, d_model), atol=1e-12, rtol=0)
    table32 = sinusoidal_table(200, d_model)
    assert table32.dtype == torch.float32
    torch.testing.assert_close(table32.double(), reference_sinusoidal_table(200, d_model), atol=1e-6, rtol=0)


def test_sines_and_cosines_are_interleaved_not_concatenated():
    table = sinusoidal_table(50, 8, dtype=torch.float64)
    positions = torch.arange(50, dtype=torch.float64)
    # i = 0: frequency 1. Even column 0 is sin(pos), odd column 1 is cos(pos).
    torch.testing.assert_close(table[:, 0], torch.sin(positions), atol=1e-12, rtol=0)
    torch.testing.assert_close(table[:, 1], torch.cos(positions), atol=1e-12, rtol=0)
    # i = 1: frequency 1 / 10000^(2/8).
    torch.testing.assert_close(table[:, 2], torch.sin(positions / 10000 ** 0.25), atol=1e-12, rtol=0)
    torch.testing.assert_close(table[:, 3], torch.cos(positions / 10000 ** 0.25), atol=1e-12, rtol=0)
    assert torch.equal(table[0], torch.tensor([0.0, 1.0] * 4, dtype=torch.float64))


def test_base_argument():
    table = sinusoidal_table(30, 6, base=100.0, dtype=torch.float64)
    torch.testing.assert_close(table, reference_sinusoidal_table(30, 6, base=100.0), atol=1e-12, rtol=0)


@pytest.mark.parametrize("d_model", [3, 8, 512])
def test_values_lie_in_minus_one_to_one(d_model):
    table = sinusoidal_table(6000, d_model)
    assert table.min() >= -1.0 and table.max() <= 1.0
    assert table.min() < -0.99 and table.max() > 0.99  # the fastest pair sweeps the whole range


ENCODINGS = {}  # one growing encoding per width, shared by the examples


@settings(max_examples=200, deadline=None)
@given(pos=st.integers(0, 3000), offset=st.integers(0, 3000), d_model=st.sampled_from([2, 3, 8, 17, 64, 512]))
@example(pos=0, offset=1, d_model=3)
@example(pos=7, offset=0, d_model=8)
@example(pos=3000, offset=3000, d_model=512)
def test_rotation_property(pos, offset, d_model):
    """PE(pos + k) is PE(pos) with each pair (2i, 2i+1) rotated by ω_i·k, ω_i = 1/10000^(2i/d):
    a relative offset is a fixed linear map, independent of pos (the paper's motivation, §3.5).

    sin(a + θ) = sin a·cos θ + cos a·sin θ,  cos(a + θ) = cos a·cos θ − sin a·sin θ.
    """
    if d_model not in ENCODINGS:
        # .double() casts a float32 table; with initial_length=1 that is only row 0 (exact
        # zeros and ones), so every other float64 row comes from growth, computed in float64.
        ENCODINGS[d_model] = (SinusoidalPositionalEncoding(d_model, initial_length=16),
                              SinusoidalPositionalEncoding(d_model, initial_length=1).double())
    float32_encoding, float64_encoding = ENCODINGS[d_model]
    pairs = d_model // 2  # an odd width's last sine has no cosine partner
    theta = offset / 10000.0 ** (torch.arange(pairs, dtype=torch.float64) * 2 / d_model)  # ω_i·k
    positions = torch.tensor([pos, pos + offset])
    for encoding, tolerance in ((float64_encoding, 1e-9), (float32_encoding, 1e-6)):
        rows = encoding(positions).double()
        sin_a, cos_a = rows[0, 0:2 * pairs:2], rows[0, 1:2 * pairs:2]
        expected_sin = sin_a * torch.cos(theta) + cos_a * torch.sin(theta)
        expected_cos = cos_a * torch.cos(theta) - sin_a * torch.sin(theta)
        torch.testing.assert_close(rows[1, 0:2 * pairs:2], expected_sin, atol=tolerance, rtol=0)
        torch.testing.assert_close(rows[1, 1:2 * pairs:2], expected_cos, atol=tolerance, rtol=0)


def test_any_length_works_and_the_table_grows_on_demand():
    encoding = SinusoidalPositionalEncoding(8, initial_length=16)
    assert encoding.table.shape[0] == 16
    positions = torch.tensor([[0, 3, 5000], [15, 16, 4999]])
    out = encoding(positions)
    assert out.shape == (2, 3, 8)
    assert encoding.table.shape[0] >= 5001
    reference = reference_sinusoidal_table(5001, 8)
    torch.testing.assert_close(out.double(), reference[positions], atol=1e-6, rtol=0)
    # Nothing about positions is saved: the table is a non-persistent buffer.
    assert "table" not in encoding.state_dict()


def test_table_growth_keeps_device_and_dtype():
    encoding = SinusoidalPositionalEncoding(6, initial_length=4).double()
    out = encoding(torch.tensor([100]))
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, reference_sinusoidal_table(101, 6)[[100]], atol=1e-12, rtol=0)


def test_empty_positions():
    assert SinusoidalPositionalEncoding(4, initial_length=2)(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 4)


def test_learned_positions_look_up_their_table():
    learned = LearnedPositionalEmbedding(10, 4)
    positions = torch.tensor([[0, 1, 9], [2, 2, 3]])
    assert torch.equal(learned(positions), learned.weight[positions])
    assert learned(positions).shape == (2, 3, 4)


def test_learned_positions_reject_a_position_beyond_the_table():
    learned = LearnedPositionalEmbedding(10, 4)
    with pytest.raises(ValueError, match=re.escape("position 10") + ".*max_positions=10"):
        learned(torch.tensor([[0, 10]]))
    with pytest.raises(ValueError, match="position 37"):
        learned(torch.tensor([5, 37, 2]))


def test_build_positional():
    assert isinstance(build_positional("sinusoidal", 8, 100), SinusoidalPositionalEncoding)
    learned = build_positional("learned", 8, 100)
    assert isinstance(learned, LearnedPositionalEmbedding) and learned.max_positions == 100
    with pytest.raises(ValueError, match="'rotary'"):
        build_positional("rotary", 8, 100)
