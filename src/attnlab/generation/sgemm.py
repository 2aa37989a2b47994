"""oneDNN's own float32 GEMM (``dnnl_sgemm``) for the products of a many-row search package on an AVX2 CPU.

A folded package's products are, by default, the oneDNN that torch carries: an inner product on weights
reordered once, which torch 2.13's oneDNN runs through its ``brg_matmul:avx2`` kernels. oneDNN's
``dnnl_sgemm`` (its JIT AVX2 GEMM, what CTranslate2 multiplies with on an AMD CPU) is faster there at a
search's many rows: on a Zen 3 EPYC, one thread, the 19 products of a multi30k-shaped step at 128 rows took
15.8-16.4 ms against 18.2-18.3 ms, and a whole 32-source beam search through its package 0.88-0.92x the time
of one through torch's (docs/benchmarks.md). torch does not export that function, so it comes from the
``onednn-cpu-gomp`` wheel where it is installed (``pip install attnlab[onednn]``), used by a package only:

- :func:`decompositions` writes the exported step's float32 products (``linear``, ``mm``, ``addmm``) as
  ``attnlab::sgemm_linear(x, w)`` (``x @ w.T``) plus the bias, which inductor then adds in the loop that
  reads the product;
- the package calls that operation through a C function of AOTInductor's ABI, ``aoti_torch_cpu_sgemm_linear``
  (:data:`SHIM_SOURCE`), in a small library built once with the package's C++ compiler into the package
  cache (``sgemm-<hash>.so``) and loaded into the process before the package (:func:`load`). That library
  opens libdnnl itself (``RTLD_LOCAL``: its symbols stay out of torch's way); libdnnl's OpenMP is the
  libgomp torch has already loaded, so it runs on torch's thread count.

Without the wheel, with ``ATTNLAB_SGEMM=off``, or on another CPU, nothing changes (:func:`wanted`). The op's
own Python body (eager, tracing) is ``F.linear``.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.files import atomic_write

__all__ = ["SETTING", "c_shims", "decompositions", "dnnl_library", "load", "sgemm_linear", "wanted"]

SETTING = "ATTNLAB_SGEMM"  # "off": never
WHEEL = "onednn-cpu-gomp"

SHIM_SOURCE = r'''
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <dlfcn.h>
#include <cstdint>

typedef int (*sgemm_t)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                       float, float*, int64_t);
static sgemm_t sgemm = nullptr;

extern "C" {
// Opens libdnnl at `path` (RTLD_LOCAL) and finds dnnl_sgemm: 0, or 1 where either fails.
int attnlab_sgemm_open(const char* path) {
  if (sgemm) return 0;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) return 1;
  sgemm = (sgemm_t)dlsym(library, "dnnl_sgemm");
  return sgemm ? 0 : 1;
}

// out = x @ w.T for float32 matrices x (m, k) and w (n, k), each with one unit stride.
AOTITorchError aoti_torch_cpu_sgemm_linear(AtenTensorHandle x, AtenTensorHandle w, AtenTensorHandle* ret0) {
  int64_t *xs, *xt, *ws, *wt;
  if (!sgemm || aoti_torch_get_sizes(x, &xs) || aoti_torch_get_strides(x, &xt) || aoti_torch_get_sizes(w, &ws)
      || aoti_torch_get_strides(w, &wt)) return 1;
  const int64_t m = xs[0], k = xs[1], n = ws[0];
  if (ws[1] != k) return 1;
  char ta, tb;
  int64_t lda, ldb;
  if (xt[1] == 1 || k == 1) { ta = 'N'; lda = m > 1 ? xt[0] : k; }
  else if (xt[0] == 1 || m == 1) { ta = 'T'; lda = xt[1]; }
  else return 1;
  if (wt[1] == 1 || k == 1) { tb = 'T'; ldb = n > 1 ? wt[0] : k; }
  else if (wt[0] == 1 || n == 1) { tb = 'N'; ldb = wt[1]; }
  else return 1;
  int64_t sizes[2] = {m, n}, strides[2] = {n, 1};
  AtenTensorHandle out;
  if (aoti_torch_empty_strided(2, sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_cpu(), 0, &out))
    return 1;
  void *xp, *wp, *op;
  if (aoti_torch_get_data_ptr(x, &xp) || aoti_torch_get_data_ptr(w, &wp) || aoti_torch_get_data_ptr(out, &op)
      || (m > 0 && n > 0 && sgemm(ta, tb, m, n, k, 1.0f, (const float*)xp, lda, (const float*)wp, ldb, 0.0f,
                                  (float*)op, n) != 0)) {
    aoti_torch_delete_tensor_object(out);
    return 1;
  }
  *ret0 = out;
  return 0;
}
}
'''
SHIM_DECLARATION = ("AOTITorchError aoti_torch_cpu_sgemm_linear(AtenTensorHandle x, AtenTensorHandle w, "
                    "AtenTensorHandle* ret0)")
SHIM_KEY = hashlib.sha256((SHIM_SOURCE + torch.__version__).encode()).hexdigest()[:16]


_OP: list = []  # [the op], registered on first use (not at import: ~5-8 ms of every `import attnlab`)
_LOCK = threading.Lock()


def sgemm_linear():
    """The custom op ``attnlab::sgemm_linear(x, w)``, ``x @ w.T`` (``x`` ``(m, k)``, ``w`` ``(n, k)``): in a
    package, oneDNN's ``dnnl_sgemm``; here ``F.linear``. Registered with torch on the first call."""
    with _LOCK:
        if not _OP:
            @torch.library.custom_op("attnlab::sgemm_linear", mutates_args=())
            def product(x: Tensor, w: Tensor) -> Tensor:
                return F.linear(x, w)

            @product.register_fake
            def _(x: Tensor, w: Tensor) -> Tensor:
                return x.new_empty(x.shape[0], w.shape[0])

            _OP.append(torch.ops.attnlab.sgemm_linear.default)
        return _OP[0]


def _plain(*tensors: Tensor) -> bool:
    return all(t.dtype == torch.float32 and t.dim() == 2 for t in tensors)


def _linear(x: Tensor, w: Tensor, b: Tensor | None = None):
    if x.dtype != torch.float32 or w.dim() != 2 or x.dim() < 2 or (b is not None and b.dtype != torch.float32):
        return NotImplemented
    out = torch.ops.attnlab.sgemm_linear.default(x.reshape(-1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[0])
    return out if b is None else out + b


def _mm(a: Tensor, b: Tensor):
    return torch.ops.attnlab.sgemm_linear.default(a, b.t()) if _plain(a, b) else NotImplemented


def _addmm(bias: Tensor, a: Tensor, b: Tensor, *, beta=1, alpha=1):
    if not _plain(a, b) or bias.dtype != torch.float32 or beta != 1 or alpha != 1:
        return NotImplemented
    return torch.ops.attnlab.sgemm_linear.default(a, b.t()) + bias


def decompositions() -> dict:
    """For ``ExportedProgram.run_decompositions``: every float32 product of two matrices as :func:`sgemm_linear`
    (and the bias added after it); anything else as it was."""
    sgemm_linear()
    aten = torch.ops.aten
    return {aten.linear.default: _linear, aten.mm.default: _mm, aten.addmm.default: _addmm}


def c_shims() -> dict:
    """``aot_inductor.custom_ops_to_c_shims`` for a package that calls :func:`sgemm_linear`."""
    return {sgemm_linear(): [SHIM_DECLARATION]}


_DNNL: list = []  # [path or None], found once a process


def dnnl_library() -> Path | None:
    """The ``libdnnl.so.3`` of the installed ``onednn-cpu-gomp`` wheel, or None."""
    if not _DNNL:
        found = None
        try:
            files = importlib.metadata.files(WHEEL) or []
        except importlib.metadata.PackageNotFoundError:
            files = []
        for file in files:
            if file.name == "libdnnl.so.3":
                path = Path(file.locate()).resolve()
                if path.is_file():
                    found = path
                    break
        _DNNL.append(found)
    return _DNNL[0]


def wanted() -> bool:
    """Whether a many-row search package on an AVX2 CPU takes its products from ``dnnl_sgemm``: the wheel is
    installed, on Linux x86-64, and ``$ATTNLAB_SGEMM`` is not ``off``."""
    return os.environ.get(SETTING, "").strip().lower() not in ("off", "0", "false", "no") \
        and sys.platform.startswith("linux") and os.uname().machine == "x86_64" and dnnl_library() is not None


class Unavailable(RuntimeError):
    """The library could not be built or loaded (its message says why)."""


_LOADED: dict[str, Path] = {}


def load(directory: Path, compiler: str | Callable[[], str | None] | None) -> Path:
    """The shim library (:data:`SHIM_SOURCE`) loaded into this process (``RTLD_GLOBAL``: a package's
    undefined ``aoti_torch_cpu_sgemm_linear`` binds to it) with libdnnl opened: built first into
    ``directory/sgemm-<hash>.so`` with ``compiler`` (a path, or a function giving one, called only then;
    None: $CXX, else g++) where none is there. Raises :class:`Unavailable` with the reason."""
    dnnl = dnnl_library()
    if dnnl is None:
        raise Unavailable(f"the {WHEEL} wheel (libdnnl) is not installed")
    with _LOCK:
        if SHIM_KEY in _LOADED:
            return _LOADED[SHIM_KEY]
        path = directory / f"sgemm-{SHIM_KEY}.so"
        if not path.exists() and not path.is_symlink():
            try:
                _build(path, (compiler() if callable(compiler) else compiler) or os.environ.get("CXX") or "g++")
            except OSError as error:
                raise Unavailable(f"{path} could not be written ({error})") from None
        elif not path.is_file():
            raise Unavailable(f"{path} is not a file (attnlab never replaces it)")
        try:
            library = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
            opened = library.attnlab_sgemm_open(str(dnnl).encode())
        except (OSError, AttributeError) as error:
            raise Unavailable(f"{path} did not load ({str(error)[:200]}); attnlab builds it again where it is "
                              "not there") from None
        if opened != 0:
            raise Unavailable(f"{dnnl} did not load or has no dnnl_sgemm")
        _LOADED[SHIM_KEY] = path
        return path


def _build(path: Path, compiler: str) -> None:
    """Compile :data:`SHIM_SOURCE` into ``path`` (the source in a private temporary directory, the library
    written through :func:`attnlab.files.atomic_write`: a temporary file of its own, renamed into place)."""
    from torch.utils.cpp_extension import include_paths

    torch_lib = Path(torch.__file__).parent / "lib"

    def compile_to(output: str) -> None:
        with tempfile.TemporaryDirectory() as directory:
            source = Path(directory) / "sgemm.cpp"
            source.write_text(SHIM_SOURCE)
            command = [compiler, "-O2", "-shared", "-fPIC", "-std=c++17", *(f"-I{p}" for p in include_paths()),
                       str(source), "-o", output, f"-L{torch_lib}", "-ltorch_cpu", "-lc10",
                       f"-Wl,-rpath,{torch_lib}", "-ldl"]
            try:
                result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as error:
                raise Unavailable(f"the C++ compiler {compiler} could not build {path.name} ({error})") from None
        if result.returncode != 0:
            lines = result.stderr.decode(errors="replace").strip().splitlines()
            raise Unavailable(f"the C++ compiler {compiler} could not build {path.name}"
                              + (f": {lines[-1][:200]}" if lines else ""))

    atomic_write(path, compile_to)
