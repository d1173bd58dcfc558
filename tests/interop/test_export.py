"""An exported directory is what transformers loads: same logits, same greedy tokens, same token ids."""

import gzip
import io
import json

import pytest
import torch

import encdec
from encdec.errors import ConfigError
from encdec.interop import export_hf
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.tokenizers import build_tokenizer

transformers = pytest.importorskip("transformers")

BART = {"position": "learned", "position_offset": 2, "embedding_norm": True, "activation": "gelu"}
MODELS = {  # name -> (preset, overrides, the Hugging Face class it exports as)
    "t5-v1.0": ("t5-tiny", {}, "T5ForConditionalGeneration"),
    "t5-v1.1": ("t5-v1.1-tiny", {"n_decoder_layers": 1}, "T5ForConditionalGeneration"),
    "switch": ("t5-tiny", {"n_experts": 4}, "SwitchTransformersForConditionalGeneration"),
    "switch-v1.1-tied-unscaled": (
        "t5-v1.1-tiny",
        {"n_experts": 3, "moe_activation": "gelu_tanh", "tie_embeddings": True},
        "SwitchTransformersForConditionalGeneration",
    ),
    "transformer-as-marian": ("transformer-tiny", {}, "MarianMTModel"),
    "marian-untied-silu": (
        "transformer-tiny",
        {"sinusoidal_layout": "halves", "activation": "silu", "tie_embeddings": False, "final_logits_bias": True},
        "MarianMTModel",
    ),
    "pre-norm-transformer-as-pegasus": (
        "transformer-tiny",
        {"norm_position": "pre"},
        "PegasusForConditionalGeneration",
    ),
    "pegasus-untied-gelu": (
        "transformer-tiny",
        {"norm_position": "pre", "sinusoidal_layout": "halves", "activation": "gelu", "tie_embeddings": False},
        "PegasusForConditionalGeneration",
    ),
    "bart": ("transformer-tiny", BART, "BartForConditionalGeneration"),
    "mbart": ("transformer-tiny", {**BART, "norm_position": "pre"}, "MBartForConditionalGeneration"),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


@pytest.fixture
def lines(shared_data) -> list[str]:
    """Real English and German lines (TinyStories, Multi30k) from ../shared/data."""
    texts = []
    for path, count in (("tinystories/tinystories_train_head.txt.gz", 300), ("translation/multi30k/train.de.gz", 150)):
        with gzip.open(shared_data / path, "rt", encoding="utf-8") as handle:
            texts += [line.strip() for _, line in zip(range(count), handle)]
    return [t for t in texts if t and "<|endoftext|>" not in t]


def build(name: str, tokenizer) -> torch.nn.Module:
    """A tiny model of `name` for `tokenizer`, with random norm weights and logits bias, so a misplaced tensor shows."""
    preset, overrides, _ = MODELS[name]
    ids = {
        "vocab_size": tokenizer.vocab_size,
        "pad_id": tokenizer.pad_id,
        "eos_id": tokenizer.eos_id,
        "decoder_start_id": tokenizer.decoder_start_id,
    }
    model = encdec.build_model(encdec.preset(preset, **ids, **overrides)).eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if "norm" in param_name:
                param.normal_(1.0 if param_name.endswith("weight") else 0.0, 0.1)
        if getattr(model, "final_logits_bias", None) is not None:
            model.final_logits_bias.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("name", MODELS)
def test_exported_model_equals_ours_in_logits_and_greedy_tokens(tmp_path, name, lines):
    tokenizer = build_tokenizer("byte", num_sentinels=4)
    ours = build(name, tokenizer)
    assert export_hf(ours, tokenizer, tmp_path) == MODELS[name][2]
    reference = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(reference).__name__ == MODELS[name][2]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    batch = hf_tokenizer([line[:40] for line in lines[:3]], return_tensors="pt", padding=True)
    src, mask = batch["input_ids"], batch["attention_mask"]
    tgt = torch.randint(0, tokenizer.vocab_size, (3, 12))
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=mask.bool()).logits
        again = encdec.load_hf(tmp_path)(src, tgt, src_mask=mask.bool()).logits
    assert (got - expected).abs().max().item() < 1e-4
    assert (again - got).abs().max().item() < 1e-4  # and encdec reads the directory back
    tokens = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=8, do_sample=False)
    assert torch.equal(tokens, encdec.generate(ours, src, mask, max_new_tokens=8))


def test_switch_round_trip_keeps_every_weight(tmp_path):
    tokenizer = build_tokenizer("byte", num_sentinels=4)
    ours = build("switch", tokenizer)
    export_hf(ours, tokenizer, tmp_path)
    again = encdec.load_hf(tmp_path)
    assert again.config.experts.count == 4 and again.config.experts.top_k == 1
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def sentencepiece_unigram(lines, tmp_path):
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=300, model_type="unigram", minloglevel=2
    )
    (tmp_path / "sp.model").write_bytes(model.getvalue())
    return build_tokenizer("sentencepiece", tmp_path / "sp.model", num_sentinels=5, extra_specials=("[R]",))


def small_tiktoken():
    """A real tiktoken Encoding: the bytes, a few merges (each of two lower-ranked pieces) and <|endoftext|>."""
    import tiktoken

    from encdec.tokenizers.tiktoken import TiktokenTokenizer

    ranks = {bytes([b]): b for b in range(256)}
    for piece in (b"th", b"the", b" t", b" the", b"in", b"ing", b"an", b"and", b" and", b"he", b" he", b" a"):
        ranks[piece] = len(ranks)
    pattern = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    specials = {"<|endoftext|>": len(ranks)}
    encoding = tiktoken.Encoding("small", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    return TiktokenTokenizer(encoding=encoding, num_sentinels=5)


TOKENIZERS = {  # kind -> a builder from (lines, tmp_path)
    "byte": lambda lines, tmp: build_tokenizer("byte", num_sentinels=5),
    "bpe": lambda lines, tmp: build_tokenizer("bpe", texts=lines, vocab_size=500, num_sentinels=5),
    "unigram": lambda lines, tmp: build_tokenizer("unigram", texts=lines, vocab_size=500, num_sentinels=5),
    "sentencepiece-unigram": sentencepiece_unigram,
    "tiktoken": lambda lines, tmp: small_tiktoken(),
}
HAS_UNK = {"unigram", "sentencepiece-unigram"}  # Hugging Face drops <unk> when decoding; encdec writes it


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_auto_tokenizer_encodes_real_text_to_our_ids(tmp_path, kind, lines):
    ours = TOKENIZERS[kind](lines, tmp_path)
    convert_tokenizer(ours).save(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = lines[::3] + ["  two  spaces and a tab\there ", "Ünïcödé ½ 🙂 1,234"]
    assert theirs(texts)["input_ids"] == ours.encode(texts)
    assert (theirs.pad_token_id, theirs.eos_token_id, theirs.bos_token_id) == (ours.pad_id, ours.eos_id, ours.bos_id)
    assert len(theirs) == ours.vocab_size
    assert theirs.convert_tokens_to_ids("[MASK-4]") == ours.sentinel_ids[4]
    if kind not in HAS_UNK:
        ids = ours.encode(texts)
        assert theirs.batch_decode(ids, skip_special_tokens=True) == ours.decode(ids)


def test_mistral_sentencepiece_converts_exactly(tmp_path, lines, mistral_model):
    ours = build_tokenizer("sentencepiece", mistral_model, num_sentinels=5)
    convert_tokenizer(ours).save(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = lines[::4] + ["  two  spaces ", "emoji 🙂 and 漢字 use byte fallback"]
    ids = ours.encode(texts)
    assert theirs(texts)["input_ids"] == ids
    assert theirs.batch_decode(ids, skip_special_tokens=True) == ours.decode(ids)


def test_a_pretrained_tokenizer_is_written_as_it_is(tmp_path):
    from encdec.tokenizers.pretrained import PretrainedTokenizer

    convert_tokenizer(build_tokenizer("byte", num_sentinels=2)).save(tmp_path / "first")
    ours = PretrainedTokenizer.from_directory(tmp_path / "first")
    convert_tokenizer(ours).save(tmp_path / "second")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "second")
    assert theirs(["Once upon a time"])["input_ids"] == ours.encode(["Once upon a time"])


def test_generation_config_carries_the_ids_and_the_run_defaults(tmp_path):
    tokenizer = build_tokenizer("byte", num_sentinels=4)
    model = build("t5-v1.0", tokenizer)
    export_hf(model, tokenizer, tmp_path, generation={"num_beams": 3, "max_new_tokens": 7, "seed": 1})
    config = transformers.GenerationConfig.from_pretrained(tmp_path)
    assert (config.num_beams, config.max_new_tokens) == (3, 7)
    assert (config.decoder_start_token_id, config.eos_token_id, config.pad_token_id) == (
        tokenizer.decoder_start_id,
        tokenizer.eos_id,
        tokenizer.pad_id,
    )
    assert encdec.load_hf(tmp_path).generation_defaults == {"num_beams": 3, "max_new_tokens": 7}


REFUSED = {  # preset, overrides -> the sentence's telling part
    "rot5": (
        "rot5-tiny",
        {},
        "RoPE has no Hugging Face counterpart but T5Gemma, whose layout this one lacks \\(positions.kind must be rope",
    ),
    # a Llama or Qwen adapted into an encoder-decoder (training.adaptation): RMSNorm and SwiGLU, not Gemma's
    "adapted llama": (
        "t5-tiny",
        dict(position="rope", rope_cross="none", norm="rmsnorm", activation="swiglu", shared_embeddings=False),
        "whose layout this one lacks \\(norms.kind must be gemma_rmsnorm with norms.post; activation must be gated_gelu",
    ),
    "ar_encdec": ("ar_encdec-tiny", {}, "the ar_encdec family has no Hugging Face counterpart"),
    "parallel_encdec": ("parallel_encdec-tiny", {}, "the parallel_encdec family has no"),
    "decoder_only": ("decoder_only-tiny", {}, "Llama: positions.kind must be rope; norms.kind must be rmsnorm"),
    "rnn": ("rnn_seq2seq-tiny", {}, "the rnn_seq2seq family has no"),
    "top-2": ("t5-tiny", {"n_experts": 4, "moe_top_k": 2}, "SwitchTransformers: experts.top_k must be 1"),
    "renormalised": ("t5-tiny", {"n_experts": 4, "moe_renormalize": True}, "experts.renormalize must be false"),
    "gated-experts": ("t5-tiny", {"n_experts": 4, "moe_activation": "swiglu"}, "experts.activation must be one of"),
    "gqa-t5": ("t5-tiny", {"n_kv_heads": 2}, "T5: n_kv_heads must equal n_heads"),
    "rmsnorm-transformer": ("transformer-tiny", {"norm": "rmsnorm"}, "Marian: norms.kind must be layernorm"),
    "learned-without-norm": ("transformer-tiny", {"position": "learned"}, "BART: embeddings.norm must be true"),
    "gated-transformer": ("transformer-tiny", {"activation": "swiglu"}, "Marian: activation must be one of"),
    "gated-pre-norm": ("transformer-tiny", {"activation": "swiglu", "norm_position": "pre"}, "Pegasus: activation"),
    "pre-norm-without-norm": (  # from position 0 it is Blenderbot's layout; from 2, mBART's without its norm
        "transformer-tiny",
        {"position": "learned", "position_offset": 2, "norm_position": "pre"},
        "mBART: embedding",
    ),
}


@pytest.mark.parametrize("name", REFUSED)
def test_a_model_hugging_face_cannot_express_is_refused_in_one_sentence_before_writing(tmp_path, name):
    preset, overrides, message = REFUSED[name]
    tokenizer = build_tokenizer("byte", num_sentinels=4)
    model = encdec.build_model(encdec.preset(preset, vocab_size=tokenizer.vocab_size, **overrides))
    with pytest.raises(ConfigError, match=message) as error:
        export_hf(model, tokenizer, tmp_path / "out")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()
    assert "encdec.from_pretrained(RUN_DIR) loads it" in str(error.value)
    if "transformer" in name or "norm" in name:  # and says what would export
        assert "the transformer, t5 and t5-v1.1 presets export as they are" in str(error.value)


def test_a_non_empty_out_is_refused_unless_forced(tmp_path):
    tokenizer = build_tokenizer("byte", num_sentinels=4)
    model = build("t5-v1.0", tokenizer)
    (tmp_path / "pytorch_model.bin").write_text("stale")
    with pytest.raises(ConfigError, match="exists and is not empty; choose another or pass --force"):
        export_hf(model, tokenizer, tmp_path)
    assert not (tmp_path / "config.json").exists()
    export_hf(model, tokenizer, tmp_path, force=True)
    assert not (tmp_path / "pytorch_model.bin").exists()
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "t5"
