"""StaticKVCache owns its cursor: reset, snapshot/restore, positions, replay count and the
conditioning slot go through its methods, in place (a CUDA graph holds its tensors), and no
module outside attention/cache.py writes those fields."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from attnlab.attention.cache import StaticKVCache

SRC = Path(__file__).resolve().parents[2] / "src" / "attnlab"
FIELDS = {"length", "positions", "write_index", "key_mask", "conditioning", "kv", "image_added"}
IN_PLACE = {"copy_", "fill_", "zero_", "add_", "sub_", "index_copy_", "masked_fill_"}


def _cache(fixed_shape: bool = True) -> StaticKVCache:
    return StaticKVCache(2, batch=3, num_heads=2, capacity=8, head_dim=4, fixed_shape=fixed_shape)


def test_reset_empties_the_cursor_in_place():
    cache = _cache()
    write_index, mask = cache.write_index, cache.full_key_mask()
    cache.set_key_padding(torch.tensor([[True, False], [True, True], [False, True]]))
    cache.advance(5)
    assert cache.length == 5 and int(write_index) == 5 and not bool(mask.all())
    cache.reset()
    assert cache.length == 0 and int(cache.write_index) == 0 and bool(cache.key_mask.all())
    assert cache.write_index is write_index and cache.key_mask is mask  # the same tensors


def test_snapshot_and_restore_put_the_cursor_back_in_place():
    cache = _cache()
    cache.set_positions(torch.tensor([3, 4, 5]))
    cache.advance(2)
    state = cache.snapshot()
    positions, write_index = cache.positions, cache.write_index
    cache.advance(3)
    cache.step_positions()
    assert cache.positions.tolist() == [4, 5, 6] and cache.length == 5
    cache.restore(state)
    assert cache.positions.tolist() == [3, 4, 5] and int(cache.write_index) == 2 and cache.length == 2
    assert cache.positions is positions and cache.write_index is write_index


def test_positions_replay_count_and_conditioning():
    cache = _cache(fixed_shape=False)
    cache.set_positions(7)
    assert cache.positions.tolist() == [7, 7, 7]
    cache.count_replayed(4)  # the host count moves, the device write index does not
    assert cache.length == 4 and int(cache.write_index) == 0
    added = torch.randn(8, 4)
    cache.set_conditioning(added)
    assert cache.conditioning is added
    assert _cache().conditioning is None and _cache().key_mask is None


def _writes_to_cache_fields(tree: ast.AST) -> list[int]:
    lines = []

    def is_cache_field(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr in FIELDS
                and "cache" in ast.unparse(node.value).lower())

    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IN_PLACE
              and is_cache_field(node.func.value)):
            lines.append(node.lineno)
        lines.extend(node.lineno for target in targets if is_cache_field(target))
    return sorted(lines)


def test_no_module_outside_the_cache_writes_its_fields():
    found = {}
    for path in SRC.rglob("*.py"):
        if path == SRC / "attention" / "cache.py":
            continue
        lines = _writes_to_cache_fields(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[str(path.relative_to(SRC))] = lines
    assert found == {}, f"cache fields written from outside attention/cache.py (use its methods): {found}"


def test_the_field_check_finds_outside_writes():
    tree = ast.parse("cache.length = 0\nself.cache.write_index.zero_()\ncache.positions += 1\nx = cache.length\n")
    assert _writes_to_cache_fields(tree) == [1, 2, 3]
