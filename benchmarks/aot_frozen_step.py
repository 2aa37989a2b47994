"""The lever issue 40's beam rows would need, measured: beam search's step (4 rows, the
``multi30k`` Marian model of ``cpu_engines.py --translate``) compiled ahead of time with inductor's
``freezing`` (the weights folded into the package, its products prepacked), against attnlab's
package (plain GEMMs, weights outside, read from the model) and the eager ``decode_step``.

    taskset -c 0 python benchmarks/aot_frozen_step.py

Not a product path: a frozen package holds the weights it was built from, so it goes stale when
they change (attnlab's packages read the model's own tensors instead). Thread CPU time per
step, 24 steps from an empty cache, 7 interleaved rounds; the logits are checked against the
eager step's first.
"""
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
import cpu_engines as ce  # noqa: E402
from attnlab.generation import aot  # noqa: E402
from attnlab.interop import load_hf_marian  # noqa: E402
from attnlab.linear import packed_inference  # noqa: E402

warnings.simplefilter("ignore")
torch.set_num_threads(1)
d = tempfile.mkdtemp()
atexit.register(shutil.rmtree, d, True)
model, tok, _ = load_hf_marian(ce.build_marian("multi30k", d, ce.train_sentencepiece(d)))
model.eval()
src = ce.translation_batches(tok, ce.multi30k_lines("test_2016_flickr.de.gz")[:1], 1, model.config.pad_id, model.config.eos_id)[0][0]
with torch.no_grad():
    memory, mask = model.encode(src)
    cap = aot.aot_capacity(model, 64)
    cache = model.new_step_cache(memory, rows_per_source=4, capacity=cap, fixed_shape=True)
    layout = aot._layout_of(model, "search", cache.positions.shape[0], 4, cache)
    print(layout)
    derived = aot.derived_tensors(model)
    stack = aot._stack(model)
    module = aot._StepModule(model, layout, derived, len(stack.layers), cache.conditioning is not None, stack.has_cross_attention)
    example, shapes = aot._example_inputs(model, layout, cache, None)
    with packed_inference(False):
        exported = torch.export.export(module, example, dynamic_shapes=shapes, strict=True)
    runners = {}
    for name, configs in (("plain (attnlab)", {"aot_inductor.package_constants_in_so": False}),
                          ("in-so (weights inside, not frozen)", {}),
                          ("frozen", {"freezing": True}),
                          ("frozen-outside (weights outside, folded at load)",
                           {"freezing": True, "aot_inductor.use_runtime_constant_folding": True,
                            "aot_inductor.package_constants_in_so": False})):
        t = time.perf_counter()
        path = torch._inductor.aoti_compile_and_package(exported, package_path=os.path.join(d, name.split()[0].replace("-", "") + ".pt2"),
                                                        inductor_configs=configs)
        loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, -1)
        if "outside" in name or name.startswith("plain"):
            tensors = aot._named_tensors(model)
            wanted = loader.get_constant_fqns()
            unknown = [n for n in wanted if n not in tensors]
            if unknown:
                print(f"{name}: the package wants {len(unknown)} of its {len(wanted)} constants under names the model "
                      f"does not have ({', '.join(unknown[:3])}, ...): it cannot read the model's own weights")
                continue
            loader.load_constants({n: tensors[n] for n in wanted}, False, True, True)
        print(name, "built in", round(time.perf_counter() - t), "s; constants:", len(loader.get_constant_fqns()))
        runners[name] = loader.run
    tokens = torch.full((4,), 5, dtype=torch.long)
    snap = cache.snapshot()
    def package_call(run):
        def call():
            cache.restore(snap)
            ts = []
            for _ in range(24):
                s = time.thread_time(); run([tokens, *cache.step_tensors(), torch.ones(1, 1, 1, memory.shape[1], dtype=torch.bool)]); ts.append(time.thread_time() - s)
            return ts
        return call
    def eager_call():
        c = model.new_step_cache(memory, rows_per_source=4, capacity=cap, fixed_shape=False)
        ts = []
        with packed_inference():
            for _ in range(24):
                s = time.thread_time(); model.decode_step(tokens, c, None); ts.append(time.thread_time() - s)
        return ts
    # same logits?
    cache.restore(snap)
    c = model.new_step_cache(memory, rows_per_source=4, capacity=cap, fixed_shape=False)
    with packed_inference():
        ref = model.decode_step(tokens, c, None)
    for name, run in runners.items():
        cache.restore(snap)
        out = run([tokens, *cache.step_tensors(), torch.ones(1, 1, 1, memory.shape[1], dtype=torch.bool)])[0]
        finite = torch.isfinite(ref)
        print(name, "max |logits - eager| over finite logits", float((out - ref)[finite].abs().max()),
              "same -inf positions", bool((torch.isfinite(out) == finite).all()), "same argmax", bool((out.argmax(-1) == ref.argmax(-1)).all()))
    calls = {"eager decode_step": eager_call, **{n: package_call(r) for n, r in runners.items()}}
    res = {n: [] for n in calls}
    for _ in range(7):
        for n, f in calls.items():
            res[n] += f()
    for n, v in res.items():
        print(f"{n}: {1e3 * statistics.median(v):.3f} ms a step (thread CPU, median of {len(v)})")
