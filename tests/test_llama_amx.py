"""mapo.testing.llama_amx: llama.cpp loads quantised weights without its extra buffer types where the
CPU exposes AMX (their batched kernel crashes there). The real load is what the llama.cpp server
tests and `base_type=source` tests run on such a CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mapo.testing import llama_amx as amx


def test_amx_is_read_from_the_cpu_flags(tmp_path):
    with_amx, without = tmp_path / "a", tmp_path / "b"
    with_amx.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_int8 amx_tile\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\nbugs\t\t: amx_int8_is_not_a_flag_here\n")
    assert amx.cpu_has_amx(with_amx) and not amx.cpu_has_amx(without) and not amx.cpu_has_amx(tmp_path / "none")


@pytest.mark.parametrize("has_amx", [True, False])
def test_the_default_model_params_follow_the_cpu_and_are_patched_once(monkeypatch, has_amx):
    monkeypatch.setattr(amx, "cpu_has_amx", lambda: has_amx)
    bindings = SimpleNamespace(llama_model_default_params=lambda: SimpleNamespace(use_extra_bufts=True, n_gpu_layers=0))
    amx.patch_default_model_params(bindings)
    patched = bindings.llama_model_default_params
    amx.patch_default_model_params(bindings)
    assert bindings.llama_model_default_params is patched
    assert patched().use_extra_bufts is (not has_amx) and patched().n_gpu_layers == 0
