"""The lean decoders' attention (:func:`rtc_agent.engines.llm.attention.attend`) gives what torch's fused kernel
gives, for decode steps (its own float32 products) and prompts (the fused kernel), with and without a mask,
grouped-query or not, in float32 and bfloat16."""

from __future__ import annotations

import pytest
import torch

from rtc_agent.engines.llm.attention import attend

F = torch.nn.functional


def _inputs(rows: int, heads: int, kv_heads: int, n: int, end: int, dtype: torch.dtype, masked: bool):
    gen = torch.Generator().manual_seed(rows * 1000 + heads * 100 + n * 10 + end)
    q = (torch.randn(rows, heads, n, 16, generator=gen) * 2).to(dtype)
    keys = torch.randn(rows, kv_heads, end, 16, generator=gen).to(dtype)
    values = torch.randn(rows, kv_heads, end, 16, generator=gen).to(dtype)
    mask = None
    if masked:  # causal over the last n columns, some columns of each row masked out (padding), itself always seen
        column = torch.arange(end).view(1, 1, end)
        query = torch.arange(end - n, end).view(1, n, 1)
        keep = torch.rand(rows, 1, end, generator=gen) > 0.3
        mask = (((column <= query) & keep) | (column == query)).unsqueeze(1)
    return q, keys, values, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(("rows", "heads", "kv_heads", "n", "end"), [
    (1, 14, 2, 1, 1), (1, 14, 2, 1, 300), (3, 14, 2, 1, 57), (2, 4, 4, 1, 40), (3, 6, 2, 5, 30), (1, 4, 1, 12, 12)])
def test_attend_matches_the_fused_kernel(dtype, masked, rows, heads, kv_heads, n, end):
    q, keys, values, mask = _inputs(rows, heads, kv_heads, n, end, dtype, masked)
    got = attend(torch, q, keys, values, mask)
    reference = F.scaled_dot_product_attention(q.float(), keys.float(), values.float(), attn_mask=mask,
                                               enable_gqa=kv_heads != heads)
    assert got.shape == (rows, heads, n, 16) and got.dtype == dtype
    assert torch.isfinite(got.float()).all()
    # the fused kernel's own error against float32 is the result's rounding to the cache's type
    fused = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=kv_heads != heads)
    tolerance = 1e-5 if dtype == torch.float32 else 2 * float((fused.float() - reference).abs().max()) + 1e-2
    assert float((got.float() - reference).abs().max()) <= tolerance


def test_a_masked_out_column_is_not_read():
    q, keys, values, _ = _inputs(2, 4, 2, 1, 10, torch.float32, False)
    mask = torch.ones(2, 1, 1, 10, dtype=torch.bool)
    mask[:, :, :, 3] = False
    before = attend(torch, q, keys, values, mask)
    keys[:, :, 3], values[:, :, 3] = 1e4, 1e4  # what a padding column may hold
    assert torch.allclose(attend(torch, q, keys, values, mask), before)
