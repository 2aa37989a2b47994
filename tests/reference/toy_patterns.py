"""A pattern defined entirely outside attnlab, to prove that a new attention variant needs
no edit anywhere else: importing this module registers it, and configs can name it.

``banded_causal``: query i attends keys i-width .. i (a sliding window, as in local
attention), so a cache need keep only the last ``width + 1`` keys.
"""

from attnlab.attention import AttentionPattern, attend_unchecked, combine_masks, register_pattern


@register_pattern("banded_causal")
class BandedCausal(AttentionPattern):
    causal = True

    def __init__(self, width: int = 2):
        super().__init__()
        if width < 0:
            raise ValueError(f"width={width} must be >= 0")
        self.width = width

    @property
    def cache_window(self) -> int:
        return self.width + 1

    def spec(self):
        return {"name": "banded_causal", "width": self.width}

    def forward(self, q, k, v, ctx):
        distance = ctx.distances(q.shape[-2], k.shape[-2], q.device)  # (Lq, Lk) query - key position
        mask = combine_masks(ctx.mask, (distance >= 0) & (distance <= self.width))
        return attend_unchecked(q, k, v, mask=mask, dropout_p=ctx.dropout_p, need_weights=ctx.need_weights)


# Small parameters for patterns that have some, so that the decoding tests reach past them:
# a band of 2; a relative span of 3 on sequences of 13 and more; blocks of 3 (1D) and 2x2 with
# a flange of 1 (2D, on a raster 4 wide; a model of images passes its own width), so that a
# 13-token test sequence crosses several.
TEST_PARAMETERS = {"banded_causal": {"width": 2}, "relative_skew": {"max_relative_position": 3},
                   "relative_shaw": {"max_relative_position": 3}, "local_1d": {"block_length": 3},
                   "local_2d": {"query_shape": [2, 2], "memory_flange": [1, 1], "width": 4}}


def causal_specs() -> list:
    """Every registered pattern that can run causally, with small parameters where it takes some."""
    from attnlab.attention import build_pattern, list_patterns

    specs = []
    for name in list_patterns():
        spec = {"name": name, **TEST_PARAMETERS[name]} if name in TEST_PARAMETERS else name
        if build_pattern(spec).causal:
            specs.append(spec)
    return specs
