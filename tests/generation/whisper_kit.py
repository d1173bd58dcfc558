"""A tiny random transformers Whisper, and the same model as a Steppable (no cache: every step re-runs the
decoder over all tokens), so that Whisper's rules are tested end to end against transformers' own generate
before encdec has a Whisper family of its own."""

from dataclasses import dataclass
from types import SimpleNamespace

import torch

from encdec.generation.interface import Capabilities
from encdec.generation.whisper_rules import read_whisper_rules
from encdec.interop.generation_config import read_generation_defaults

V, START, EOS, NO_TIMESTAMPS = 120, 50, 51, 88  # text below 50; timestamps from 89: 0.00 to 0.60 s, the window
LANGS = {"<|en|>": 52, "<|fr|>": 53, "<|de|>": 54}
TASKS = {"transcribe": 56, "translate": 55}
PREV = 57  # <|startofprev|>
TIMESTAMPS = list(range(NO_TIMESTAMPS + 1, V))


def tiny_whisper(transformers, path, seed: int = 0, multilingual: bool = True, **shape):
    """A random WhisperForConditionalGeneration with a generation_config.json saved in `path`: a multilingual
    one's, or an English-only one's (no languages nor tasks); `shape` overrides its WhisperConfig's sizes."""
    torch.manual_seed(seed)
    sizes = dict(
        vocab_size=V,
        d_model=16,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_mel_bins=8,
        max_source_positions=30,
        max_target_positions=40,
        decoder_start_token_id=START,
        eos_token_id=EOS,
        pad_token_id=EOS,
        bos_token_id=EOS,
        suppress_tokens=[3, 4],
        begin_suppress_tokens=[5, EOS],
    )
    model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**sizes | shape)).eval()
    with torch.no_grad():  # weights large enough that each input and each history gives its own tokens
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.normal_(0, 0.5)
    generation = model.generation_config
    generation.no_timestamps_token_id = NO_TIMESTAMPS
    if multilingual:
        generation.lang_to_id, generation.task_to_id = dict(LANGS), dict(TASKS)
    generation.is_multilingual = multilingual
    generation.max_initial_timestamp_index = 5
    generation.prev_sot_token_id = PREV
    model.save_pretrained(path)
    return model


def defaults_of(path) -> dict:
    """What a loader gives generate as the checkpoint's defaults: generation_config.json's options, and the
    Whisper rules it holds."""
    import json

    values = json.loads((path / "generation_config.json").read_text())
    return {**read_generation_defaults({}, values), "whisper": read_whisper_rules(path)}


@dataclass
class State:
    encoded: torch.Tensor  # (R, S, C)
    tokens: torch.Tensor  # (R, t) every target token so far

    def reorder(self, index: torch.Tensor) -> None:
        self.encoded, self.tokens = self.encoded.index_select(0, index), self.tokens.index_select(0, index)


class Steppable:
    """transformers' Whisper driven through encdec's Steppable protocol, without a cache."""

    capabilities = Capabilities(reads_features=True)

    def __init__(self, model):
        self.model, c = model, model.config
        self.config = SimpleNamespace(
            vocab_size=c.vocab_size,
            decoder_start_id=c.decoder_start_token_id,
            eos_id=c.eos_token_id,
            pad_id=c.pad_token_id,
        )
        self.starts = 0

    def start(self, features, mask, max_new_tokens, beams=1):
        self.starts += 1
        encoded = self.model.model.encoder(features).last_hidden_state.repeat_interleave(beams, 0)
        return State(encoded, torch.zeros(encoded.shape[0], 0, dtype=torch.long))

    def step(self, tgt_ids, state):
        state.tokens = torch.cat((state.tokens, tgt_ids), dim=1)
        logits = self.model(encoder_outputs=(state.encoded,), decoder_input_ids=state.tokens, use_cache=False).logits
        return logits[:, -tgt_ids.shape[1] :]
