"""Hugging Face MVP (model_type mvp: MvpForConditionalGeneration) <-> encdec's post-norm encoder-decoder with
learned positions.

MVP (Tang et al. 2023) is BART pre-trained on many labelled text-generation tasks: with use_prompt false, as its
released checkpoints have it, BART's layout and weight names exactly (interop/bart/bart_layout.py), so an MVP is
read with hf_model_type "mvp", which exports it back as MvpForConditionalGeneration. With use_prompt true (its
lightweight prompt tuning, MvpModel.set_lightweight_tuning) each layer's attention also reads task prompt keys and
values from a prompt encoder, which encdec does not compute: that checkpoint is refused in one sentence.
Its defaults, as MvpConfig's: pad 1, EOS 2, decoder start 2.
"""

from encdec.errors import CheckpointError
from encdec.interop.bart import bart_layout
from encdec.models import ModelConfig


def mvp_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    if hf.get("use_prompt"):
        raise CheckpointError(
            "use_prompt is set: MVP's prompt encoder (task prompts as extra attention keys and values in every layer) "
            "is not computed by encdec"
        )
    hf = {"pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2, **hf}
    return bart_layout.layout_config(
        hf, untied_head, positions={"kind": "learned", "offset": 2}, embeddings={"norm": True}, hf_model_type="mvp"
    )


FAMILIES = (  # BART's byte-level BPE beside tokenizer.json
    bart_layout.named_family(
        "mvp", "MvpForConditionalGeneration", "MVP", mvp_config_from_hf, ("vocab.json", "merges.txt")
    ),
)
