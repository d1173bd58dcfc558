"""Shared pieces of the generation tests: tiny models, padded batches, an uncached reference."""

from dataclasses import dataclass

import torch
from model_kit import GEMMA_BLOCKS, T5GEMMA

from encdec.models import build_model, preset

V = 97
GEMMA = dict(T5GEMMA, attention_softcap=2.0, logit_softcap=5.0)
GEMMA2 = dict(  # T5Gemma 2's: qk norms, merged decoder attention, a split window, RoPE bases per layer kind
    GEMMA_BLOCKS,
    attention_scale_dim=12,
    sliding_window=3,
    sliding_window_layout="split",
    rope_local_theta=100.0,
    rope_scale=2.0,
    qk_norm=True,
    merged_cross_attention=True,
    scale_embeddings=True,
    eoi_token_id=5,
)
FAMILIES = {  # name -> (preset, overrides)
    "t5": ("t5-tiny", {}),
    "t5-v1.1": ("t5-v1.1-tiny", {}),
    "umt5": ("t5-v1.1-tiny", dict(relative_bias_per_layer=True)),
    "rot5": ("rot5-tiny", {}),
    "rot5-prepended": ("rot5-tiny", dict(rope_cross="prepended")),
    "rot5-moe": ("rot5-tiny", dict(n_experts=4)),
    "gemma": ("rot5-tiny", GEMMA),  # T5Gemma's layout: capped scores and logits, a window of 3 every other layer
    "gemma2": ("rot5-tiny", GEMMA2),
    "transformer-post": ("transformer-tiny", {}),
    "transformer-pre": ("transformer-tiny", dict(norm_position="pre")),
}


def tiny(name: str, **overrides):
    preset_name, extra = FAMILIES[name]
    cfg = preset(preset_name, vocab_size=V, max_positions=160, dropout=0.0, **{**extra, **overrides})
    return build_model(cfg).eval()


def assert_tokens_match(got: torch.Tensor, expected: torch.Tensor, exact: bool) -> None:
    """Token for token on the CPU; elsewhere (exact False) kernels that sum in another order may flip one
    near tie, so all rows but one must match (compared on the host, padded with -1 to one width)."""
    if exact:
        assert torch.equal(got, expected)
        return
    assert got.shape[0] == expected.shape[0]
    width = max(got.shape[1], expected.shape[1])
    pad = lambda t: torch.nn.functional.pad(t.cpu(), (0, width - t.shape[1]), value=-1)  # noqa: E731
    differing = (pad(got) != pad(expected)).any(dim=1).sum().item()
    assert differing <= 1, f"{differing} of {got.shape[0]} rows differ"


def padded_batch(B: int = 3, S: int = 11, vocab: int = V, pad: int = 0):
    """Token ids with three source lengths (full, 7, 3) and their boolean mask."""
    src = torch.randint(3, vocab, (B, S))
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[1 % B, 7:] = False
    mask[2 % B, 3:] = False
    return src.masked_fill(~mask, pad), mask


@dataclass
class HistoryState:
    src_ids: torch.Tensor  # (B*N, S)
    src_mask: torch.Tensor
    tokens: torch.Tensor  # (B*N, t) every target token fed so far

    def reorder(self, index: torch.Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)
        self.src_ids = self.src_ids.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)


class Uncached:
    """The same model driven without any cache: every step re-runs encoder and decoder on all tokens."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def start(self, src_ids, src_mask, max_new_tokens, beams=1):
        rows = lambda t: t.repeat_interleave(beams, dim=0)  # noqa: E731
        return HistoryState(rows(src_ids), rows(src_mask), src_ids.new_zeros(src_ids.shape[0] * beams, 0))

    def step(self, tgt_ids, state):
        state.tokens = torch.cat([state.tokens, tgt_ids], dim=1)
        logits = self.model(state.src_ids, state.tokens, src_mask=state.src_mask).logits
        return logits[:, -tgt_ids.shape[1] :]


def hf_t5_pair(path, vocab_size: int = 99, seed: int = 0, initializer_factor: float = 1.0):
    """A random-weight Hugging Face T5 (its own test shape) saved to `path`, and the same weights in encdec.
    An initializer_factor of 2 or more makes greedy decoding vary its tokens instead of repeating one."""
    import transformers

    import encdec

    torch.manual_seed(seed)
    config = transformers.T5Config(
        vocab_size=vocab_size,
        d_model=32,
        d_kv=8,
        d_ff=37,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        initializer_factor=initializer_factor,
    )
    reference = transformers.T5ForConditionalGeneration(config).eval()
    reference.save_pretrained(path)
    return reference, encdec.load_hf(path)


def word_piece_tokenizer(words: tuple[str, ...] = ()):
    """A Hugging Face fast tokenizer over single letters, their "##" continuations and `words`, with a
    WordPiece decoder, so every token decodes to text (as stop strings need)."""
    import string

    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    letters = list(string.ascii_lowercase)
    tokens = ["<pad>", "</s>", "<unk>", *letters, *("##" + c for c in letters), *words]
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(tokens))}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
