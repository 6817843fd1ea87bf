"""Drive SGLang's own JIT builders inside a lab container; prints one JSON object.

Run with the serving venv's Python and the service environment (/etc/sglang/cuda.env), as a
unit would: ``python builders.py <what> [args]``. No GPU is needed for any of them.

  torch-ext DIR        torch.utils.cpp_extension.load_inline, a CUDA kernel using cub and
                       cuda::std, linked with -lcudart, TORCH_CUDA_ARCH_LIST=12.0
  flashinfer           flashinfer's own JIT (JitSpec.build) of its activation kernel for SM120
  triton-aot           triton.compile for GPUTarget("cuda", 120, 32), no GPU
  triton-launcher DIR  Triton's own launcher build (driver.c, Python.h, cc, -l:libcuda.so.1)
  server-args FILE     SGLang's ServerArgs parsing every command line in FILE (a JSON list)
"""

from __future__ import annotations

import json
import os
import sys
import time

# The .cu file holds only CUDA code (cub, cuda::std, the runtime API): nvcc never parses torch's
# headers, which keeps the build to the part that exercises the toolkit. The C++ side is torch's.
CUDA_SOURCE = r"""
#include <cub/block/block_reduce.cuh>
#include <cuda/std/type_traits>
#include <cuda_runtime.h>

static_assert(cuda::std::is_same<float, float>::value, "cuda::std");

__global__ void sum_kernel(const float* in, float* out, int n) {
  using Reduce = cub::BlockReduce<float, 128>;
  __shared__ typename Reduce::TempStorage tmp;
  float v = threadIdx.x < n ? in[threadIdx.x] : 0.f;
  float total = Reduce(tmp).Sum(v);
  if (threadIdx.x == 0) *out = total;
}

// from libcudart: -lcudart must resolve
int launch_block_sum(const float* in, float* out, int n) {
  sum_kernel<<<1, 128>>>(in, out, n);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>

int launch_block_sum(const float* in, float* out, int n);

torch::Tensor block_sum(torch::Tensor x) {
  auto out = torch::zeros({1}, x.options());
  int err = launch_block_sum(x.data_ptr<float>(), out.data_ptr<float>(), (int)x.numel());
  TORCH_CHECK(err == 0, "CUDA error ", err);
  return out;
}
"""


def torch_ext(build_dir: str) -> dict:
    os.environ["TORCH_CUDA_ARCH_LIST"] = "12.0"
    os.environ.setdefault("MAX_JOBS", "2")
    from torch.utils import cpp_extension

    os.makedirs(build_dir, exist_ok=True)
    start = time.monotonic()
    module = cpp_extension.load_inline(
        name="sglang_lxc_block_sum",
        cpp_sources=CPP_SOURCE,
        cuda_sources=CUDA_SOURCE,
        functions=["block_sum"],
        extra_ldflags=["-lcudart"],
        build_directory=build_dir,
        # without it load_inline puts #include <torch/types.h> on top of the .cu file, and nvcc
        # parses torch's headers (half the build's time on two cores)
        no_implicit_headers=True,
        verbose=False,
    )
    seconds = round(time.monotonic() - start, 1)
    with open(os.path.join(build_dir, "build.ninja"), encoding="utf-8") as handle:
        ninja = handle.read()
    return {
        "seconds": seconds,
        "module": module.__file__,
        "has_block_sum": hasattr(module, "block_sum"),
        "ninja": ninja,
    }


def flashinfer_jit() -> dict:
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = "12.0"
    from flashinfer.jit import activation
    from flashinfer.jit import env as jit_env

    spec = activation.gen_act_and_mul_module("silu")
    start = time.monotonic()
    spec.build(verbose=False)
    seconds = round(time.monotonic() - start, 1)
    library = spec.jit_library_path
    return {
        "seconds": seconds,
        "name": spec.name,
        "library": str(library),
        "library_mtime_ns": library.stat().st_mtime_ns,
        "workspace": str(jit_env.FLASHINFER_WORKSPACE_DIR),
        "ninja": spec.ninja_path.read_text(encoding="utf-8"),
    }


def triton_aot() -> dict:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        total = tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, total, mask=mask)

    source = ASTSource(
        fn=add_kernel,
        signature={
            "x_ptr": "*fp32",
            "y_ptr": "*fp32",
            "out_ptr": "*fp32",
            "n": "i32",
            "BLOCK": "constexpr",
        },
        constexprs={"BLOCK": 128},
    )
    start = time.monotonic()
    compiled = triton.compile(source, target=GPUTarget("cuda", 120, 32))
    seconds = round(time.monotonic() - start, 1)
    ptx = compiled.asm["ptx"]
    target = next((line.split()[1] for line in ptx.splitlines() if line.startswith(".target")), "")
    return {
        "seconds": seconds,
        "triton": triton.__version__,
        "ptx_target": target,
        "cubin_bytes": len(compiled.asm["cubin"]),
        "cache_dir": os.environ.get("TRITON_CACHE_DIR", ""),
    }


def triton_launcher(work: str) -> dict:
    """Triton's own C launcher build: what a kernel's first launch compiles with cc."""
    import sysconfig
    from pathlib import Path

    from triton.backends.nvidia import driver
    from triton.runtime import build

    include = sysconfig.get_paths()["include"]
    stubs = os.path.join(os.environ["CUDA_HOME"], "lib64", "stubs")
    # the driver's libcuda.so.1 where ldconfig knows it, else the toolkit's link-time stub
    try:
        libcuda_dirs = driver.libcuda_dirs()
        libcuda_from = "ldconfig -p"
    except AssertionError:
        os.makedirs(work, exist_ok=True)
        link = os.path.join(work, "libcuda.so.1")
        if not os.path.lexists(link):
            os.symlink(os.path.realpath(os.path.join(stubs, "libcuda.so")), link)
        libcuda_dirs = [work]
        libcuda_from = "stub"
    src_dir = os.path.join(work, "src")
    os.makedirs(src_dir, exist_ok=True)
    src = os.path.join(src_dir, "cuda_utils.c")
    Path(src).write_text(Path(driver.dirname, "driver.c").read_text())
    start = time.monotonic()
    so = build._build(
        "cuda_utils",
        src,
        src_dir,
        [driver.libdevice_dir, *libcuda_dirs],
        driver.include_dirs,
        driver.libraries,
        [],
    )
    return {
        "seconds": round(time.monotonic() - start, 1),
        "python_h": os.path.isfile(os.path.join(include, "Python.h")),
        "libcuda_from": libcuda_from,
        "so": so,
    }


def server_args(path: str) -> dict:
    import argparse

    from sglang.srt.server_args import ServerArgs

    results = []
    with open(path, encoding="utf-8") as handle:
        lines = json.load(handle)
    for argv in lines:
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        entry = {"argv": argv}
        try:
            namespace = parser.parse_args(argv)
            entry["parsed"] = True
            entry["model_path"] = namespace.model_path
            entry["port"] = namespace.port
        except SystemExit as exc:
            entry["parsed"] = False
            entry["error"] = f"argparse exit {exc.code}"
            results.append(entry)
            continue
        try:
            args = ServerArgs.from_cli_args(namespace)
            entry["from_cli_args"] = True
            entry["tp_size"] = args.tp_size
            entry["attention_backend"] = args.attention_backend
        except Exception as exc:  # reported, the test decides
            entry["from_cli_args"] = False
            entry["error"] = f"{type(exc).__name__}: {exc}"[:400]
        results.append(entry)
    return {"results": results}


def main() -> None:
    what, *rest = sys.argv[1:]
    runners = {
        "torch-ext": torch_ext,
        "flashinfer": flashinfer_jit,
        "triton-aot": triton_aot,
        "triton-launcher": triton_launcher,
        "server-args": server_args,
    }
    print(json.dumps(runners[what](*rest)))


if __name__ == "__main__":
    main()
