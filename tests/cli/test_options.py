"""``--set FIELD=VALUE`` parsing shared by the training verbs."""

import pytest

from attnlab.cli.options import parse_overrides


def test_values_become_ints_floats_bools_or_strings():
    parsed = parse_overrides(["num_layers=4", "dropout=0.3", "lr=1e-3", "norm_first=false", "tie=True",
                              "activation=gelu", "name=a=b"])
    assert parsed == {"num_layers": 4, "dropout": 0.3, "lr": 1e-3, "norm_first": False, "tie": True,
                      "activation": "gelu", "name": "a=b"}
    assert isinstance(parsed["num_layers"], int) and isinstance(parsed["dropout"], float)


@pytest.mark.parametrize("item", ["dropout", "=0.3", "dropout=", ""])
def test_malformed_items_are_named(item):
    with pytest.raises(ValueError, match="FIELD=VALUE") as error:
        parse_overrides([item], flag="--set")
    assert repr(item) in str(error.value)
