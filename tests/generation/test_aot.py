"""The decode step compiled ahead of time (attnlab.generation.aot): the package's logits equal
the eager step's up to float rounding at every position (teacher-forced, so a near-tie cannot
make the two runs feed different tokens), greedy tokens are the eager ones, an in-place weight
change is seen (weights outside: read by the next step, the head's derived copy included;
folded, on the CPU: the package rebuilt for the new values, never run with others), and the
package cache refuses what it must not run or replace. One folded package is built for the
fast tests and shared by the module (about 30-60 s on a 2-core machine), plus one rebuild, one
package with the weights outside, one whose $CXX has no shared libstdc++ (built by another
compiler) and a greedy one with its head screened in int8; the other families' packages are under
the slow mark."""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.attention import StaticKVCache
from attnlab.attention import cache as cache_module
from attnlab import head_screen
from attnlab.generation import aot, beam_search, generate, sampling
from attnlab.models import parts
from attnlab.generation.compiled import unavailable_reason
from attnlab.quantize import integer_sums_exact

needs_compiler = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
# Fused kernels add in another order than the eager ones: float32 rounding, on any CPU.
TOLERANCE = dict(atol=2e-5, rtol=2e-5)


def lm():
    torch.manual_seed(0)
    return attnlab.create_model("lm_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24, num_layers=2,
                                max_positions=40).eval()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One model and its batch-1 package, built once into a module cache directory."""
    if unavailable_reason() is not None:
        pytest.skip(str(unavailable_reason()))
    directory = tmp_path_factory.mktemp("aot-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNLAB_CACHE", str(directory))
        model = lm()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no fallback: the package must build
            generate(model, [[3, 4, 5]], max_new_tokens=4, greedy=True, compile="aot")
    packages = sorted((directory / "aot").glob("*.pt2"))
    assert len(packages) == 1
    return model, directory, packages[0]


@pytest.fixture
def cache_dir(built, monkeypatch):
    """The module's cache directory in $ATTNLAB_CACHE, and a fresh model of the same structure
    (packages are kept per model object, so every test loads from disk)."""
    model, directory, package = built
    monkeypatch.setenv("ATTNLAB_CACHE", str(directory))
    return directory, package


def _no_build(monkeypatch):
    calls = []

    def build(*args, **kwargs):
        calls.append(args)
        raise aot.AotUnavailable("test: no build here")

    monkeypatch.setattr(aot, "_build", build)
    return calls


def _teacher_forced(model, step, ids, prompt):
    eager_cache = model.new_cache(1, ids.shape[1])
    fixed_cache = model.new_cache(1, ids.shape[1], fixed_shape=True)
    with torch.inference_mode():
        torch.testing.assert_close(model.prefill(ids[:, :prompt], fixed_cache), model.prefill(ids[:, :prompt], eager_cache),
                                   **TOLERANCE)
        if step is None:
            step = aot.aot_step(model, "causal", fixed_cache)
        for t in range(prompt, ids.shape[1]):
            torch.testing.assert_close(step(ids[:, t], fixed_cache), model.step(ids[:, t], eager_cache), **TOLERANCE)
            assert fixed_cache.length == eager_cache.length == t + 1  # counted on the host
    assert fixed_cache.positions.tolist() == eager_cache.positions.tolist()


def test_the_package_gives_the_eager_logits_at_every_position_and_the_eager_tokens(cache_dir, monkeypatch):
    calls = _no_build(monkeypatch)  # loaded from the module's package, not built again
    model = lm()
    torch.manual_seed(1)
    _teacher_forced(model, None, torch.randint(1, 23, (1, 33)), prompt=4)
    for prompt in ([3, 4, 5], [7]):
        assert generate(model, [prompt], max_new_tokens=30, greedy=True, compile="aot") == \
            generate(model, [prompt], max_new_tokens=30, greedy=True)
    assert calls == []


def test_seeded_sampling_draws_as_the_eager_step_does(cache_dir):
    model = lm()
    for options in (dict(top_k=5), dict(top_p=0.8, temperature=0.7), dict(temperature=1.3)):
        assert generate(model, [[3, 4]], max_new_tokens=25, seed=11, compile="aot", **options) == \
            generate(model, [[3, 4]], max_new_tokens=25, seed=11, **options)


def test_weights_kept_outside_an_in_place_change_is_seen_including_the_heads_derived_copy(tmp_path, monkeypatch):
    """$ATTNLAB_AOT_WEIGHTS=outside (the way off the CPU): the runner reads the model's tensors."""
    if unavailable_reason() is not None:
        pytest.skip(str(unavailable_reason()))
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("ATTNLAB_AOT_WEIGHTS", "outside")
    model = lm()
    ids = torch.randint(1, 23, (1, 20))
    _teacher_forced(model, None, ids, prompt=3)
    with torch.no_grad():  # the tied embedding (the head's transposed copy derives from it) and a layer
        model.decoder.embed.weight.mul_(-1.7).add_(0.05)
        model.decoder.stack.layers[1].ffn.linear1.weight.mul_(2.0)
    _teacher_forced(model, None, ids, prompt=3)
    with torch.no_grad():  # a new tensor in place of a weight: the runner gets its storage
        model.decoder.stack.layers[0].self_attn.out_proj.weight = torch.nn.Parameter(
            torch.randn_like(model.decoder.stack.layers[0].self_attn.out_proj.weight))
    _teacher_forced(model, None, ids, prompt=3)
    manifests = list((tmp_path / "aot").glob("*.json"))  # one package, built once: no rebuild for new values
    assert len(manifests) == 1 and json.loads(manifests[0].read_text())["weights_sha256"] is None


def test_folded_weights_a_package_never_runs_other_weights_than_the_models(copied, monkeypatch):
    """On the CPU the package holds the weights: written in place (in this process: their
    derived_key) a package is built for the new values, beside the first (named for its weights), and
    each set of weights decodes through its own: a model of the first weights (another process's, the
    same structure) loads the first, no build; one of weights no package holds gets a build, never
    another's package."""
    model = lm()
    ids = torch.randint(1, 23, (1, 20))
    _teacher_forced(model, None, ids, prompt=3)  # the module's package: lm()'s weights
    manifest = copied.with_suffix(".json")
    first = json.loads(manifest.read_text())["weights_sha256"]
    assert first == aot.weights_digest(model) and copied.stem.endswith("-" + first[:aot.WEIGHTS_IN_NAME])
    with torch.no_grad():  # the tied embedding (the head's transposed copy derives from it)
        model.decoder.embed.weight.mul_(-1.7).add_(0.05)
    _teacher_forced(model, None, ids, prompt=3)  # built, with the new values
    digests = sorted(json.loads(path.read_text())["weights_sha256"] for path in copied.parent.glob("*.json"))
    assert digests == sorted([first, aot.weights_digest(model)]) and first != aot.weights_digest(model)
    calls, ran = _no_build(monkeypatch), _package_calls(monkeypatch)
    tokens = generate(lm(), [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="aot")
    assert tokens == generate(lm(), [[3, 4, 5]], max_new_tokens=8, greedy=True) and calls == []
    assert set(ran) == {copied.stem}
    other = lm()
    with torch.no_grad():
        other.decoder.stack.layers[0].ffn.linear1.weight.mul_(1.5)
    with pytest.warns(RuntimeWarning, match="test: no build here; decoding eagerly"):
        tokens = generate(other, [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="aot")
    assert tokens == generate(other, [[3, 4, 5]], max_new_tokens=8, greedy=True) and len(calls) == 1
    assert set(ran) == {copied.stem}


def _loaded_step(model):
    """A fixed-shape cache after a three-token prompt and ``model``'s package (loaded from disk: a new model)."""
    cache = model.new_cache(1, 24, fixed_shape=True)
    with torch.inference_mode():
        model.prefill(torch.tensor([[3, 4, 5]]), cache)
    return cache, aot.aot_step(model, "causal", cache)


def test_a_folded_packages_look_up_is_kept_while_nothing_it_depends_on_changes(cache_dir, monkeypatch):
    """aot_step's answer for a folded package is kept with the state of the model it was given for
    (aot._lookup_state): asked again, the same step without the full look-up; after each change that
    could give another package (a weight written in place, a module replaced, an optimizer's step, a
    layer removed, another config) the full look-up runs again and its answer holds: the same weights
    under new tensors load the package from disk, another structure is a build."""
    calls = _no_build(monkeypatch)
    full = []
    step_tensors = aot._step_tensors
    monkeypatch.setattr(aot, "_step_tensors", lambda *args, **kwargs: full.append(1) or step_tensors(*args, **kwargs))
    model = lm()
    cache, step = _loaded_step(model)
    assert len(full) == 1
    assert aot.aot_step(model, "causal", cache) is step and aot.aot_step(model, "causal", cache) is step
    assert len(full) == 1 and calls == []

    def looked_up_again() -> bool:
        nonlocal cache, step
        before, previous = len(full), step
        cache, step = _loaded_step(model)  # a new cache renews the step plans, as decoding does
        assert aot.aot_step(model, "causal", cache) is step  # kept again
        return len(full) == before + 1 and step is not previous

    with torch.no_grad():
        model.decoder.stack.layers[1].ffn.linear2.weight.mul_(1.0)  # its version moves, not its values
    assert looked_up_again()
    model.decoder.stack.layers[0].ffn = copy.deepcopy(model.decoder.stack.layers[0].ffn)
    assert looked_up_again()
    torch.optim.SGD(model.parameters(), lr=0.0).step()  # fused optimizers move no version counter
    assert looked_up_again()
    eager = lm()
    eager_cache = eager.new_cache(1, 24)
    with torch.inference_mode():
        eager.prefill(torch.tensor([[3, 4, 5]]), eager_cache)
        torch.testing.assert_close(step(torch.tensor([6]), cache), eager.step(torch.tensor([6]), eager_cache),
                                   **TOLERANCE)
    assert calls == []  # the same values throughout: the package on disk
    for change in (lambda: model.__setattr__("config", model.config.replace(layer_norm_eps=1e-3)),
                   lambda: model.decoder.stack.layers.__delitem__(1)):
        change()
        with pytest.raises(aot.AotUnavailable, match="test: no build here"):
            aot.aot_step(model, "causal", model.new_cache(1, 24, fixed_shape=True))
    assert len(calls) == 2


def _data_ptr(t: torch.Tensor) -> int:
    """Where a weight's numbers start: oneDNN's opaque tensors have no ``data_ptr()`` of their own."""
    return torch.ops.mkldnn.data_ptr(t) if t.layout == torch._mkldnn else t.data_ptr()


def test_a_folded_packages_weights_are_re_homed_on_cache_lines_and_give_the_loaders_logits(cache_dir):
    """AOTInductor copies a folded package's weights into one malloc'd block, each 16 bytes past a
    cache line; the package is loaded by a runner of its own whose weights are copies on 64-byte
    boundaries (aot._aligned_runner; oneDNN's prepacked weights, opaque, copied by oneDNN), and it
    computes what the package loader's copy does."""
    _, package = cache_dir
    cache, step = _loaded_step(lm())
    assert type(step._loader).__name__ == "AOTIModelContainerRunnerCpu" and len(step._aligned) > 10
    assert all(_data_ptr(t) % aot.ALIGNMENT == 0 for t in step._aligned.values() if t.numel())
    names = step._loader.get_constant_names_to_original_fqns()
    assert len(set(names.values())) == len(names)  # every constant under a name of its own (_UNIQUE_NAMES)
    loader = torch._C._aoti.AOTIModelPackageLoader(str(package), "model", False, 1, -1)
    inputs = [torch.tensor([6]), *cache.step_tensors()]  # each run writes its own copy of the cache
    with torch.inference_mode():
        ours, theirs = step._run([t.clone() for t in inputs]), loader.run([t.clone() for t in inputs])
    torch.testing.assert_close(ours, theirs, **TOLERANCE)


@needs_compiler
@pytest.mark.parametrize("products", ["templates", "oneDNN"])
def test_a_folded_packages_every_weight_is_re_homed_on_a_cache_line(tmp_path, products):
    """Built with inductor's C++ templates alone (FEW_ROWS_CONFIGS, as a beam search of a few rows is):
    two products whose prepacked weights inductor would name alike, each under its own name, re-homed
    in one block. Built with oneDNN's products (MANY_ROWS_AVX2_CONFIGS, a many-row search's on AVX2):
    their weights in oneDNN's own layout (opaque), each copied by oneDNN. Every weight on 64 bytes,
    and the runner's results are the module's."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.SiLU(), torch.nn.Linear(96, 48)).eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        exported = torch.export.export(module, (x,), dynamic_shapes=({0: torch.export.Dim("rows", min=2, max=64)},),
                                       strict=True)
    torch.export.save(exported, tmp_path / "step.pt2")
    configs = aot.FEW_ROWS_CONFIGS if products == "templates" else aot.MANY_ROWS_AVX2_CONFIGS
    aot._compile_package(tmp_path / "step.pt2", tmp_path / "package.pt2", configs)
    runner, copies = aot._aligned_runner(tmp_path / "package.pt2")
    names = runner.get_constant_names_to_original_fqns()
    assert set(copies) == set(names) and len(set(names.values())) == len(names)
    packed = [t for t in copies.values() if t.layout == torch._mkldnn]
    assert len(packed) == (2 if products == "oneDNN" else 0)
    assert all(_data_ptr(t) % aot.ALIGNMENT == 0 for t in copies.values() if t.numel())
    with torch.no_grad():
        for rows in (4, 7):
            torch.testing.assert_close(runner.run([x[:1].expand(rows, -1).contiguous()])[0],
                                       module(x[:1].expand(rows, -1)), **TOLERANCE)


@pytest.mark.parametrize("trouble", ["shared names", "no runner"])
def test_a_package_whose_weights_cannot_be_re_homed_is_run_by_the_package_loader(cache_dir, monkeypatch, trouble):
    """Two constants under one name, as a package of format 4 had them (inductor's "constant45" and
    "constant45_0"), so the runner cannot read both back; or a runner that cannot be made: the package
    loader runs the package, its weights where AOTInductor put them."""
    real = torch._C._aoti.AOTIModelContainerRunnerCpu

    def no_runner(*args):
        raise RuntimeError("test: no runner here")

    class SharedNames:
        def __init__(self, *args):
            self.runner = real(*args)

        def get_constant_names_to_original_fqns(self):
            names = self.runner.get_constant_names_to_original_fqns()
            first, second = sorted(names)[:2]
            return {**names, second: names[first]}

        def __getattr__(self, name):
            return getattr(self.runner, name)

    monkeypatch.setattr(torch._C._aoti, "AOTIModelContainerRunnerCpu",
                        SharedNames if trouble == "shared names" else no_runner)
    model = lm()
    _, step = _loaded_step(model)
    assert type(step._loader).__name__ == "AOTIModelPackageLoader" and step._aligned == {}
    _teacher_forced(model, None, torch.randint(1, 23, (1, 20)), prompt=3)


def test_an_unknown_weights_setting_is_named_and_decoding_runs_eagerly(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("ATTNLAB_AOT_WEIGHTS", "inside")
    calls = _no_build(monkeypatch)
    model = lm()
    with pytest.warns(RuntimeWarning, match=r"\$ATTNLAB_AOT_WEIGHTS='inside' is neither 'folded' nor 'outside'; "
                                            r"decoding eagerly"):
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=5, greedy=True, compile="aot")
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=5, greedy=True) and calls == []


def _refused_then_rebuilt(monkeypatch, message):
    calls = _no_build(monkeypatch)
    model = lm()
    with pytest.warns(RuntimeWarning, match="test: no build here; decoding eagerly"):
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="aot")
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True)
    assert len(calls) == 1, message  # the file was not loaded: a build was asked for


@pytest.fixture
def copied(built, tmp_path, monkeypatch):
    """A private copy of the module's package and manifest in a fresh $ATTNLAB_CACHE."""
    _, directory, package = built
    target = tmp_path / "aot"
    target.mkdir()
    shutil.copy2(package, target / package.name)
    shutil.copy2(package.with_suffix(".json"), target / package.with_suffix(".json").name)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    return target / package.name


def test_a_corrupt_or_truncated_package_is_refused_and_rebuilt(copied, monkeypatch):
    leftover = copied.parent / f".{copied.stem}.tmp-999999999"  # what a killed build leaves
    leftover.mkdir()
    (leftover / copied.name).write_bytes(b"half a package")
    data = bytearray(copied.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copied.write_bytes(bytes(data))
    _refused_then_rebuilt(monkeypatch, "a corrupt package was loaded")
    assert not leftover.exists()  # a dead process's temporary package: removed before building
    copied.write_bytes(bytes(data[: len(data) // 3]))
    _refused_then_rebuilt(monkeypatch, "a truncated package was loaded")


def test_a_manifest_for_another_structure_or_torch_version_is_refused_and_rebuilt(copied, monkeypatch):
    manifest = copied.with_suffix(".json")
    values = json.loads(manifest.read_text())
    values["structure"]["torch"] = "1.0.0"
    manifest.write_text(json.dumps(values))
    _refused_then_rebuilt(monkeypatch, "a package for another torch version was loaded")


def test_files_attnlab_did_not_write_are_left_alone(copied, monkeypatch):
    calls = _no_build(monkeypatch)
    manifest = copied.with_suffix(".json")
    manifest.unlink()  # a package without an attnlab manifest: not ours
    before = copied.read_bytes()
    model = lm()
    with pytest.warns(RuntimeWarning, match="attnlab did not write it.*decoding eagerly"):
        generate(model, [[3, 4]], max_new_tokens=3, greedy=True, compile="aot")
    assert copied.read_bytes() == before and not manifest.exists() and calls == []
    manifest.write_text('{"note": "my own file"}')  # a manifest attnlab did not write
    with pytest.warns(RuntimeWarning, match="was not written by attnlab"):
        generate(lm(), [[3, 4]], max_new_tokens=3, greedy=True, compile="aot")
    assert manifest.read_text() == '{"note": "my own file"}' and copied.read_bytes() == before and calls == []


def test_concurrent_builds_of_one_package_wait_for_each_other(copied, monkeypatch):
    calls = _no_build(monkeypatch)
    model = lm()
    cache = model.new_cache(1, 8, fixed_shape=True)
    paths = aot._Paths(copied.parent, copied.stem)
    done = []
    with aot._build_lock(paths):  # another process building this package
        worker = threading.Thread(target=lambda: done.append(aot.aot_step(model, "causal", cache)))
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and not done  # waits for the lock
    worker.join(60)
    assert len(done) == 1 and calls == []  # then loads what the other one built


def _load_checked(monkeypatch, command=None):
    """Load checks on (as where CUDA is available), each child's command recorded."""
    children = []
    real = aot._check_command

    def check_command(package, shim=None):
        children.append(package)
        return command if command is not None else real(package, shim)

    monkeypatch.setattr(aot, "_load_check_needed", lambda: True)
    monkeypatch.setattr(aot, "_check_command", check_command)
    return children


def test_a_package_that_crashes_its_loader_in_a_test_process_is_not_loaded_here(copied, monkeypatch):
    calls = _no_build(monkeypatch)
    crash = [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]  # what the loader did on the GPU machine
    children = _load_checked(monkeypatch, crash)
    model = lm()
    with pytest.warns(RuntimeWarning, match=r"failed in a test process on this machine \(the test process was "
                                            r"killed by SIGSEGV; .*decoding eagerly"):
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="aot")
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True)
    assert children == [copied] and calls == []
    loads = json.loads(copied.with_suffix(".json").read_text())["loads"]
    assert list(loads.values()) == ["the test process was killed by SIGSEGV"]
    with pytest.warns(RuntimeWarning, match="killed by SIGSEGV"):  # the verdict is kept: no second child
        generate(lm(), [[3, 4]], max_new_tokens=3, greedy=True, compile="aot")
    assert children == [copied]


def test_a_package_that_loads_in_a_test_process_is_loaded_once_checked(copied, monkeypatch):
    calls = _no_build(monkeypatch)
    children = _load_checked(monkeypatch)
    model = lm()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback
        assert generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="aot") == \
            generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True)
        generate(lm(), [[3, 4]], max_new_tokens=3, greedy=True, compile="aot")
    assert children == [copied] and calls == []  # one child for the package, then the kept verdict
    manifest = json.loads(copied.with_suffix(".json").read_text())
    assert list(manifest["loads"].values()) == ["ok"] and "torch " + torch.__version__ in next(iter(manifest["loads"]))


def test_without_a_compiler_one_warning_and_eager_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    model = lm()
    with pytest.warns(RuntimeWarning, match="no-such-c\\+\\+' is not found; decoding eagerly"):
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="aot")
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True)
    assert not list(tmp_path.rglob("*.pt2")) and not list(tmp_path.rglob("*.json"))
    with warnings.catch_warnings():  # said once per model and reason
        warnings.simplefilter("error")
        generate(model, [[3]], max_new_tokens=2, greedy=True, compile="aot")


def _dequantized_copy(model, quantized):
    """``model`` (float) with every linear weight replaced by the int8 weight it became."""
    from attnlab.quantize import QuantizedLinear

    reference = copy.deepcopy(model)
    with torch.no_grad():
        for name, module in quantized.named_modules():
            if isinstance(module, QuantizedLinear):
                reference.get_submodule(name).weight.copy_(module.weight.dequantize())
    return reference


def _assert_weight_only_logits(model, quantized, ids, prompt: int = 4) -> None:
    """Teacher-forced from ``prompt``: the one-row package of ``quantized`` (weight-only int8 products,
    built here) gives at every position the float step's logits with the int8 weights
    (:func:`_dequantized_copy` of ``model``), within bfloat16's rounding of the products' inputs and
    results (a wrong scale, row or column would be off by far more)."""
    reference = _dequantized_copy(model, quantized)
    length = ids.shape[1]
    fixed_cache, eager_cache = quantized.new_cache(1, length, fixed_shape=True), reference.new_cache(1, length)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback: the package must build
        quantized.prefill(ids[:, :prompt], fixed_cache)
        reference.prefill(ids[:, :prompt], eager_cache)
        step = aot.aot_step(quantized, "causal", fixed_cache, quiet=True)
        for t in range(prompt, length):
            torch.testing.assert_close(step(ids[:, t], fixed_cache), reference.step(ids[:, t], eager_cache),
                                       atol=1e-2, rtol=1e-2)


@needs_compiler
def test_int8_weights_through_a_folded_package_multiply_by_the_int8_weights(tmp_path, monkeypatch, capsys):
    """An int8 model's package (inductor's weight-only int8 GEMM, weights folded in), built by
    ``attnlab compile --quantize int8`` and then loaded for the same model quantised in memory: its
    logits at every position are the float step's with the int8 weights, within bfloat16's rounding
    of the products' inputs and results (a wrong scale or row would be off by far more)."""
    from attnlab.cli.main import main

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(aot, "_int8_products", lambda model, layout: "weight-only")  # integer: the next test
    model = lm()
    model.save_pretrained(tmp_path / "model")
    assert main(["compile", "--model", str(tmp_path / "model"), "--quantize", "int8"]) == 0
    assert str(tmp_path / "aot") in capsys.readouterr().out
    calls = _no_build(monkeypatch)  # the verb's package is the one this model gets
    quantized = copy.deepcopy(model).quantize("int8")
    torch.manual_seed(1)
    _assert_weight_only_logits(model, quantized, torch.randint(1, 23, (1, 33)))
    assert len(list((tmp_path / "aot").glob("*.pt2"))) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        tokens = generate(quantized, [[3, 4, 5]], max_new_tokens=20, greedy=True, compile="aot")
    assert len(tokens[0]) == 20 and len(list((tmp_path / "aot").glob("*.pt2"))) == 1 and calls == []


@needs_compiler
def test_an_int8_one_row_package_multiplies_in_integers_as_the_eager_step(tmp_path, monkeypatch):
    """A one-row int8 step where the products go in integers (aot._int8_products: "integer"):
    teacher-forced from one cache each position, its logits are the eager step's with the same
    products (the integer product run eagerly) within float32 rounding, and, where the eager
    int8 kernel takes full-range inputs (the one place the package is built so), the plain eager
    int8 step's, with its greedy tokens. Float32 rounding can move an input across a code's
    boundary (one code: ~1e-3 here; 0 of 2,900 positions on the development CPU), so a few
    positions may differ by that; the weight-only product differs by it at every position."""
    from attnlab.linear import products_for_folding
    from attnlab.quantize import full_range_inputs, integer_products, integer_sums_pay

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(aot, "_int8_products", lambda model, layout: "integer")
    eager_arithmetic = full_range_inputs() and integer_sums_pay()  # where the rule would choose integers
    quantized = lm().quantize("int8")
    torch.manual_seed(1)
    ids = torch.randint(1, 23, (1, 33))
    close = {"integer": 0, "plain": 0}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback: the package must build
        for t in range(4, 33):
            cache = quantized.new_cache(1, 33, fixed_shape=True)
            quantized.prefill(ids[:, :t], cache)
            integer_cache, plain_cache = copy.deepcopy(cache), copy.deepcopy(cache)
            got = aot.aot_step(quantized, "causal", cache, quiet=True)(ids[:, t], cache)
            with products_for_folding(), integer_products():
                integer = quantized.step(ids[:, t], integer_cache)
            plain = quantized.step(ids[:, t], plain_cache)
            for name, expected in (("integer", integer), ("plain", plain)):
                if name == "integer" or eager_arithmetic:
                    torch.testing.assert_close(got, expected, atol=5e-2, rtol=0)  # a wrong scale or row: far more
                    close[name] += bool(torch.allclose(got, expected, atol=1e-5, rtol=1e-5))
    assert close["integer"] >= 26, close
    manifest = json.loads(next((tmp_path / "aot").glob("*.json")).read_text())
    assert manifest["structure"]["int8_products"] == "integer"
    if eager_arithmetic:
        assert close["plain"] >= 26, close
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            assert generate(quantized, [[3, 4, 5]], max_new_tokens=20, greedy=True, compile="aot") == \
                generate(quantized, [[3, 4, 5]], max_new_tokens=20, greedy=True)


@needs_compiler
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the integer pairs kernel is AVX2 code")
def test_an_int8_one_row_package_in_seven_bit_codes_multiplies_in_its_own_integer_kernel(tmp_path, monkeypatch):
    """A one-row int8 step whose products are 7-bit codes by int8 weights (aot._int8_products: "codes",
    an AVX2 CPU's rule), built with AVX2 code on any x86 CPU: every product is the build's integer pairs
    kernel (aot._PAIRS; columns in blocks of 64 and a tail, depths of 64 and 72), and teacher-forced its
    logits are the eager step's with the same products (Int8Weight.codes_product run eagerly) within the
    bfloat16 roundings of the products' results; a wrong column, pair or zero point is far off."""
    from attnlab.linear import products_for_folding
    from attnlab.quantize import code_products

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # the build's inductor writes AVX2 code
    monkeypatch.setattr(aot, "_int8_products", lambda model, layout: "codes")
    torch.manual_seed(0)
    quantized = attnlab.create_model("lm_tiny", vocab_size=23, d_model=64, num_heads=2, d_ff=72, num_layers=1,
                                     max_positions=40).eval().quantize("int8")
    ids = torch.randint(1, 23, (1, 30), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback: the package must build
        fixed_cache, eager_cache = quantized.new_cache(1, 30, fixed_shape=True), quantized.new_cache(1, 30)
        quantized.prefill(ids[:, :4], fixed_cache)
        quantized.prefill(ids[:, :4], eager_cache)
        step = aot.aot_step(quantized, "causal", fixed_cache, quiet=True)
        worst = 0.0
        for t in range(4, 30):
            got = step(ids[:, t], fixed_cache)
            with products_for_folding(), code_products():
                expected = quantized.step(ids[:, t], eager_cache)
            worst = max(worst, float((got - expected).abs().max() / expected.abs().max()))
    assert worst < 0.03, worst
    (package,) = (tmp_path / "aot").glob("*.pt2")
    code = _package_code(package)
    assert code.count("_micro_gemm_pairs<accum>(") == 5  # every product: qkv, out, two feed-forward, head
    assert "micro_gemm_kernel<" not in code  # (the head's 23 columns: the kernel's tail, in the same calls)
    structure = json.loads(package.with_suffix(".json").read_text())["structure"]
    assert structure["int8_products"] == "codes" and structure["pairs_kernel"]


def test_int8_products_in_integers_for_one_row_within_a_quarter_of_the_cache(monkeypatch):
    """How an int8 package multiplies (aot._int8_products): in integers for a one-row step
    whose int8 weights take at most a quarter of the last-level cache, on a CPU whose eager
    kernel takes full-range inputs; in 7-bit codes by the build's own kernel for the same step on
    an AVX2 CPU whose kernel takes 7-bit inputs; weight-only otherwise; a float model has no int8
    products."""
    model = lm().quantize("int8")
    size = sum(m.weight.values.numel() for m in model.modules() if hasattr(m, "weight_row_sums"))
    monkeypatch.setattr(aot, "full_range_inputs", lambda: True)
    monkeypatch.setattr(aot, "integer_sums_pay", lambda: True)
    monkeypatch.setattr(aot, "last_level_cache_bytes", lambda: 4 * size)
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "integer"
    assert aot._int8_products(model, aot.Layout("image", batch=1, capacity=16)) == "integer"
    assert aot._int8_products(model, aot.Layout("causal", batch=2)) == "weight-only"
    assert aot._int8_products(model, aot.Layout("search", batch=None, beam=4)) == "weight-only"
    monkeypatch.setattr(aot, "last_level_cache_bytes", lambda: 4 * size - 1)
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "weight-only"
    monkeypatch.setattr(aot, "last_level_cache_bytes", lambda: 0)  # unknown
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "weight-only"
    monkeypatch.setattr(aot, "last_level_cache_bytes", lambda: 1 << 40)
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "integer"
    monkeypatch.setattr(aot, "integer_sums_pay", lambda: False)  # it clips its sums, or is slow (no VNNI)
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "weight-only"
    monkeypatch.setattr(aot, "integer_sums_pay", lambda: True)
    monkeypatch.setattr(aot, "full_range_inputs", lambda: False)  # 7-bit inputs: integers would differ from eager
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "weight-only"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # 7-bit codes, own kernel
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "codes"
    assert aot._int8_products(model, aot.Layout("image", batch=1, capacity=16)) == "codes"
    assert aot._int8_products(model, aot.Layout("causal", batch=2)) == "weight-only"
    assert aot._int8_products(model, aot.Layout("search", batch=None, beam=4)) == "weight-only"
    monkeypatch.setattr(aot, "last_level_cache_bytes", lambda: 4 * size - 1)  # beyond a quarter: memory-bound
    assert aot._int8_products(model, aot.Layout("causal", batch=1)) == "weight-only"
    assert aot._int8_products(lm(), aot.Layout("causal", batch=1)) is None


_CLIPPED = """
import json, torch
import attnlab
from attnlab.generation import aot
from attnlab.quantize import integer_sums_exact
a, b = torch.full((1, 64), 127, dtype=torch.int8), torch.full((8, 64), 127, dtype=torch.int8)
torch.manual_seed(0)
model = attnlab.create_model("lm_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24, num_layers=2,
                             max_positions=40).eval().quantize("int8")
print(json.dumps({"exact": int(torch._int_mm(a, b.t())[0, 0]) == 127 * 127 * 64, "probe": integer_sums_exact(),
                  "products": aot._int8_products(model, aot.Layout("causal", batch=1))}))
"""


def test_no_integer_products_where_onednns_int8_product_clips_its_sums():
    """oneDNN held to AVX2 (no VNNI) adds pairs of 8-bit products in 16 bits and clips them (all
    127s over 64 columns: 8,160 for 1,032,256), while FBGEMM's probe may still say full range:
    the probe of torch._int_mm itself keeps such a machine on the weight-only product."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}
    run = subprocess.run([sys.executable, "-c", _CLIPPED], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert answer["probe"] == answer["exact"]
    if not answer["exact"]:
        assert answer["products"] == "weight-only"


def test_int8_weights_kept_outside_decode_eagerly_and_say_why(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("ATTNLAB_AOT_WEIGHTS", "outside")
    model = lm()
    model.quantize("int8")
    with pytest.warns(RuntimeWarning, match="int8.*only with its weights folded in.*; decoding eagerly"):
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="aot")
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True)
    assert not list(tmp_path.rglob("*.pt2"))


def _package_calls(monkeypatch) -> list[str]:
    """The keys of the packages run, a call each (AotStep.__call__)."""
    ran = []
    call = aot.AotStep.__call__
    monkeypatch.setattr(aot.AotStep, "__call__", lambda self, *args, **kwargs: (ran.append(self.key),
                                                                                call(self, *args, **kwargs))[1])
    return ran


def test_auto_decodes_through_a_built_package_and_never_builds_one(cache_dir, monkeypatch):
    """compile="auto" (the decoding verbs' default): the package already built for this model and batch is
    loaded and run, the eager tokens; for a batch no package was built for, the eager step, nothing built
    and nothing said."""
    calls, ran = _no_build(monkeypatch), _package_calls(monkeypatch)
    model = lm()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=12, greedy=True, compile="auto")
        assert set(ran) == {cache_dir[1].stem} and len(ran) == 11  # every step after the prefill's
        sampled = generate(model, [[3, 4]], max_new_tokens=12, seed=5, top_k=5, compile="auto")
        ran.clear()
        two = generate(model, [[3, 4, 5], [6]], max_new_tokens=12, greedy=True, compile="auto")
    assert ran == [] and calls == []
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=12, greedy=True)
    assert sampled == generate(model, [[3, 4]], max_new_tokens=12, seed=5, top_k=5)
    assert two == generate(model, [[3, 4, 5], [6]], max_new_tokens=12, greedy=True)
    with torch.no_grad():  # written in place after the package served: never run with the old weights
        model.decoder.embed.weight.mul_(-1.7).add_(0.05)
    with pytest.warns(RuntimeWarning, match="compile='auto': .* hold other weights than the model's"):
        changed = generate(model, [[3, 4, 5]], max_new_tokens=12, greedy=True, compile="auto")
    assert changed == generate(model, [[3, 4, 5]], max_new_tokens=12, greedy=True) and ran == [] and calls == []


def test_auto_without_a_package_decodes_eagerly_writes_nothing_and_says_nothing(tmp_path, monkeypatch):
    """No package built: every decoding function's "auto" runs the eager step on its default cache (no
    fixed-shape cache made for a package: its eager fallback is slower), creates no cache directory, builds
    nothing and warns of nothing; the tokens and images are the eager ones."""
    from attnlab.generation import sample_images

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    calls, ran = _no_build(monkeypatch), _package_calls(monkeypatch)
    fixed = []
    made = StaticKVCache.__init__
    monkeypatch.setattr(StaticKVCache, "__init__", lambda self, *args, fixed_shape=False, **kwargs: (
        fixed.append(fixed_shape), made(self, *args, fixed_shape=fixed_shape, **kwargs))[1])
    model = lm()
    torch.manual_seed(0)
    translator = attnlab.create_model("transformer_tiny", vocab_size=24).eval()
    src = torch.randint(4, 24, (3, 7))
    torch.manual_seed(0)
    images = attnlab.create_model("imagetransformer_mnist_small", height=4, width=4, channels=1, d_model=16,
                                  num_heads=2, d_ff=24, num_layers=2, dropout=0.0,
                                  attention={"name": "local_1d", "block_length": 8}).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="auto")
        window = generate(model, [[3, 4]], max_new_tokens=45, seed=2, sliding_window=True, compile="auto")
        beams = [beam_search(translator, s, beam_size=3, max_len_b=9, compile="auto") for s in (src, src[:1])]
        drawn = sample_images(images, 2, generator=torch.Generator().manual_seed(3), compile="auto")
    assert fixed and not any(fixed) and ran == [] and calls == [] and not (tmp_path / "cache").exists()
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True)
    assert window == generate(model, [[3, 4]], max_new_tokens=45, seed=2, sliding_window=True)
    hypotheses = [[[h.tokens for h in x] for x in found] for found in beams]
    assert hypotheses == [[[h.tokens for h in x] for x in beam_search(translator, s, beam_size=3, max_len_b=9)]
                          for s in (src, src[:1])]
    assert torch.equal(drawn, sample_images(images, 2, generator=torch.Generator().manual_seed(3)))


def test_auto_with_a_package_for_other_weights_says_so_once_and_decodes_eagerly(copied, monkeypatch):
    """A package of this structure built for other weights (the model trained since it was compiled): "auto"
    never runs it and never rebuilds it (25-140 s a default must not start); one warning names it."""
    calls, ran = _no_build(monkeypatch), _package_calls(monkeypatch)
    model = lm()
    with torch.no_grad():
        model.decoder.stack.layers[0].ffn.linear1.weight.mul_(1.5)
    with pytest.warns(RuntimeWarning, match=r"compile='auto': the packages of this step in .* hold other weights "
                                            r"than the model's .*attnlab compile.*; decoding eagerly"):
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="auto")
    with warnings.catch_warnings():  # said once per model and reason
        warnings.simplefilter("error")
        generate(model, [[3]], max_new_tokens=3, greedy=True, compile="auto")
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True) and ran == [] and calls == []
    with pytest.warns(RuntimeWarning, match="test: no build here; decoding eagerly"):  # what "auto" found is not
        generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="aot")  # in the way of a build
    assert len(calls) == 1
    own = copied.parent / f"{aot._folded_name(copied.stem.split('-')[0], aot.weights_digest(model))}.pt2"
    shutil.copy2(copied, own)  # a file at these weights' package's name that attnlab did not write: said so
    same = lm()  # (a model of its own: the answer kept for the first is kept with its state)
    with torch.no_grad():
        same.decoder.stack.layers[0].ffn.linear1.weight.mul_(1.5)
    with pytest.warns(RuntimeWarning, match=r"compile='auto': .*\.pt2 exists but attnlab did not write it"):
        assert generate(same, [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="auto") == tokens
    assert own.exists() and ran == [] and len(calls) == 1


def test_auto_finds_a_package_built_after_it_found_none(copied, tmp_path, monkeypatch):
    """The answer "none built" is kept with the model's state, but not past a manifest of its key appearing
    (built by `attnlab compile` in another process): the next decode loads it."""
    empty = tmp_path / "empty"
    monkeypatch.setenv("ATTNLAB_CACHE", str(empty))
    calls, ran = _no_build(monkeypatch), _package_calls(monkeypatch)
    model = lm()
    first = generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="auto")
    assert ran == [] and not empty.exists()
    (empty / "aot").mkdir(parents=True)  # another model's package there: this one's looked for, none found
    (empty / "aot" / f"{'0' * 32}-{'0' * aot.WEIGHTS_IN_NAME}.json").write_text('{"written_by": "attnlab"}')
    settled = time.time_ns() - 10 * aot.STAMP_SETTLED_NS  # (a directory time just set cannot be trusted)
    os.utime(empty / "aot", ns=(settled, settled))
    looks = []
    built = aot._built
    monkeypatch.setattr(aot, "_built", lambda *args, **kwargs: (looks.append(args), built(*args, **kwargs))[1])
    for _ in range(2):  # the second time, the answer kept: the directory has not changed
        assert generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="auto") == first and ran == []
    assert len(looks) == 1
    for path in (copied, copied.with_suffix(".json")):
        shutil.copy2(path, empty / "aot" / path.name)
    assert generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="auto") == first
    assert set(ran) == {copied.stem} and calls == [] and len(looks) == 2


def test_past_folded_kept_packages_of_a_structure_a_build_removes_the_least_recently_used(tmp_path):
    """A package per set of weights, but not without end (each a copy of the weights): past FOLDED_KEPT of one
    structure, the build removes the least recently used (its manifest's time, which a load sets), its package
    first; never the one just built, one whose lock another process holds (being loaded or rebuilt), another
    structure's, or files attnlab did not write."""
    import fcntl

    key, other_key = "a" * 32, "b" * 32

    def made(structure: str, weights: str, used: int, ours: bool = True) -> aot._Paths:
        paths = aot._Paths(tmp_path, aot._folded_name(structure, weights * 64))
        paths.manifest.write_text(json.dumps({"written_by": "attnlab" if ours else "someone", "bytes": 7}))
        paths.package.write_bytes(b"package")
        os.utime(paths.manifest, ns=(used, used))
        return paths

    locked, oldest, foreign = made(key, "1", 10), made(key, "2", 15), made(key, "3", 20, ours=False)
    old, recent, newest = made(key, "4", 30), made(key, "5", 40), made(key, "6", 50)
    other = made(other_key, "7", 1)
    built = made(key, "8", 5)  # (just built: its time does not matter)
    stray = tmp_path / f"{key}-notours.json"  # not a package's name
    stray.write_text("{}")
    legacy = aot._Paths(tmp_path, key)  # built before packages were named for their weights: replaced
    legacy.manifest.write_text(json.dumps({"written_by": "attnlab", "bytes": 7}))
    legacy.package.write_bytes(b"package")
    linked = made(key, "9", 1)  # the least used, but its package a symlink to a user's file: not attnlab's
    users = tmp_path / "users-file"
    users.write_bytes(b"the user's")
    linked.package.unlink()
    linked.package.symlink_to(users)
    fd = os.open(locked.lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        aot._remove_least_used(tmp_path, key, built)
    finally:
        os.close(fd)

    def there(*all_paths):
        return {paths.package.stem for paths in all_paths if paths.package.exists() and paths.manifest.exists()}

    # the one built and FOLDED_KEPT - 1 more of attnlab's, most recently used first: newest, recent, old; the
    # others removed (oldest), but for the one whose lock is held; not attnlab's: neither counted nor removed
    assert aot.FOLDED_KEPT == 4 and not oldest.package.exists() and not oldest.manifest.exists()
    assert not legacy.package.exists() and not legacy.manifest.exists()
    staying = (locked, foreign, old, recent, newest, other, built)
    assert there(oldest, *staying) == there(*staying) and len(there(*staying)) == 7 and stray.exists()
    aot._remove_least_used(tmp_path, key, built)  # the lock free: removed too
    assert there(*staying) == there(*staying[1:]) and len(there(*staying[1:])) == 6
    assert not locked.package.exists() and not locked.manifest.exists()
    assert linked.package.is_symlink() and linked.manifest.exists() and users.read_bytes() == b"the user's"


def test_a_directory_time_just_set_is_not_taken_for_its_listing(tmp_path):
    """compile="auto" keeps whether the package cache holds any manifest by the directory's modification time;
    a manifest added within the file system's clock tick of a look leaves that time as it was, so a time under
    STAMP_SETTLED_NS old is looked behind every time, and an older one kept."""
    directory = tmp_path / "aot"
    directory.mkdir()
    now = time.time_ns()
    os.utime(directory, ns=(now, now))
    assert not aot._holds_packages(directory)
    (directory / "package.json").write_text("{}")
    os.utime(directory, ns=(now, now))  # as if in the same tick as the first look
    assert aot._holds_packages(directory)
    settled = now - 10 * aot.STAMP_SETTLED_NS
    os.utime(directory, ns=(settled, settled))
    assert aot._holds_packages(directory)
    (directory / "package.json").unlink()
    os.utime(directory, ns=(settled, settled))  # a listing changed under a time already settled: kept
    assert aot._holds_packages(directory)


def test_the_decoding_verbs_default_to_auto():
    from attnlab.cli.main import build_parser
    from attnlab.cli.options import decode_compile

    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for verb in ("generate", "translate", "caption", "sample-images", "generate-music"):
        action = next(a for a in verbs[verb]._actions if a.dest == "compile")
        assert action.default == "auto" and action.choices == ("auto", "aot", "off"), verb
    assert [decode_compile(type("Args", (), {"compile": mode})) for mode in ("auto", "aot", "off")] == \
        ["auto", "aot", False]


def test_compile_values_are_checked():
    with pytest.raises(ValueError, match="compile='fast' must be False, True"):
        generate(lm(), [[3]], max_new_tokens=2, compile="fast")
    with pytest.raises(ValueError, match="sliding_window"):
        generate(lm(), [[3]], max_new_tokens=2, compile="aot", sliding_window=True)


def test_the_compile_verb_finds_the_built_package(cache_dir, tmp_path, monkeypatch, capsys):
    from attnlab.cli.main import main

    calls = _no_build(monkeypatch)
    lm().save_pretrained(tmp_path / "model")
    assert main(["compile", "--model", str(tmp_path / "model")]) == 0
    assert str(cache_dir[1]) in capsys.readouterr().out and calls == []
    attnlab.create_model("vit_tiny_patch4_28").save_pretrained(tmp_path / "vit")
    assert main(["compile", "--model", str(tmp_path / "vit")]) == 2
    assert "no step-by-step decoding" in capsys.readouterr().err


@needs_compiler
def test_one_source_is_encoded_through_a_package_as_the_eager_encoder_encodes_it(tmp_path, monkeypatch, capsys):
    """A search of one source without padding under compile="aot" encodes it through a package of its own
    (aot.aot_encode; `attnlab compile --model DIR`, batch 1, builds it with the step's): the memory, mask
    and cross-attention keys and values are the eager encoder's within float rounding at every source
    length (one package for them all), and beam search through both packages and greedy search through the
    encoder's give the eager hypotheses. A padded source, one of one token, two sources, a model in training mode or with int8
    weights encode eagerly; ids out of range are the eager encoder's error."""
    from attnlab.cli.main import main
    from attnlab.generation import greedy_search, search

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=24).eval()
    model.save_pretrained(tmp_path / "model")
    assert main(["compile", "--model", str(tmp_path / "model")]) == 0
    out = capsys.readouterr().out
    assert "(search step, beam 4" in out and "(encoder, one source)" in out
    calls = _no_build(monkeypatch)  # both packages loaded from here on
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for length in (2, 9, 17):
            src = torch.randint(4, 24, (1, length))
            memory, mask, keys_values = aot.aot_encode(model, src)
            eager_memory, eager_mask = model.encode(src)
            torch.testing.assert_close(memory, eager_memory, **TOLERANCE)
            assert torch.equal(mask, eager_mask)
            for got, expected in zip(keys_values, model.decoder.memory_keys_values(eager_memory), strict=True):
                torch.testing.assert_close(got, expected, **TOLERANCE)
        options = dict(max_len_a=0, max_len_b=12)
        sources = (torch.randint(4, 24, (1, 11)), torch.randint(4, 24, (1, 4)))
        for src in sources:
            compiled = beam_search(model, src, beam_size=4, nbest=2, compile="aot", **options)
            eager = beam_search(model, src, beam_size=4, nbest=2, **options)
            assert [[h.tokens for h in x] for x in compiled] == [[h.tokens for h in x] for x in eager]
        monkeypatch.setattr(search, "use_aot", lambda *args, **kwargs: None)  # greedy's steps eager (no package)
        for src in sources:
            assert [h.tokens for h in greedy_search(model, src, compile="aot", **options)] == \
                [h.tokens for h in greedy_search(model, src, **options)]
    assert calls == []
    src = torch.randint(4, 24, (1, 6))
    padded = src.clone()
    padded[0, 4:] = model.config.pad_id
    assert aot.aot_encode(model, padded) is None and aot.aot_encode(model, src[:, :1]) is None
    assert aot.aot_encode(model, src.expand(2, -1)) is None
    assert aot.aot_encode(model.train(), src) is None and aot.aot_encode(model.eval(), src) is not None
    assert aot.aot_encode(copy.deepcopy(model).quantize("int8"), src) is None
    with pytest.raises(ValueError, match="src_ids"):
        aot.aot_encode(model, torch.full((1, 5), 24))
    assert calls == []


def _screened_lm():
    """A head of 1,500 rows (screened, attnlab.head_screen) whose rows 1000-1499 are equal: where they
    are the best, 500 rows tie and the screen is never sure."""
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=1500, d_model=32, num_heads=4, d_ff=48, num_layers=2,
                                 max_positions=64).eval()
    with torch.no_grad():
        model.decoder.head.weight[1000:] = model.decoder.head.weight[1000]
    return model


@needs_compiler
@pytest.mark.skipif(not integer_sums_exact(), reason="torch._int_mm does not sum exactly here: no head screen")
def test_a_greedy_package_screens_its_head_and_gives_the_eager_tokens(tmp_path, monkeypatch, capsys):
    """Greedy, one row, a head it screens: the package returns (next_tokens, sure, hidden) (layout.greedy);
    its tokens are the eager ones, sure or resolved from its hidden state by the whole product, at every
    position teacher-forced (so a near-tie cannot make the two runs feed different tokens) and through
    generate; where the 500 equal rows are the best it is never sure (the first of them is the token).
    Run wherever torch._int_mm is exact, also where the screen would not be taken for speed (no VNNI)."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(parts, "integer_sums_pay", lambda: True)
    model = _screened_lm()
    steps = []

    def resolve(tokens, sure, hidden, logits_of):
        resolved = head_screen.resolve(tokens, sure, hidden, logits_of)
        steps.append((bool(sure.all()), int(resolved[0])))
        return resolved

    monkeypatch.setattr(sampling, "resolve", resolve)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback: the package must build
        for prompt in ([3, 1200], [1300, 9, 11]):
            assert generate(model, [prompt], max_new_tokens=30, greedy=True, compile="aot") == \
                generate(model, [prompt], max_new_tokens=30, greedy=True)
    assert len(steps) == 58 and any(sure for sure, _ in steps)
    assert all(not sure for sure, token in steps if token >= 1000)  # 500 rows tie: never sure
    ids = torch.randint(1, 1500, (1, 36), generator=torch.Generator().manual_seed(3))
    ids[0, 20:28] = torch.arange(1000, 1008)
    fixed_cache, eager_cache = model.new_cache(1, 36, fixed_shape=True), model.new_cache(1, 36)
    step = aot.aot_step(model, "causal", fixed_cache, greedy=True)
    assert step.layout.greedy and len(list((tmp_path / "aot").glob("*.pt2"))) == 1
    sure_count = 0
    with torch.inference_mode():
        model.prefill(ids[:, :4], fixed_cache)
        model.prefill(ids[:, :4], eager_cache)
        for t in range(4, 36):
            tokens, sure, hidden = step(ids[:, t], fixed_cache)
            logits = model.step(ids[:, t], eager_cache)
            torch.testing.assert_close(model.step_logits(hidden), logits, **TOLERANCE)
            best = logits.argmax(dim=-1)
            unsure = torch.zeros_like(sure)
            assert head_screen.resolve(tokens, unsure, hidden, model.step_logits).tolist() == best.tolist()
            top2 = logits.topk(2, dim=-1).values[0]
            if bool(sure[0]) and float(top2[0] - top2[1]) > 1e-4:  # no float32 near-tie: the eager argmax
                assert tokens.tolist() == best.tolist()
                sure_count += 1
    assert sure_count >= 8
    from attnlab.cli.main import main

    calls = _no_build(monkeypatch)  # `attnlab compile --greedy` finds that package (the sampling one is another)
    model.save_pretrained(tmp_path / "model")
    assert main(["compile", "--model", str(tmp_path / "model"), "--greedy"]) == 0
    assert f"{step.path} (greedy causal step, batch 1" in capsys.readouterr().out and calls == []


def test_only_a_one_row_folded_step_whose_greedy_step_is_its_steps_screens_its_head():
    from attnlab.models.lm import DecoderLM
    from attnlab.models.music import MusicTransformer

    class Masked(DecoderLM):  # a subclass that changes step: its greedy step would not be its step's
        def step(self, tokens, cache):
            return super().step(tokens, cache)

    model = _screened_lm()
    assert aot.screens_head(model, 1, folded=True)
    assert not aot.screens_head(model, 2, folded=True) and not aot.screens_head(model, 1, folded=False)
    assert aot.screens_head(MusicTransformer.__new__(MusicTransformer), 1, folded=True)
    assert not aot.screens_head(Masked.__new__(Masked), 1, folded=True)
    assert not aot.screens_head(attnlab.create_model("vit_tiny_patch4_28"), 1, folded=True)


# -- the other families (each builds its own package: slow) ------------------------------------
@needs_compiler
@pytest.mark.slow
def test_a_padded_batch_gives_the_eager_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    model = lm()
    prompts = [[3, 4, 5, 6, 7], [8, 9]]
    assert generate(model, prompts, max_new_tokens=20, greedy=True, compile="aot") == \
        generate(model, prompts, max_new_tokens=20, greedy=True)


@needs_compiler
@pytest.mark.slow
def test_music_relative_attention_through_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24, num_layers=2,
                                 max_positions=40, positional="none",
                                 attention={"name": "relative_skew", "max_relative_position": 12}).eval()
    torch.manual_seed(1)
    _teacher_forced(model, None, torch.randint(1, 23, (1, 30)), prompt=3)


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("attention", [{"name": "local_1d", "block_length": 8},
                                       {"name": "local_2d", "query_shape": [2, 3], "memory_flange": [1, 2]}])
def test_image_samples_through_the_package(attention, tmp_path, monkeypatch):
    from attnlab.generation import sample_images

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = attnlab.create_model("imagetransformer_mnist_small", height=6, width=6, channels=1, d_model=16,
                                 num_heads=2, d_ff=24, num_layers=2, dropout=0.0, attention=attention).eval()
    assert torch.equal(sample_images(model, 2, temperature=0, compile="aot"), sample_images(model, 2, temperature=0))
    draws = [sample_images(model, 2, generator=torch.Generator().manual_seed(3), compile=mode) for mode in ("aot", False)]
    assert torch.equal(*draws)
    calls, ran = _no_build(monkeypatch), _package_calls(monkeypatch)  # "auto": the package built above
    assert torch.equal(sample_images(model, 2, generator=torch.Generator().manual_seed(3), compile="auto"), draws[1])
    assert len(ran) == 6 * 6 - 1 and calls == []


def _int8_image_model():
    torch.manual_seed(0)
    return attnlab.create_model("imagetransformer_mnist_small", height=6, width=6, channels=1, d_model=16,
                                num_heads=2, d_ff=24, num_layers=2, dropout=0.0,
                                attention={"name": "local_1d", "block_length": 8}).eval().quantize("int8")


@needs_compiler
@pytest.mark.slow
def test_an_int8_image_models_two_row_sample_builds_and_runs_through_the_package(tmp_path, monkeypatch):
    """The shape that killed the process while ATen's int8 kernel was timed during tuning (two rows,
    d_model 16): built among the C++ templates only, no fallback."""
    from attnlab.generation import sample_images

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    model = _int8_image_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback: the package must build and load
        images = sample_images(model, 2, temperature=0, compile="aot")
    assert images.shape == (2, 1, 6, 6) and images.dtype == torch.uint8
    assert len(list((tmp_path / "aot").glob("*.pt2"))) == 1


@needs_compiler
@pytest.mark.slow
def test_an_int8_image_models_one_row_sample_in_integers_is_the_eager_sample(tmp_path, monkeypatch):
    """One row of a small int8 model: the package multiplies in integers where the eager kernel
    takes full-range inputs (its arithmetic: the same samples, greedy and seeded), else by the
    weight-only GEMM; either way it builds and runs with no fallback."""
    from attnlab.generation import sample_images
    from attnlab.quantize import full_range_inputs

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    model = _int8_image_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        greedy = sample_images(model, 1, temperature=0, compile="aot")
        seeded = sample_images(model, 1, generator=torch.Generator().manual_seed(3), compile="aot")
    products = json.loads(next((tmp_path / "aot").glob("*.json")).read_text())["structure"]["int8_products"]
    assert products == aot._int8_products(model, aot.Layout("image", batch=1, capacity=36))
    if products == "integer":
        assert full_range_inputs()
        assert torch.equal(greedy, sample_images(model, 1, temperature=0))
        assert torch.equal(seeded, sample_images(model, 1, generator=torch.Generator().manual_seed(3)))
    assert greedy.shape == seeded.shape == (1, 1, 6, 6)


@needs_compiler
@pytest.mark.slow
def test_beam_and_greedy_search_through_the_package(tmp_path, monkeypatch):
    from reference.aot_search import assert_search_through_the_package

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny").eval()
    src = torch.randint(4, 60, (5, 9))
    src[1, 6:] = 0
    src[3, 4:] = 0  # padded sources
    # Every search's cache in memory an earlier one gave back, handed over full of NaN: the package
    # reads the slots past the prefix (masked: NaN * 0 = NaN), so they must be made zeros again.
    take, served = cache_module._BufferPool.take, []

    def poisoned(pool, *args):
        buffer = take(pool, *args)
        if buffer is not None:
            served.append(buffer.fill_(float("nan")))
        return buffer

    monkeypatch.setattr(cache_module._BufferPool, "take", poisoned)
    # max_len_b past two CAPACITY_STEPs: the cache grows under the package twice
    assert_search_through_the_package(model, (src, src[:1]), beam=4, nbest=2, max_len_a=0, max_len_b=40)
    cache_module.release_cache_memory()

    def search(**options):
        return [[h.tokens for h in x] for x in beam_search(model, src, beam_size=4, nbest=2, max_len_a=0,
                                                          max_len_b=40, **options)]

    first = search(compile="aot")
    before = len(served)
    # in the memory the first gave back alone: its keys and values and reorder's second buffers (NaN)
    assert search(compile="aot") == first == search()
    assert len(served) - before >= 2 * len(model.decoder.stack.layers)
    calls, ran = _no_build(monkeypatch), _package_calls(monkeypatch)  # "auto": the packages built above
    assert search(compile="auto") == first and ran and calls == []
    ran.clear()
    one = [h.tokens for x in beam_search(model, src[:1], beam_size=4, max_len_a=0, max_len_b=40, compile="auto")
           for h in x]
    assert one == [h.tokens for x in beam_search(model, src[:1], beam_size=4, max_len_a=0, max_len_b=40) for h in x]
    assert ran and calls == []


@needs_compiler
@pytest.mark.slow
def test_an_int8_translation_models_search_step_through_the_package(tmp_path, monkeypatch):
    """The search layout with int8 weights (cross-attention's query rows an int8 slice): the
    package's log-probabilities (one row a source: greedy search's package), teacher-forced over 3
    padded sources, are as close to the float step's with the int8 weights as the eager int8 step's
    are (its inputs quantised to 8 or 7 bits, the package's rounded to bfloat16; the encoder and
    cross-attention keys, eager int8 in both); beam search runs through its own package (candidates)
    with no fallback."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny").eval()
    quantized = copy.deepcopy(model).quantize("int8")
    reference = _dequantized_copy(model, quantized)
    src = torch.randint(4, 60, (3, 9))
    src[1, 5:] = 0
    targets = torch.randint(4, 60, (12, 10))
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        memory, memory_mask = quantized.encode(src)
        # one row per source: a package of log-probabilities (beam search's gives candidates, tested below)
        targets = targets[::4]
        fixed_cache = quantized.new_step_cache(memory, rows_per_source=1, capacity=16, fixed_shape=True)
        ref_memory, _ = reference.encode(src)
        eager_cache = reference.new_step_cache(ref_memory, rows_per_source=1, capacity=16)
        int8_cache = quantized.new_step_cache(memory, rows_per_source=1, capacity=16)
        step = aot.aot_step(quantized, "search", fixed_cache, beam=1, memory_mask=memory_mask, quiet=True)
        package_error = eager_error = 0.0
        for t in range(targets.shape[1]):
            expected = torch.log_softmax(reference.decode_step(targets[:, t], eager_cache, memory_mask), dim=-1)
            package_error = max(package_error, (step(targets[:, t], fixed_cache, memory_mask) - expected).abs().max())
            eager_error = max(eager_error, (torch.log_softmax(quantized.decode_step(targets[:, t], int8_cache,
                                                                                    memory_mask), dim=-1)
                                            - expected).abs().max())
        assert package_error <= 1.5 * eager_error, (package_error, eager_error)
        beam_search(quantized, src, beam_size=4, compile="aot", max_len_a=0, max_len_b=12)


def test_without_a_compiler_a_beam_search_steps_eagerly_over_the_filled_prefix(tmp_path, monkeypatch):
    """No package: the cache made for one (fixed-shape, grown as the hypotheses are) becomes the eager
    step's, attending the filled prefix at its full capacity, and the hypotheses are the eager search's."""
    from attnlab.generation import search

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=24).eval()
    src = torch.randint(4, 24, (3, 7))
    src[1, 5:] = 0
    sizes, shapes = [], []
    resize = StaticKVCache.resize
    monkeypatch.setattr(StaticKVCache, "resize", lambda self, capacity: (sizes.append(capacity), resize(self, capacity)))
    decode_step = type(model).decode_step
    monkeypatch.setattr(type(model), "decode_step", lambda self, tokens, cache, memory_mask: (
        shapes.append((cache.fixed_shape, cache.capacity)), decode_step(self, tokens, cache, memory_mask))[1])
    options = dict(beam_size=3, nbest=2, max_len_a=0, max_len_b=2 * search.CAPACITY_STEP + 5)
    with pytest.warns(RuntimeWarning, match="decoding eagerly"):
        compiled = beam_search(model, src, compile="aot", **options)
    full = 2 * search.CAPACITY_STEP + 6  # made for max_len_b + 1 positions, grown from CAPACITY_STEP for a package
    assert sizes == [search.CAPACITY_STEP, full]  # and back to full when there was none
    assert set(shapes) == {(False, full)}
    sizes.clear()
    eager = beam_search(model, src, **options)
    assert [[h.tokens for h in x] for x in compiled] == [[h.tokens for h in x] for x in eager]
    assert max(len(h.tokens) for x in eager for h in x) > 2 * search.CAPACITY_STEP
    assert sizes == []  # the eager search's own cache: made at full size


def test_without_a_compiler_an_image_sample_steps_eagerly_over_the_default_cache(tmp_path, monkeypatch):
    """No package: the sample's steps run on the cache an eager sample makes (over the fixed-shape one
    made for the package a sample took 1.9-2.2x the time, docs/benchmarks.md), prefilled again, and
    draw what the eager sample draws, a completion's too."""
    from attnlab.generation import sample_images

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    torch.manual_seed(0)
    model = attnlab.create_model("imagetransformer_mnist_small", height=6, width=6, channels=1, d_model=16,
                                 num_heads=2, d_ff=24, num_layers=2, dropout=0.0,
                                 attention={"name": "local_1d", "block_length": 8}).eval()
    fixed = []
    step = type(model).step
    monkeypatch.setattr(type(model), "step", lambda self, tokens, cache: (fixed.append(cache.fixed_shape),
                                                                        step(self, tokens, cache))[1])
    given = torch.randint(0, 256, (2, 5))
    with pytest.warns(RuntimeWarning, match="decoding eagerly"):
        drawn = sample_images(model, 2, generator=torch.Generator().manual_seed(3), given=given, compile="aot")
    assert len(fixed) == 36 - 5 - 1 and not any(fixed)
    assert torch.equal(drawn, sample_images(model, 2, generator=torch.Generator().manual_seed(3), given=given))
    assert torch.equal(sample_images(model, 1, temperature=0, compile="aot"), sample_images(model, 1, temperature=0))
    assert not any(fixed) and not list(tmp_path.rglob("*.pt2"))


def test_the_exp_polynomial_is_as_close_to_exp_as_float32_allows():
    uniform = torch.rand(10_000, generator=torch.Generator().manual_seed(0))
    x = torch.cat([torch.linspace(-87.0, 0.0, 200_001), -uniform])
    exact = torch.exp(x.double())
    relative = ((aot.exp_polynomial(x).double() - exact) / exact).abs().max().item()
    assert relative < 4e-7  # float32 rounding is 6e-8 a step; here 7.8e-8, torch's own expf 6.2e-8
    assert aot.exp_polynomial(torch.tensor([0.0])).item() == 1.0
    tiny = aot.exp_polynomial(torch.tensor([-100.0, float("-inf")]))
    assert (tiny >= 0).all() and (tiny < 2e-38).all()  # below -87: ~1e-38 (not 0), never NaN


def test_the_fused_log_softmax_is_torchs_within_float_rounding():
    """A search package's log-probabilities (exported: its exp a polynomial inductor compiles into its
    loops) against float64's, with -inf logits (suppressed ids) and rows of any spread."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 8001, generator=generator) * torch.logspace(-2, 1.5, 64)[:, None]
    logits[:, 7] = float("-inf")
    logits[3, :4000] = float("-inf")
    logits[5] += 1000.0  # large logits: shifted by the maximum first
    exact = torch.log_softmax(logits.double(), dim=-1)
    out = aot.log_softmax_fused(logits)
    assert out.dtype == torch.float32 and torch.equal(torch.isneginf(out), torch.isneginf(exact))
    finite = torch.isfinite(exact)
    error = (out.double() - exact)[finite].abs() / exact[finite].abs().clamp(min=1.0)
    assert error.max().item() < 2e-6
    assert torch.allclose(out[finite], torch.log_softmax(logits, dim=-1)[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sources, beam, vocab", [(32, 4, 8001), (3, 4, 64 * 40), (2, 3, 1000), (5, 2, 100),
                                                  (2, 4, 24)])
def test_a_beam_search_packages_candidates_are_the_eager_searchs(sources, beam, vocab):
    """What a beam search package returns (aot.candidates_fused: only the chunks with the largest
    shifted maxima scored, each row's tail always) against search_candidates of the log-probabilities
    (the eager search's): the same scores within float rounding, each naming a (beam, token) that
    scores it; rows with and without a tail, long rows and short (every score), -inf logits, a
    first step's -inf hypotheses, the best continuation in a tail or at a chunk's edge."""
    from reference.aot_search import assert_candidates_match

    generator = torch.Generator().manual_seed(sources * vocab)
    logits = torch.randn(sources * beam, vocab, generator=generator) * 3
    logits[:, 1] = float("-inf")
    logits[0, vocab - 1] = 30.0  # in the tail when vocab is not a multiple of CHUNK
    edge = min(63, vocab - 2)  # the last of a chunk (CHUNK = 64) where the rows are long
    logits[beam, edge] = 30.0
    scores = -torch.rand(sources * beam, generator=generator) * 4
    scores[1:beam] = float("-inf")  # source 0 as at a first step: one live hypothesis
    scores[0] = scores[beam] = 0.0  # the rows with a logit of 30: their best continuations come first
    log_probs = torch.log_softmax(logits.double(), dim=-1).float()
    got = aot.candidates_fused(logits, scores, beam, 2 * beam)
    assert [t.shape for t in got] == [(sources, 2 * beam)] * 3
    assert_candidates_match(tuple(t.unsqueeze(1) for t in got), log_probs.unsqueeze(1), scores, beam,
                            rtol=1e-5, atol=1e-5)
    assert (got[1][0, 0], got[2][0, 0]) == (0, vocab - 1) and (got[1][1, 0], got[2][1, 0]) == (0, edge)


def test_a_search_of_few_rows_gets_its_own_package_layout_with_cpp_products():
    # Beam search at one source (4 rows) and a small batch: a package for at most FEW_ROWS rows,
    # built with every product in inductor's C++ templates; more rows: the package for any number.
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny").eval()

    def layout(sources, beam):
        memory = torch.zeros(sources, 3, model.config.d_model)
        cache = model.new_step_cache(memory, rows_per_source=beam, capacity=8, fixed_shape=True)
        return aot._layout_of(model, "search", cache.positions.shape[0], beam, cache)

    assert layout(1, 4).max_rows == aot.FEW_ROWS == 16 and layout(4, 4).max_rows == 16
    assert layout(5, 4).max_rows is None and layout(32, 4).max_rows is None
    assert layout(1, 1).batch == 1 and layout(1, 1).max_rows is None  # one row: its own fixed layout
    # beam search's packages return each source's 2k best continuations; one row a source: log-probabilities
    assert layout(1, 4).candidates == layout(32, 4).candidates == 8 and layout(4, 1).candidates is None
    assert aot.FEW_ROWS_CONFIGS["max_autotune_gemm_backends"] == "CPP"
    assert aot.FOLDED_CONFIGS["max_autotune_gemm_backends"] == "CPP,ATEN"

    step = aot.AotStep.__new__(aot.AotStep)  # accepts() reads the layout alone
    for sources, fits in ((1, True), (4, True), (5, False)):
        step.layout = layout(1, 4)
        memory = torch.zeros(sources, 3, model.config.d_model)
        cache = model.new_step_cache(memory, rows_per_source=4, capacity=8, fixed_shape=True)
        assert step.accepts(cache) is fits


@needs_compiler
def test_an_int8_package_is_tuned_among_cpp_templates_only_and_never_retried_with_aten(tmp_path, monkeypatch):
    """Timing ATen's _weight_int8pack_mm while tuning killed the process (a segmentation fault in
    its bf16 kernel, an Image Transformer's 2-row int8 step, torch 2.13): an int8 package's build
    offers inductor's C++ templates alone, and when they do not take a product it decodes eagerly."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    calls = []

    def compile_package(exported, package, configs, pairs=False):
        calls.append(configs["max_autotune_gemm_backends"] + (" with the pairs kernel" if pairs else ""))
        raise RuntimeError("test: no template takes it")

    monkeypatch.setattr(aot, "_compile_package", compile_package)
    # weight-only: the templates alone; in 7-bit codes (an AVX2 CPU's one row): the templates alone, with
    # the build's own integer kernel; in integers: torch._int_mm is ATen's alone (no weight-only product to
    # time); none retried
    for products, backends in (("weight-only", "CPP"), ("codes", "CPP with the pairs kernel"),
                               ("integer", "CPP,ATEN")):
        monkeypatch.setattr(aot, "_int8_products", lambda model, layout, products=products: products)
        model = lm().quantize("int8")
        with pytest.warns(RuntimeWarning, match="AOTInductor failed.*no template takes it\\); decoding eagerly"):
            assert aot.use_aot(model, "causal", model.new_cache(1, 8, fixed_shape=True), quiet=True) is None
        assert calls == [backends], products
        calls.clear()
    with pytest.warns(RuntimeWarning, match="AOTInductor failed"):  # a float model: oneDNN among the choices
        model = lm()
        assert aot.use_aot(model, "causal", model.new_cache(1, 8, fixed_shape=True), quiet=True) is None
    assert calls == ["CPP,ATEN"]


@needs_compiler
@pytest.mark.parametrize("capability", ["AVX2", "AVX512"])
def test_a_many_row_search_package_on_avx2_takes_onednns_products_alone(capability, tmp_path, monkeypatch):
    """On an AVX2 CPU a float search package of any number of rows is built with oneDNN's products
    alone (MANY_ROWS_AVX2_CONFIGS: inductor's tuning took a template that ran slower in the step); its
    structure says so, so packages built before are rebuilt; its step is exported with its SiLU apart
    from the product before it (ACTIVATIONS_APART: oneDNN's AVX2 epilogue is slow). Other CPUs, and
    the few-row and int8 packages, are built as before."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("ATTNLAB_SGEMM", "off")  # (with the onednn-cpu-gomp wheel: dnnl_sgemm's, test_sgemm.py)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    calls, activations = [], []

    def compile_package(exported, package, configs, pairs=False):
        calls.append(configs["max_autotune_gemm_backends"])
        targets = {node.target for node in torch.export.load(exported).graph.nodes}
        activations.append(torch.ops.aten.silu.default in targets)
        raise RuntimeError("test: recorded")

    monkeypatch.setattr(aot, "_compile_package", compile_package)
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", activation="silu").eval()
    avx2 = capability == "AVX2"
    # (the few-row package's build retries with oneDNN among the choices when the templates fail)
    for sources, backends, products in ((8, ["ATEN" if avx2 else "CPP,ATEN"], "oneDNN" if avx2 else None),
                                        (2, ["CPP", "CPP,ATEN"], None)):
        memory = torch.zeros(sources, 3, model.config.d_model)
        cache = model.new_step_cache(memory, rows_per_source=4, capacity=8, fixed_shape=True)
        layout = aot._layout_of(model, "search", cache.positions.shape[0], 4, cache)
        structure = aot._structure(model, layout, torch.device("cpu"), torch.float32, aot._step_tensors(model), True)
        assert structure.get("products") == products
        assert structure.get("activations") == ("apart" if products else None)
        with pytest.raises(aot.AotUnavailable, match="AOTInductor failed.*recorded"):
            aot.aot_step(model, "search", cache, beam=4, quiet=True)
        assert calls == backends and activations == [not products] * len(backends)
        calls.clear(), activations.clear()
    assert aot.MANY_ROWS_AVX2_CONFIGS == {**aot.FOLDED_CONFIGS, "max_autotune_gemm_backends": "ATEN"}
    layout = aot.Layout("search", beam=4)  # an int8 model's many-row package: the templates, as before
    assert aot._many_row_products(layout, True, "weight-only", "AVX2") is None
    assert aot._many_row_products(layout, False, None, "AVX2") is None  # weights outside: no products to choose
    assert aot._many_row_products(layout, True, None, "AVX2") == "oneDNN"


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
def test_activations_apart_compute_the_activation(activation):
    """ACTIVATIONS_APART (a package of oneDNN's products): the step's activation written apart from
    its product, within float32 rounding of the eager ATen kernel and of a float64 reference; no
    silu or gelu left in the graph."""
    from attnlab.layers.feedforward import ACTIVATIONS, FeedForward

    torch.manual_seed(0)
    module = FeedForward(16, 40, activation=activation).eval()
    x = torch.randn(64, 16) * 3
    with torch.no_grad():
        exported = torch.export.export(module, (x,), strict=True).run_decompositions(aot.ACTIVATIONS_APART)
        targets = {node.target for node in exported.graph.nodes}
        assert not targets & {torch.ops.aten.silu.default, torch.ops.aten.gelu.default}
        apart = exported.module()(x)
        torch.testing.assert_close(apart, module(x), **TOLERANCE)
        hidden = module.linear1(x).double()
        reference = F.linear(ACTIVATIONS[activation](hidden), module.linear2.weight.double(),
                             module.linear2.bias.double())
        torch.testing.assert_close(apart.double(), reference, **TOLERANCE)


@needs_compiler
def test_a_build_that_crashes_ends_its_own_process_not_the_callers(tmp_path, monkeypatch):
    """The build runs in a child process (a crash in torch's kernels while inductor tunes, as
    ATen's int8 kernel did, must not kill the decoding process): a child killed by a signal
    costs one warning naming it and the eager tokens. The child gets the caller's thread count
    (inductor compiles it into the kernels)."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    seen = tmp_path / "threads"
    monkeypatch.setattr(aot, "_BUILD", f"import os, signal, sys; open({str(seen)!r}, 'w').write(sys.argv[3]); "
                                       "os.kill(os.getpid(), signal.SIGSEGV)")
    model = lm()
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.warns(RuntimeWarning, match="the build process was killed by SIGSEGV.*; decoding eagerly"):
            tokens = generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="aot")
    finally:
        torch.set_num_threads(previous)
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True)
    assert seen.read_text() == "1"
    assert not list((tmp_path / "cache").rglob("*.pt2")) and not list((tmp_path / "cache").rglob(".*tmp-*"))


@needs_compiler
def test_a_build_without_room_for_its_files_is_refused_before_writing(tmp_path, monkeypatch):
    """The saved exported step and a folded package each hold the weights: a cache with less room
    than that says so (with what it has and needs) and decodes eagerly, writing nothing."""
    from collections import namedtuple

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(aot.shutil, "disk_usage", lambda path: usage(2 << 20, 1 << 20, 1 << 20))
    model = lm()
    with pytest.warns(RuntimeWarning, match=r"has 1 MiB free and a build needs about \d+ MiB.*; decoding eagerly"):
        tokens = generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile="aot")
    assert tokens == generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True)
    assert not list((tmp_path / "cache").rglob("*.pt2")) and not list((tmp_path / "cache").rglob(".*tmp-*"))


def _compiler(directory, name, answer, libcxx="libc++.so"):
    """A stand-in C++ compiler that answers ``-print-file-name=libstdc++.so`` with ``answer`` and
    ``-print-file-name=libc++.so`` with ``libcxx`` (the bare name: it has none)."""
    path = directory / name
    path.write_text(f"#!/bin/sh\ncase \"$1\" in *libc++.so) echo '{libcxx}';; *) echo '{answer}';; esac\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libstdc++ is Linux's")
def test_a_compiler_without_a_shared_libstdcxx_is_replaced_by_one_with_it_or_named(tmp_path, monkeypatch, capsys):
    # The GPU image's $CXX (/opt/gcc/bin/g++) has only libstdc++.a: a package it linked carried
    # its own libstdc++ and crashed its loader, so the package is built with another compiler.
    from torch._inductor import config

    static, shared = tmp_path / "static", tmp_path / "shared"
    static.mkdir(), shared.mkdir()
    cxx = _compiler(static, "g++", "libstdc++.so")  # gcc's answer when it has no such library
    _compiler(static, "c++", "libstdc++.so")
    monkeypatch.setattr(aot, "_SHARED_LIBSTDCXX", {})
    monkeypatch.setattr(aot, "_SAID", set())
    monkeypatch.setenv("PATH", f"{static}:{shared}")
    with config.patch({"cpp.cxx": (None, cxx)}):
        with pytest.raises(aot.AotUnavailable, match=re.escape(cxx) + r" has no shared libstdc\+\+.*set \$CXX"):
            aot.package_compiler()
        other = _compiler(shared, "clang++", "/usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.so")
        assert aot.package_compiler() == other and aot.package_compiler(quiet=True) == other
    said = capsys.readouterr().err
    assert said.count(f"{cxx} has no shared libstdc++") == 1 and f"building with {other}" in said  # said once
    with config.patch({"cpp.cxx": (None, other)}):
        assert aot.package_compiler() is None  # inductor's own choice has one: nothing to change
    libcxx = _compiler(shared, "clang-libc++", "libstdc++.so", libcxx="/usr/lib/llvm/lib/libc++.so")
    assert aot.shared_libstdcxx(libcxx) is True  # no libstdc++, but its own runtime is shared
    broken = _compiler(shared, "cc-broken", "")  # says nothing: not refused on a guess
    with config.patch({"cpp.cxx": (None, broken)}):
        assert aot.shared_libstdcxx(broken) is None and aot.package_compiler() is None


@needs_compiler
@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("g++") is None, reason="needs g++ on Linux")
def test_a_package_is_not_linked_by_a_compiler_without_a_shared_libstdcxx(tmp_path, monkeypatch):
    # A g++ that links libstdc++ statically, as the GPU image's $CXX did: the package it links
    # fails to load (std::bad_cast here, a segmentation fault there), so it must not link it.
    from torch._inductor import config

    calls = tmp_path / "calls"
    static = tmp_path / "g++"
    static.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\n"
                      "case \"$*\" in *-print-file-name=libstdc++.so*) echo libstdc++.so; exit 0;; esac\n"
                      f"case \" $* \" in *\" -shared \"*) exec {shutil.which('g++')} -static-libstdc++ \"$@\";; esac\n"
                      f"exec {shutil.which('g++')} \"$@\"\n")
    static.chmod(0o755)
    monkeypatch.setattr(aot, "_SHARED_LIBSTDCXX", {})
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    model = lm()
    with warnings.catch_warnings(), config.patch({"cpp.cxx": (None, str(static))}):
        warnings.simplefilter("error", RuntimeWarning)  # built with g++ from PATH, and loaded
        assert generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True, compile="aot") == \
            generate(model, [[3, 4, 5]], max_new_tokens=8, greedy=True)
    assert calls.read_text().split("\n")[0] == "-print-file-name=libstdc++.so"
    assert " -shared " not in calls.read_text()  # asked, never used to link


def _package_code(package, suffix: str = ".cpp") -> str:
    """The C++ inductor generated for ``package`` (its files ending in ``suffix``), as one text."""
    import zipfile

    with zipfile.ZipFile(package) as archive:
        return "".join(archive.read(name).decode() for name in archive.namelist() if name.endswith(suffix))


@needs_compiler
def test_a_folded_build_freezes_its_weights_into_prepacked_products(tmp_path):
    """Inductor folds and prepacks a package's weights ("freezing") only with grad off, so the
    child process builds under no_grad: a product of any number of rows is then oneDNN's on a
    prepacked weight, not a plain addmm that packs its weight at every call (multi30k shape,
    128 rows: 26.2 against 23.0 ms a step)."""
    module = torch.nn.Linear(32, 48).eval()
    x = torch.randn(8, 1, 32)
    with torch.no_grad():
        exported = torch.export.export(module, (x,), dynamic_shapes=({0: torch.export.Dim("rows", min=2, max=4096)},),
                                       strict=True)
    torch.export.save(exported, tmp_path / "step.pt2")
    aot._compile_package(tmp_path / "step.pt2", tmp_path / "package.pt2", {"freezing": True})
    code = _package_code(tmp_path / "package.pt2", "wrapper.cpp")
    assert "aoti_torch_cpu__linear_pointwise" in code and "aoti_torch_cpu_addmm_out" not in code
    runner = torch._inductor.aoti_load_package(str(tmp_path / "package.pt2"))
    with torch.no_grad():
        torch.testing.assert_close(runner(x), module(x), **TOLERANCE)


_BLOCKINGS = """
import json, sys, torch
{one_row}
from torch._inductor.codegen import cpp_micro_gemm as micro
from torch._inductor.cpu_vec_isa import VecAVX2
answer = {{}}
for name, blocking in (("float32", {fp32}), ("int8", {int8})):
    added = [c for c in micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec]
             if c.vec_isa_cls is VecAVX2 and tuple(c.register_blocking) == blocking]
    check = lambda m, n, k, dynamic: added[0].extra_check(added[0], m, n, k, 1, 1, dynamic_M=dynamic)
    answer[name] = {{"added": len(added), "dtypes": [str(added[0].input_dtype), str(added[0].input2_dtype)],
                    "one_row": check(1, 8192, 256, False), "four_rows": check(4, 8192, 256, False),
                    "rows_vary": check(1, 8192, 256, True), "odd_columns": check(1, 8001, 256, False),
                    "odd_depth": check(1, 8192, 200, False)}}
print(json.dumps(answer))
"""


def test_the_build_offers_one_row_blockings_on_avx2():
    """The child build registers ONE_ROW_BLOCKING (float32) and ONE_ROW_INT8_BLOCKING (bf16 inputs, int8
    weights) with inductor's C++ GEMM template, for AVX2, taken for a product of one fixed row only (not
    four rows, not rows that vary); the int8 one only where columns and depth divide by it. Run on any
    CPU: a torch whose internals moved fails here, not silently in users' builds."""
    code = _BLOCKINGS.format(one_row=aot._ONE_ROW, fp32=aot.ONE_ROW_BLOCKING, int8=aot.ONE_ROW_INT8_BLOCKING)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "no one-row blockings" not in run.stderr
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert answer["float32"] == {"added": 1, "dtypes": ["torch.float32", "torch.float32"], "one_row": True,
                                 "four_rows": False, "rows_vary": False, "odd_columns": True, "odd_depth": True}
    assert answer["int8"] == {"added": 1, "dtypes": ["torch.bfloat16", "torch.int8"], "one_row": True,
                              "four_rows": False, "rows_vary": False, "odd_columns": False, "odd_depth": False}


@needs_compiler
@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX2", reason="ONE_ROW_BLOCKING is for AVX2 CPUs")
def test_a_one_row_product_on_avx2_takes_the_one_row_blocking(tmp_path):
    module = torch.nn.Linear(256, 640).eval()
    x = torch.randn(1, 256)
    with torch.no_grad():
        exported = torch.export.export(module, (x,), strict=True)
    torch.export.save(exported, tmp_path / "step.pt2")
    aot._compile_package(tmp_path / "step.pt2", tmp_path / "package.pt2", aot.FEW_ROWS_CONFIGS)  # the templates alone
    assert "micro_gemm_kernel<1, 64" in _package_code(tmp_path / "package.pt2")
    runner = torch._inductor.aoti_load_package(str(tmp_path / "package.pt2"))
    with torch.no_grad():
        torch.testing.assert_close(runner(x), module(x), **TOLERANCE)


@pytest.mark.slow
@needs_compiler
@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX2", reason="ONE_ROW_INT8_BLOCKING is for AVX2 CPUs")
def test_an_int8_one_row_weight_only_package_on_avx2_takes_the_one_row_blocking(tmp_path, monkeypatch):
    """An int8 LM whose products' columns divide by 64 and depth by 128: its one-row weight-only package
    multiplies with ONE_ROW_INT8_BLOCKING, and its logits are the float step's with the int8 weights
    within bfloat16's rounding, as every weight-only package's (a wrong column or depth would be far off)."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(aot, "_int8_products", lambda model, layout: "weight-only")
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=64, d_model=128, num_heads=2, d_ff=256, num_layers=1,
                                 max_positions=40).eval()
    quantized = copy.deepcopy(model).quantize("int8")
    _assert_weight_only_logits(model, quantized, torch.randint(1, 64, (1, 12)))
    (package,) = (tmp_path / "aot").glob("*.pt2")
    assert "micro_gemm_kernel<1, 64" in _package_code(package)


def _flat_tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _flat_tensors(item)


def test_the_step_tensors_are_named_as_the_models_own_walks_name_them():
    """aot._step_tensors walks the modules once: the same names and tensor objects, in the same order,
    as named_parameters / named_buffers (remove_duplicate=False: a tied weight under each of its
    names) and derived_tensors (after a step cache is made: the head's transposed copy, cross-attention's
    query rows); an int8 model's weights are found by _int8_products as attributes."""
    for model in (attnlab.create_model("transformer_tiny", vocab_size=50).eval(), attnlab.create_model("lm_tiny").eval()):
        if hasattr(model, "new_step_cache"):
            memory, mask = model.encode(torch.randint(3, 50, (2, 5)))
            model.new_step_cache(memory, rows_per_source=2, capacity=8, fixed_shape=True)
        else:
            model.new_cache(2, 8, fixed_shape=True)
        expected = ([(f"model.{name}", t) for name, t in model.named_parameters(remove_duplicate=False)]
                    + [(f"model.{name}", t) for name, t in model.named_buffers(remove_duplicate=False)])
        own = {id(t) for t in model.parameters()} | {id(t) for t in model.buffers()}
        derived, seen = [], set()  # the decode caches' tensors through getattr, as derived_tensors read them before
        for module in model.modules():
            for name in getattr(module, "_decode_caches", ()):
                for t in _flat_tensors(getattr(module, name, None) if name != "_packed" else None):
                    if id(t) not in own and id(t) not in seen:
                        seen.add(id(t))
                        derived.append(t)
        assert derived, "no derived tensor to check"
        expected += [(f"derived_{i}", t) for i, t in enumerate(derived)]
        assert [(name, id(t)) for name, t in aot._step_tensors(model)] == [(name, id(t)) for name, t in expected]
        assert aot._int8_products(model, aot.Layout("causal", batch=1)) is None
    model.quantize("int8")
    assert aot._int8_products(model, aot.Layout("causal", batch=2)) == "weight-only"
