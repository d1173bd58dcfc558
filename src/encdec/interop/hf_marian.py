"""Hugging Face MarianMT checkpoints (Helsinki-NLP/opus-mt-*) -> encdec's encoder-decoder.

Marian (Junczys-Dowmunt et al. 2018) has BART's weight layout (hf_bart.py) with
fixed sinusoidal positions whose sines fill the first half of each vector and
cosines the second, no embedding LayerNorm, usually a SiLU ("swish") feed-forward
and embeddings scaled by sqrt(d_model); pad is the decoder-start token.
"""

from pathlib import Path

from encdec.errors import CheckpointError
from encdec.interop.hf_bart import bart_layout_config, load_bart_layout
from encdec.models import EncoderDecoder, ModelConfig


def marian_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    decoder_vocab = hf.get("decoder_vocab_size") or hf["vocab_size"]
    if decoder_vocab != hf["vocab_size"] or hf.get("share_encoder_decoder_embeddings") is False:
        raise CheckpointError("this Marian checkpoint has separate source and target vocabularies, not supported yet")
    hf = {"pad_token_id": 58100, "eos_token_id": 0, "decoder_start_token_id": 58100, **hf}
    return bart_layout_config(hf, untied_head, position="sinusoidal", sinusoidal_layout="halves")


def load_hf_marian(path: Path, hf_config: dict) -> EncoderDecoder:
    return load_bart_layout(path, marian_config_from_hf, hf_config)
