"""Both research families (SEEDS.md sections 3 and 4) are causal LMs over one sequence: a token changes no earlier
logit, cached decoding equals the full forward with every option off or on, and greedy generate() is the argmax
of the full forward."""

import pytest
import torch
from lm_checks import (
    AR_ALL_ON,
    PARALLEL_ALL_ON,
    V,
    assert_lm_cached_equals_full,
    assert_lm_generate_is_greedy_over_full_forward,
    tiny,
)

FAMILIES = pytest.mark.parametrize(
    "name, all_on", [("ar_encdec-tiny", AR_ALL_ON), ("parallel_encdec-tiny", PARALLEL_ALL_ON)], ids=["ar", "parallel"]
)


@FAMILIES
def test_changing_a_token_leaves_earlier_logits_unchanged(name, all_on):
    model = tiny(name, research=all_on)
    ids = torch.randint(0, V, (1, 10))
    changed = ids.clone()
    changed[0, 6] = (ids[0, 6] + 1) % V
    with torch.no_grad():
        a, b = model(None, ids).logits, model(None, changed).logits
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@FAMILIES
@pytest.mark.parametrize("position", ["learned", "rope"])
@pytest.mark.parametrize("options", ["off", "on"])
def test_cached_decoding_equals_the_full_forward(name, all_on, options, position, device):
    research = all_on if options == "on" else {}
    assert_lm_cached_equals_full(tiny(name, research=research, position=position).to(device))


@FAMILIES
def test_generate_greedy_equals_argmax_over_the_full_forward(name, all_on, device):
    assert_lm_generate_is_greedy_over_full_forward(tiny(name).to(device))
