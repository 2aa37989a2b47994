"""Which way of packaging and loading an AOTInductor CUDA package works on this GPU and torch.

    PYTHONPATH=src python3 benchmarks/aot_cuda_probe.py [--workdir DIR]

Written after the one GPU run of ``compile="aot"`` (H200, torch 2.11): the CUDA package of
GPT-2 small built, then the process died with a segmentation fault inside the
``AOTIModelPackageLoader`` constructor. A crash cannot be caught in-process, so every build and
every load here runs in its own subprocess (``-X faulthandler``), all at once; the parent prints
one line per variant: ``ok`` with the largest difference from the eager module, an exception's
first line, or the signal that killed it.

A tiny module shaped like attnlab's step (a product with the module's own weight, an input
cache written in place, a position input) is built four ways:

* ``in-so``: inductor's defaults (the weights inside the ``.so``);
* ``no-so``: ``aot_inductor.package_constants_in_so=False`` (what generation/aot.py builds: the
  weights stay outside and are read from the model with ``load_constants(user_managed=True)``);
* ``pickle``: no weights in the ``.so``, a copy pickled beside it in the package (this script's
  own file in its own work directory: the only unpickling here);
* ``cpu``: a CPU package, loaded in the same processes (does any package load here?);

and loaded ten ways (torch's public ``aoti_load_package``, the private loader attnlab calls with
device index -1 and with the current device's index, AOTInductor's container runner on the
library extracted by hand). Variant F is attnlab's own path: ``generate(compile="aot")`` on
``lm_tiny`` against the eager tokens. ``--dlopen`` only builds the CPU and CUDA packages and
``dlopen``s their libraries. On the H200 machine of 2026-11-27 (torch 2.11.0+cu130) every load
crashed and every ``dlopen`` succeeded (docs/benchmarks.md); ``PROBE_DEVICE=cpu`` runs it all
on a CPU. The cause, found on 2026-11-28 (benchmarks/gpu_aot_backtrace.sh, gpu_aot_compiler.sh):
that image's ``$CXX`` (/opt/gcc/bin/g++) links libstdc++ statically into every package. This
probe's own builds use ``$CXX`` as set (run it with ``CXX=/usr/bin/g++`` there); attnlab's
builds pick another compiler by themselves (``aot.package_compiler``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

DEVICE = os.environ.get("PROBE_DEVICE", "cuda")  # "cpu" to try the script itself without a GPU
BUILDS = {"in-so": {}, "no-so": {"aot_inductor.package_constants_in_so": False},
          "pickle": {"aot_inductor.package_constants_in_so": False,
                     "aot_inductor.package_constants_on_disk_format": "pickle_weights"},
          "cpu": {"aot_inductor.package_constants_in_so": False}}  # a CPU package: does any package load here?
LOADS = {  # name: (package, how, then point the package at the module's own weights)
    "A in-so public": ("in-so", "public", False),
    "B no-so public+load_constants": ("no-so", "public", True),
    "C no-so loader(-1) [attnlab]": ("no-so", "loader-1", True),
    "D no-so loader(cur)": ("no-so", "loader-cur", True),
    "E pickle public": ("pickle", "public", True),
    "G in-so loader(-1)": ("in-so", "loader-1", False),
    "H in-so loader(-1)+load_constants": ("in-so", "loader-1", True),
    "I no-so container runner": ("no-so", "runner", True),
    "J in-so container runner": ("in-so", "runner", False),
    "K cpu package loader(-1)": ("cpu", "loader-1", True),
}


class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.head = nn.Linear(64, 32, bias=False)

    def forward(self, x, cache, position):
        h = torch.relu(self.proj(x))
        cache.index_copy_(1, position, h.unsqueeze(1))
        position.add_(1)
        return self.head(cache.sum(1))


def _module_and_inputs(device: str = DEVICE):
    torch.manual_seed(0)
    module = Step().to(device).eval()
    x = torch.randn(2, 64, device=device)
    cache = torch.zeros(2, 8, 64, device=device)
    position = torch.zeros(1, dtype=torch.long, device=device)
    return module, (x, cache, position)


def build(kind: str, workdir: Path) -> None:
    module, example = _module_and_inputs("cpu" if kind == "cpu" else DEVICE)
    started = time.perf_counter()
    exported = torch.export.export(module, example, strict=True)
    path = torch._inductor.aoti_compile_and_package(exported, package_path=str(workdir / f"{kind}.pt2"),
                                                    inductor_configs=BUILDS[kind])
    print(f"built {path} in {time.perf_counter() - started:.0f} s", flush=True)


class ContainerRunner:
    """AOTInductor's container runner (the layer below the package loader) on the package's
    library extracted by hand, with the loader's methods: does the crash lie in the loader?"""

    def __init__(self, path: Path, device: str):
        import zipfile

        target = path.with_suffix(".extracted")
        with zipfile.ZipFile(path) as archive:
            archive.extractall(target)
        library = next(target.glob("*/data/aotinductor/model/*.so"))
        if device == "cpu":
            self._runner = torch._C._aoti.AOTIModelContainerRunnerCpu(str(library), 1)
        else:
            self._runner = torch._C._aoti.AOTIModelContainerRunnerCuda(str(library), 1, device, str(library.parent))
        self._internal = {fqn: name for name, fqn in self._runner.get_constant_names_to_original_fqns().items()}
        self.run = self._runner.run

    def get_constant_fqns(self) -> list[str]:
        return list(self._internal)

    def load_constants(self, constants, use_inactive, check_full_update, user_managed) -> None:
        self._runner.update_constant_buffer({self._internal[name]: t for name, t in constants.items()},
                                            use_inactive, check_full_update, user_managed)


def load(name: str, workdir: Path) -> None:
    kind, how, user_managed = LOADS[name]
    device = "cpu" if kind == "cpu" else DEVICE
    module, (x, cache, position) = _module_and_inputs(device)
    path = str(workdir / f"{name.split()[0]}-{kind}.pt2")  # a copy of its own: loads run at once
    print("constructing the loader", flush=True)
    if how == "public":
        runner = torch._inductor.aoti_load_package(path).loader
    elif how == "runner":
        runner = ContainerRunner(Path(path), device)
    else:
        index = -1 if how == "loader-1" or device == "cpu" else torch.cuda.current_device()
        runner = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, index)
    print("loader constructed; constants", runner.get_constant_fqns(), flush=True)
    if user_managed:
        constants = {name: t for name, t in module.state_dict().items() if name in runner.get_constant_fqns()}
        runner.load_constants(constants, False, True, True)
        print("constants loaded (user_managed)", flush=True)
    with torch.no_grad():
        expected = module(x, cache.clone(), position.clone())
        got = runner.run([x, cache, position])[0]
    if device != "cpu":
        torch.cuda.synchronize()
    if user_managed:  # the module's own weights: an in-place change is seen
        with torch.no_grad():
            module.head.weight.mul_(2)
            expected2 = module(x, cache.clone(), position.clone())
            got2 = runner.run([x, cache, position])[0]
        diff2 = (got2 - expected2).abs().max().item()
    else:
        diff2 = 0.0
    diff = (got - expected).abs().max().item()
    print(json.dumps({"ok": True, "max_diff": diff, "after_weight_change": diff2,
                      "position": int(position.item())}), flush=True)


def dlopen(kind: str, workdir: Path) -> None:
    """Only ``dlopen`` the package's library (after ``import torch``, as the loader does): a
    crash here is the library's loading itself (toolchain, ABI), not AOTInductor's runtime."""
    import ctypes
    import zipfile

    target = workdir / f"dl-{kind}"
    with zipfile.ZipFile(workdir / f"{kind}.pt2") as archive:
        archive.extractall(target)
    library = next(target.glob("*/data/aotinductor/model/*.so"))
    lines = subprocess.run(["ldd", "-r", str(library)], capture_output=True, text=True).stdout.splitlines()
    undefined = sum("undefined symbol" in line for line in lines)
    print("ldd:", " | ".join(line.strip() for line in lines if "=>" in line), f"| {undefined} undefined symbols "
          "(libtorch's, resolved once torch is loaded)", flush=True)
    print("dlopen", library.name, flush=True)
    ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL)
    print(json.dumps({"ok": True, "dlopen": "ok"}), flush=True)


def attnlab_lm(workdir: Path) -> None:
    os.environ["ATTNLAB_CACHE"] = str(workdir / "cache")
    import attnlab
    from attnlab.generation import generate

    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=97).to(DEVICE).eval()
    prompt = [[5, 9, 17, 3, 44]]
    eager = generate(model, prompt, max_new_tokens=12, greedy=True, cuda_graph=False)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback to the eager step is a failure here
        aot = generate(model, prompt, max_new_tokens=12, greedy=True, compile="aot")
    print(json.dumps({"ok": eager == aot, "seconds": round(time.perf_counter() - started),
                      "eager": eager, "aot": aot}), flush=True)
    if eager != aot:
        raise SystemExit("tokens differ from the eager step")


def _child(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-X", "faulthandler", __file__, *args], stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def _wait(process: subprocess.Popen, deadline: float) -> None:
    try:
        process.wait(timeout=max(1.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _verdict(process: subprocess.Popen, log: Path) -> str:
    rc = process.returncode
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if rc == 0:
        return f"ok: {last[:200]}"
    if rc < 0:
        fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), len(lines))
        before = lines[fatal - 1] if fatal else ""
        where = [line.strip()[:100] for line in lines[fatal:] if "File " in line][:3]
        return f"killed by signal {-rc} after {before[:120]!r} | {' / '.join(where)}"
    error = next((line for line in reversed(lines) if "Error" in line or "error" in line), last)
    return f"rc {rc}: {error[:240]}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/aot-probe"))
    parser.add_argument("--dlopen", action="store_true", help="only build the CPU and CUDA packages and dlopen "
                                                                 "their libraries (each in its own process)")
    parser.add_argument("--seconds", type=float, default=200, help="time allowed for the builds")
    parser.add_argument("--child", nargs=2, metavar=("ROLE", "NAME"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.child:
        role, name = args.child
        if role == "lm":
            attnlab_lm(args.workdir)
        else:
            {"build": build, "load": load, "dlopen": dlopen}[role](name, args.workdir)
        return 0
    print("torch", torch.__version__, "|", torch.cuda.get_device_name() if DEVICE != "cpu" else "cpu", flush=True)
    started = time.perf_counter()
    logs = args.workdir / "logs"
    logs.mkdir(exist_ok=True)
    if args.dlopen:
        print(subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
              "| glibc", os.confstr("CS_GNU_LIBC_VERSION"), "| torch built with",
              next((line.strip() for line in torch.__config__.show().splitlines() if "C++ Version" in line
                    or "GCC" in line), "?"), flush=True)
        kinds = ("cpu", "no-so")
        builds = {kind: _child(["--workdir", str(args.workdir), "--child", "build", kind], logs / f"build-{kind}.log")
                  for kind in kinds}
        for kind, process in builds.items():
            _wait(process, started + args.seconds)
            print(f"build {kind}: {_verdict(process, logs / f'build-{kind}.log')}", flush=True)
            opened = _child(["--workdir", str(args.workdir), "--child", "dlopen", kind], logs / f"dlopen-{kind}.log")
            _wait(opened, time.perf_counter() + 60)
            print(f"dlopen {kind}: {_verdict(opened, logs / f'dlopen-{kind}.log')}", flush=True)
            print((logs / f"dlopen-{kind}.log").read_text(errors="replace")[:1600], flush=True)
        return 0
    running = {f"build {kind}": _child(["--workdir", str(args.workdir), "--child", "build", kind],
                                       logs / f"build-{kind}.log") for kind in BUILDS}
    running["F attnlab generate(compile='aot') lm_tiny"] = _child(
        ["--workdir", str(args.workdir), "--child", "lm", "-"], logs / "lm.log")
    deadline = started + args.seconds
    for name, process in list(running.items()):
        if name.startswith("build"):
            _wait(process, deadline)
            print(f"{name}: {_verdict(process, logs / (name.replace(' ', '-') + '.log'))}", flush=True)
    for name, (kind, _, _) in LOADS.items():
        if (args.workdir / f"{kind}.pt2").exists():
            shutil.copyfile(args.workdir / f"{kind}.pt2", args.workdir / f"{name.split()[0]}-{kind}.pt2")
    loads = {name: _child(["--workdir", str(args.workdir), "--child", "load", name],
                          logs / f"load-{name.split()[0]}.log") for name in LOADS}
    for name, process in loads.items():
        _wait(process, deadline + 60)
        print(f"{name}: {_verdict(process, logs / f'load-{name.split()[0]}.log')}", flush=True)
    lm = running["F attnlab generate(compile='aot') lm_tiny"]
    _wait(lm, deadline + 60)
    print(f"F attnlab generate(compile='aot') lm_tiny: {_verdict(lm, logs / 'lm.log')}", flush=True)
    print(f"probe done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
