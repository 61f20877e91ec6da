"""The W2 loss' trace of a square root (nstcam/style/_trace_sqrt.py) and the eigh it runs with one
MKL thread (nstcam/_lapack.py): the value and gradient against float64 references, torch's eigh to
rounding, the same bits from any thread, the thread's MKL setting restored, and one graph under
torch.compile."""

from __future__ import annotations

import ctypes
import os

import pytest
import torch
from conftest import in_threads

from nstcam._lapack import _mkl_set_local, eigh, single_threaded
from nstcam.style._trace_sqrt import trace_sqrt


def _psd(seed: int, n: int = 2, c: int = 24, rank: int | None = None, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, c, rank or 2 * c, generator=g, dtype=torch.float64)
    return (a @ a.transpose(1, 2) / a.shape[-1]).to(dtype)


def test_trace_sqrt_and_its_gradient_equal_float64_references():
    m = _psd(0)
    vals, vecs = torch.linalg.eigh(m.double())
    want = vals.clamp_min(0).sqrt().sum(-1)
    assert torch.allclose(trace_sqrt(m).double(), want, rtol=1e-5)
    x = m.clone().requires_grad_(True)
    (trace_sqrt(x) * torch.tensor([1.0, 2.0])).sum().backward()
    half_inv = (vecs / (2 * vals.sqrt())[:, None, :]) @ vecs.transpose(1, 2)  # d tr(m^1/2) / dm
    want_grad = half_inv * torch.tensor([1.0, 2.0], dtype=torch.float64)[:, None, None]
    assert torch.allclose(x.grad.double(), want_grad, rtol=1e-4, atol=1e-5)
    sym = _psd(1, n=1, c=5, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: trace_sqrt(0.5 * (a + a.transpose(1, 2))), (sym,))


def test_zero_eigenvalues_give_no_square_root_and_no_gradient():
    g = torch.Generator().manual_seed(2)
    q = torch.linalg.qr(torch.randn(1, 16, 16, generator=g, dtype=torch.float64))[0]
    vals = torch.cat([torch.zeros(12), torch.tensor([1.0, 4.0, 9.0, 16.0])]).double()
    m = (q * vals) @ q.transpose(1, 2)  # rank 4: twelve eigenvalues at float64 rounding (< 1e-12)
    x = m.clone().requires_grad_(True)
    t = trace_sqrt(x)
    t.sum().backward()
    assert abs(float(t.detach()) - 10.0) < 2e-5  # 1 + 2 + 3 + 4, and 12 x sqrt(1e-12) from the floor
    top = q[..., 12:]
    assert torch.allclose(x.grad, (top / (2 * vals[12:].sqrt())) @ top.transpose(1, 2), atol=1e-8)


def test_the_same_bits_from_any_thread():
    m = _psd(3, n=1, c=256)
    here = trace_sqrt(m)
    there = in_threads(lambda i: trace_sqrt(m), 3)
    assert all(torch.equal(there[i], here) for i in range(3))


def test_eigh_equals_torchs_to_rounding_and_keeps_the_dtype():
    for dtype in (torch.float32, torch.float64):
        m = _psd(5, n=3, c=40, dtype=dtype)
        vals, vecs = eigh(m)
        want = torch.linalg.eigh(m)[0]
        assert vals.dtype == vecs.dtype == dtype and vals.shape == (3, 40) and vecs.shape == (3, 40, 40)
        assert torch.allclose(vals, want, rtol=1e-4, atol=1e-5 * float(want.max()))
        back = vecs @ torch.diag_embed(vals) @ vecs.transpose(1, 2)
        assert torch.allclose(back, m, atol=1e-4 * float(want.max()))


@pytest.mark.skipif(_mkl_set_local() is None, reason="no MKL in this torch")
def test_single_threaded_sets_one_mkl_thread_and_restores_the_threads_setting():
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
    get = lib.MKL_Get_Max_Threads
    get.restype = ctypes.c_int

    def inside_and_after(_: int) -> tuple[int, int, int]:
        torch.get_num_threads()
        before = get()
        with single_threaded():
            inside = get()
        return before, inside, get()

    for before, inside, after in [inside_and_after(0), *in_threads(inside_and_after, 2)]:
        assert inside == 1 and after == before


def test_it_compiles_as_one_graph_and_equals_eager():
    from nstcam.style._compiled import compile_options

    torch._dynamo.reset()
    # the engine's own options: under ATEN_CPU_CAPABILITY inductor's reading of it breaks (compile_options)
    options = {"dynamic": False, **compile_options(torch.device("cpu"))}
    fn = torch.compile(lambda a: trace_sqrt(a @ a.transpose(1, 2)).sum(), fullgraph=True, **options)
    a = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(4))
    x, y = a.clone().requires_grad_(True), a.clone().requires_grad_(True)
    fn(x).backward()
    trace_sqrt(y @ y.transpose(1, 2)).sum().backward()
    assert torch.allclose(x.grad, y.grad, rtol=1e-5, atol=1e-6)
