"""flashinfer's JIT builds one of its kernels for this device and runs it once."""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.gpu


def test_flashinfer_jit_kernel_builds_for_the_device_and_runs(tmp_path):
    torch = pytest.importorskip("torch")
    try:
        import flashinfer
    except ImportError as exc:
        pytest.skip(f"flashinfer is not installed here ({exc}); scripts/gpu-check carries it")
    if not os.environ.get("CUDA_HOME") and not os.path.exists("/usr/local/cuda/bin/nvcc"):
        pytest.skip("no CUDA toolkit (CUDA_HOME or /usr/local/cuda) for flashinfer's JIT")
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    major, minor = torch.cuda.get_device_capability(0)
    x = torch.randn(16, 2 * 256, dtype=torch.float16, device="cuda")
    start = time.monotonic()
    out = flashinfer.activation.silu_and_mul(x)  # JIT-builds the activation module on first use
    torch.cuda.synchronize()
    seconds = round(time.monotonic() - start, 1)
    gate, up = x[:, :256].float(), x[:, 256:].float()
    expected = torch.nn.functional.silu(gate) * up
    torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=2e-2)
    from flashinfer.jit import env as jit_env

    workspace = str(jit_env.FLASHINFER_WORKSPACE_DIR)
    assert workspace.endswith(f"/{major}{minor}"), workspace
    print(
        f"flashinfer {flashinfer.__version__}: built and ran silu_and_mul for sm_{major}{minor} "
        f"in {seconds}s ({workspace})"
    )
