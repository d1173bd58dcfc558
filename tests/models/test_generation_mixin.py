"""`model.generate(...)` is `encdec.generate(model, ...)`."""

import pytest
import torch

import encdec
from encdec.models import build_model, preset

V = 61


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


@pytest.mark.parametrize("name", ["t5-tiny", "decoder_only-tiny"])
def test_model_generate_equals_encdec_generate(name):
    torch.manual_seed(0)
    model = build_model(preset(name, vocab_size=V, pad_id=V - 2, eos_id=V - 1, decoder_start_id=0)).eval()
    src = torch.randint(0, V - 2, (2, 5))
    options = dict(max_new_tokens=6, num_beams=3, num_return_sequences=2)
    assert torch.equal(model.generate(src, **options), encdec.generate(model, src, **options))
    sampled = dict(max_new_tokens=6, do_sample=True, seed=3)
    mask = torch.ones_like(src)
    assert torch.equal(model.generate(src, mask, **sampled), encdec.generate(model, src, mask, **sampled))
