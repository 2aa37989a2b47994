"""oneDNN's dnnl_sgemm for a many-row search package's products (attnlab.generation.sgemm)."""

from __future__ import annotations

import copy

import pytest
import torch

import attnlab
from attnlab.files import read_json_object
from attnlab.generation import aot, beam_search, sgemm
from attnlab.generation.compiled import unavailable_reason

needs_compiler = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
needs_dnnl = pytest.mark.skipif(sgemm.dnnl_library() is None, reason=f"{sgemm.WHEEL} is not installed")
TOLERANCE = dict(atol=2e-5, rtol=2e-5)


class _Products(torch.nn.Module):
    """Every way a step multiplies: a Linear over (B, L, d) rows, ``mm`` by a (d, n) matrix (the head's
    transposed copy), ``addmm`` with a bias, and a product of a transposed input."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.linear = torch.nn.Linear(16, 24).to(dtype)
        self.head = torch.nn.Parameter(torch.randn(24, 40, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.randn(40, dtype=dtype))
        self.other = torch.nn.Parameter(torch.randn(40, 8, dtype=dtype))

    def forward(self, x, columns):
        hidden = self.linear(x)[:, 0]  # (B, 24)
        return torch.addmm(self.bias, hidden, self.head), torch.mm(hidden, self.head), torch.mm(columns.t(), self.other)


def _example(dtype=torch.float32):
    torch.manual_seed(0)
    return _Products(dtype).eval(), (torch.randn(6, 1, 16, dtype=dtype), torch.randn(40, 6, dtype=dtype))


def _float64(module, x, columns):
    double = copy.deepcopy(module).double()
    return double(x.double(), columns.double())


def test_decompositions_write_every_float32_product_as_sgemm():
    """decompositions(): linear, mm and addmm of float32 matrices become attnlab::sgemm_linear (plus the
    bias), within float32 rounding of a float64 reference; a float64 step keeps its own products."""
    module, example = _example()
    with torch.no_grad():
        exported = torch.export.export(module, example, strict=True).run_decompositions(sgemm.decompositions())
        targets = [node.target for node in exported.graph.nodes if node.op == "call_function"]
        assert targets.count(torch.ops.attnlab.sgemm_linear.default) == 4
        assert not {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.linear.default} \
            & set(targets)
        for ours, reference in zip(exported.module()(*example), _float64(module, *example)):
            torch.testing.assert_close(ours.double(), reference, **TOLERANCE)
        module64, example64 = _example(torch.float64)
        exported = torch.export.export(module64, example64, strict=True).run_decompositions(sgemm.decompositions())
        assert torch.ops.attnlab.sgemm_linear.default not in {node.target for node in exported.graph.nodes}


def test_wanted_needs_the_wheel_and_follows_the_setting(monkeypatch, tmp_path):
    monkeypatch.delenv(sgemm.SETTING, raising=False)
    monkeypatch.setattr(sgemm, "_DNNL", [None])
    assert not sgemm.wanted()
    with pytest.raises(sgemm.Unavailable, match="onednn-cpu-gomp"):
        sgemm.load(tmp_path, None)
    monkeypatch.setattr(sgemm, "_DNNL", [tmp_path / "libdnnl.so.3"])
    assert sgemm.wanted() == (sgemm.sys.platform.startswith("linux") and sgemm.os.uname().machine == "x86_64")
    monkeypatch.setenv(sgemm.SETTING, "off")
    assert not sgemm.wanted()


def test_a_file_at_the_librarys_name_that_does_not_load_is_reported_and_left(monkeypatch, tmp_path):
    """Whatever sits at the library's name is loaded, never replaced: one that does not load stops the
    package with its path, and stays as it was."""
    monkeypatch.setattr(sgemm, "_DNNL", [tmp_path / "libdnnl.so.3"])
    monkeypatch.setattr(sgemm, "_LOADED", {})
    path = tmp_path / f"sgemm-{sgemm.SHIM_KEY}.so"
    path.write_bytes(b"not a library")
    with pytest.raises(sgemm.Unavailable, match=f"{path} did not load"):
        sgemm.load(tmp_path, None)
    assert path.read_bytes() == b"not a library" and sgemm._LOADED == {}
    path.unlink()
    path.mkdir()
    with pytest.raises(sgemm.Unavailable, match=f"{path} is not a file"):
        sgemm.load(tmp_path, None)
    path.rmdir()
    path.symlink_to(tmp_path / "nowhere.so")  # a link that leads nowhere: left too
    with pytest.raises(sgemm.Unavailable, match=f"{path} is not a file"):
        sgemm.load(tmp_path, None)
    assert path.is_symlink() and not (tmp_path / "nowhere.so").exists()


def test_a_many_row_avx2_package_takes_sgemm_where_wanted(monkeypatch, tmp_path):
    """The structure of a folded many-row float search package on AVX2 names its products: "sgemm" where
    the wheel is there (and the setting allows), else oneDNN's; never for other packages. A library that
    cannot be made stops the package with a reason naming the setting."""
    layout = aot.Layout("search", beam=4)
    monkeypatch.setattr(sgemm, "wanted", lambda: True)
    assert aot._many_row_products(layout, True, None, "AVX2") == "sgemm"
    assert aot._many_row_products(layout, True, None, "AVX512") is None
    assert aot._many_row_products(layout, True, "weight-only", "AVX2") is None
    assert aot._many_row_products(aot.Layout("search", beam=4, batch=1), True, None, "AVX2") is None
    monkeypatch.setattr(sgemm, "wanted", lambda: False)
    assert aot._many_row_products(layout, True, None, "AVX2") == "oneDNN"
    assert aot._sgemm_library({"products": "oneDNN"}) is None

    def unavailable(directory, compiler):
        raise sgemm.Unavailable("test: no library")

    monkeypatch.setattr(sgemm, "load", unavailable)
    with pytest.raises(aot.AotUnavailable, match=r"test: no library.*ATTNLAB_SGEMM=off"):
        aot._sgemm_library({"products": "sgemm"})


def test_the_load_check_loads_the_library_first(tmp_path):
    assert aot._check_command(tmp_path / "p.pt2")[2] == aot._LOAD_CHECK
    command = aot._check_command(tmp_path / "p.pt2", tmp_path / "sgemm-x.so")
    assert command[2].startswith("import ctypes, os; ctypes.CDLL(") and str(tmp_path / "sgemm-x.so") in command[2]
    assert command[2].endswith(aot._LOAD_CHECK) and command[3] == str(tmp_path / "p.pt2")


@needs_compiler
@needs_dnnl
def test_a_package_of_sgemm_products_equals_float64(tmp_path):
    """The library's C function behind a package's products: every layout a step hands it (rows or columns
    unit-strided, a weight as it is or transposed) within float32 rounding of float64; built once (into this
    directory, or another an earlier package of this process took it from) and reused."""
    module, example = _example()
    library = sgemm.load(tmp_path, aot.package_compiler(quiet=True) or aot._inductor_compiler())
    assert library.name == f"sgemm-{sgemm.SHIM_KEY}.so" and library.is_file()
    assert sgemm.load(tmp_path, None) == library
    with torch.no_grad():
        exported = torch.export.export(module, example, strict=True).run_decompositions(sgemm.decompositions())
        configs = {**aot.MANY_ROWS_AVX2_CONFIGS, "aot_inductor.custom_ops_to_c_shims": sgemm.c_shims()}
        path = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "p.pt2"),
                                                         inductor_configs=configs)
        code = "".join(open(p).read() for p in _wrapper_sources(path))
        assert code.count("aoti_torch_cpu_sgemm_linear(") >= 4  # three products and the declaration
        assert "_linear_pointwise" not in code
        outputs = torch._inductor.aoti_load_package(path)(*example)
        for ours, reference in zip(outputs, _float64(module, *example)):
            torch.testing.assert_close(ours.double(), reference, **TOLERANCE)


def _wrapper_sources(package: str) -> list[str]:
    import zipfile

    directory = package + ".sources"
    with zipfile.ZipFile(package) as archive:
        names = [name for name in archive.namelist() if name.endswith("wrapper.cpp")]
        archive.extractall(directory, members=names)
    return [f"{directory}/{name}" for name in names]


@pytest.mark.slow
@needs_compiler
@needs_dnnl
def test_a_beam_search_through_sgemm_products_equals_the_eager_one(tmp_path, monkeypatch):
    """A many-row search package on AVX2 with dnnl_sgemm products: every product in the package is one, and
    the search's hypotheses and scores are the eager search's (scores within float32 rounding)."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.delenv(sgemm.SETTING, raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", activation="silu").eval()
    src = torch.randint(4, model.config.vocab_size, (8, 7))
    src[3, 5:] = model.config.pad_id
    eager = beam_search(model, src, beam_size=4, max_len_b=12)
    packaged = beam_search(model, src, beam_size=4, max_len_b=12, compile="aot")
    manifests = list((tmp_path / "aot").glob("*.json"))
    structures = [read_json_object(m, max_bytes=aot.MANIFEST_BYTES).get("structure", {}) for m in manifests]
    assert any(structure.get("products") == "sgemm" for structure in structures)
    assert sgemm.SHIM_KEY in sgemm._LOADED  # (built here, or by an earlier test of this process)
    for ours, theirs in zip(packaged, eager):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        torch.testing.assert_close(torch.tensor([h.score for h in ours]), torch.tensor([h.score for h in theirs]),
                                   atol=1e-4, rtol=1e-4)
