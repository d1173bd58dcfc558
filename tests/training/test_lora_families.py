"""A LoRA run of each Hugging Face family a user meets most, end to end: a random-weight checkpoint built from
transformers' config with a tiny tokenizer encdec reads, `encdec train` from it (training.init_from) with a
lora section in the family's own peft target names (T5's q, v, wo; BART's q_proj, fc1; T5Gemma's gate_proj...)
for 3 steps on Multi30k pairs, `encdec export RUN --adapter`, and peft's PeftModel over transformers' model
computing the logits encdec's adapted model does."""

import gzip
import json
from pathlib import Path

import pytest
import torch
import yaml
from model_kit import HF_BART_SHAPE, HF_T5_SHAPE

import encdec
from encdec.cli import main
from encdec.errors import ConfigError
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.tokenizers import build_tokenizer

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "translation" / "multi30k"
PAIRS = 24  # Multi30k's first German-English training pairs
T5_TARGETS = ["q", "v", "EncDecAttention.k", "wo"]  # T5's names are peft's; EncDecAttention is Hugging Face's alone
BART_TARGETS = ["q_proj", "v_proj", "encoder_attn.k_proj", "out_proj", "fc1", "fc2"]
T5GEMMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def multi30k_texts() -> list[tuple[str, str]]:
    sides = []
    for lang in ("de", "en"):
        with gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            sides.append([line.strip() for _, line in zip(range(PAIRS), handle)])
    return list(zip(*sides))


def bpe(texts: list[str], path: Path, specials: list[str], template: str | None = None, **tokens):
    """A byte-level BPE of 300 pieces trained on `texts`, `specials` at its first ids, behind
    PreTrainedTokenizerFast (`tokens`: its pad_token, eos_token, ...), saved into `path`."""
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(texts, trainer=trainer)
    if template is not None:
        ids = [(token, backend.token_to_id(token)) for token in specials if token in template]
        backend.post_processor = tokenizers.processors.TemplateProcessing(single=template, special_tokens=ids)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", **tokens)
    tokenizer.save_pretrained(path)
    return tokenizer


def t5_tokenizer(texts, path):
    """T5's specials (pad 0, EOS 1) and an EOS closing each text."""
    return bpe(texts, path, ["<pad>", "</s>", "<unk>"], "$A </s>", pad_token="<pad>", eos_token="</s>")


def t5_family(family: str):
    """A T5-layout checkpoint's builder: T5 v1.1 / Flan-T5 (gated GELU, untied head) over a BPE, mT5 and
    UMT5 over encdec's byte tokenizer written for transformers, ByT5 (T5 v1.1) over ByT5Tokenizer."""

    def build(texts, path):
        if family == "t5":
            vocab = len(t5_tokenizer(texts, path))
        elif family == "byt5":
            transformers.ByT5Tokenizer().save_pretrained(path)
            vocab = 384
        else:
            convert_tokenizer(build_tokenizer("byte")).save(path)
            vocab = 384
        config_class, model_class = {
            "t5": ("T5Config", "T5ForConditionalGeneration"),
            "byt5": ("T5Config", "T5ForConditionalGeneration"),
            "mt5": ("MT5Config", "MT5ForConditionalGeneration"),
            "umt5": ("UMT5Config", "UMT5ForConditionalGeneration"),
        }[family]
        config = getattr(transformers, config_class)(
            vocab_size=vocab,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
            decoder_start_token_id=0,
            **HF_T5_SHAPE,
        )
        model = getattr(transformers, model_class)(config)
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * 0.05)  # untied
        model.save_pretrained(path)
        return T5_TARGETS + ["wi_0"]

    return build


def bart_family(config_class: str, model_class: str):
    """BART or mBART over a BPE of BART's specials (<s> 0, <pad> 1, </s> 2), EOS the decoder start."""

    def build(texts, path):
        tokenizer = bpe(
            texts,
            path,
            ["<s>", "<pad>", "</s>", "<unk>"],
            "<s> $A </s>",
            bos_token="<s>",
            pad_token="<pad>",
            eos_token="</s>",
        )
        config = getattr(transformers, config_class)(
            vocab_size=len(tokenizer),
            bos_token_id=0,
            pad_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=2,
            **HF_BART_SHAPE,
        )
        getattr(transformers, model_class)(config).save_pretrained(path)
        return BART_TARGETS

    return build


def marian(texts, path):
    """Marian as opus-mt ships it: EOS 0, pad the last id and the decoder start, SiLU, scaled embeddings."""
    tokenizer = bpe(texts, path, ["</s>", "<unk>"], "$A </s>", eos_token="</s>")
    tokenizer.add_special_tokens({"pad_token": "<pad>"})  # the last id, as Marian's
    tokenizer.save_pretrained(path)
    pad = len(tokenizer) - 1
    config = transformers.MarianConfig(
        vocab_size=len(tokenizer),
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        activation_function="swish",
        scale_embedding=True,
        **HF_BART_SHAPE,
    )
    transformers.MarianMTModel(config).save_pretrained(path)
    return BART_TARGETS


def pegasus(texts, path):
    """Pegasus: pad 0 (the decoder start), EOS 1, T5's tokenizer layout."""
    tokenizer = t5_tokenizer(texts, path)
    config = transformers.PegasusConfig(vocab_size=len(tokenizer), scale_embedding=True, **HF_BART_SHAPE)
    transformers.PegasusForConditionalGeneration(config).save_pretrained(path)
    return BART_TARGETS


def nllb(texts, path):
    """NLLB's architecture (M2M100) over an NLLB tokenizer of the texts' characters and three language codes."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in ["\u2581", *sorted({c for text in texts for c in text if c != " "})]:
        vocab.setdefault(piece, len(vocab))
    tokenizer = transformers.NllbTokenizer(
        vocab=vocab, merges=[], additional_special_tokens=["eng_Latn", "deu_Latn", "fra_Latn"]
    )
    tokenizer.save_pretrained(path)
    config = transformers.M2M100Config(vocab_size=len(tokenizer), **HF_BART_SHAPE)
    transformers.M2M100ForConditionalGeneration(config).save_pretrained(path)
    return BART_TARGETS


def t5gemma(texts, path):
    """T5Gemma (Gemma 2's stacks: GQA, capped scores and logits, a window in every other layer) over a
    Gemma-shaped tokenizer.json alone (specials <pad> <eos> <bos> <unk> at ids 0-3)."""
    vocab = 300
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    backend.normalizer = tokenizers.normalizers.Replace(" ", "\u2581")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    # one id short of the model's: transformers adds Gemma's <mask>
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab - 1, special_tokens=specials, show_progress=False)
    backend.train_from_iterator(texts, trainer)
    backend.save(str(path / "tokenizer.json"))
    stack = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=40,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=12,
        sliding_window=3,
        attn_logit_softcapping=1.5,
        final_logit_softcapping=4.0,
    )
    config = transformers.T5GemmaConfig(
        encoder={**stack, "num_hidden_layers": 2}, decoder={**stack, "num_hidden_layers": 2}, vocab_size=vocab
    )
    transformers.T5GemmaForConditionalGeneration(config).save_pretrained(path)
    return T5GEMMA_TARGETS


def longt5(texts, path):
    """LongT5, transient-global (a radius of 3, blocks of 4: narrower than the 32-token sources), tied head
    unscaled as released, over T5's tokenizer layout."""
    tokenizer = t5_tokenizer(texts, path)
    config = transformers.LongT5Config(
        vocab_size=len(tokenizer),
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=0,
        encoder_attention_type="transient-global",
        local_radius=3,
        global_block_size=4,
        **HF_T5_SHAPE,
    )
    transformers.LongT5ForConditionalGeneration(config).save_pretrained(path)
    return T5_TARGETS


def t5gemma2(texts, path):
    """T5Gemma 2's text model (qk norms, merged decoder attention, a split window of 4, Gemma 3's RoPE) with a
    tiny vision tower, over t5gemma's Gemma-shaped tokenizer and the tokenizer class a release names."""
    t5gemma(texts, path)
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GemmaTokenizer"}))
    stack = dict(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=12,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
    )
    vision = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
    )
    specials = dict(eoi_token_index=5, image_token_index=7)  # within the vocabulary, as every token id must be
    encoder = dict(text_config=stack, vision_config=vision, **specials)
    config = transformers.T5Gemma2Config(encoder=encoder, decoder=stack, **specials)
    transformers.T5Gemma2ForConditionalGeneration(config).save_pretrained(path)
    return T5GEMMA_TARGETS


FAMILIES = {  # name -> builder(texts, directory) writing the checkpoint and tokenizer; returns peft's targets
    "t5-v1.1": t5_family("t5"),
    "mt5": t5_family("mt5"),
    "byt5": t5_family("byt5"),
    "umt5": t5_family("umt5"),
    "bart": bart_family("BartConfig", "BartForConditionalGeneration"),
    "mbart": bart_family("MBartConfig", "MBartForConditionalGeneration"),
    "marian": marian,
    "pegasus": pegasus,
    "nllb": nllb,
    "t5gemma": t5gemma,
    "longt5": longt5,
    "t5gemma2": t5gemma2,
}


@pytest.fixture(scope="module")
def pairs_tsv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("multi30k") / "train.tsv"
    path.write_text("".join(f"{de}\t{en}\n" for de, en in multi30k_texts()), encoding="utf-8")
    return path


def run_config(path: Path, hf_dir: Path, data: Path, targets: list[str]) -> Path:
    values = {
        "model": {"dropout": 0.0},
        "data": {"format": "tsv", "train": [str(data)], "validation": [str(data)]},
        "objective": {"kind": "seq2seq", "max_source_len": 32, "max_target_len": 32},
        "optimizer": {"lr": 5e-2},
        "training": {"steps": 3, "batch_size": 4, "seed": 0, "threads": 1, "device": "cpu", "init_from": str(hf_dir)},
        "evaluation": {"interval": 3, "steps": 1},
        "output": {"save_interval": 3, "keep_last": 1, "plot": False},
        "lora": {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": targets},
    }
    path.write_text(yaml.safe_dump(values))
    return path


def batch(vocab: int, start: int):
    """(3, 10) source ids away from the specials with the second row's last 4 masked, their mask, and (3, 7)
    decoder inputs from the decoder start."""
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(4, vocab - 1, (3, 10), generator=generator)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 6:] = 0
    tgt = torch.randint(4, vocab - 1, (3, 7), generator=generator)
    tgt[:, 0] = start
    return src, mask, tgt


@pytest.mark.parametrize("family", FAMILIES)
def test_a_lora_run_in_peft_s_names_exports_an_adapter_peft_loads_with_encdec_s_logits(
    family, pairs_tsv, tmp_path, capsys
):
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    torch.manual_seed(0)
    targets = FAMILIES[family]([text for pair in multi30k_texts() for text in pair], hf_dir)
    config = run_config(tmp_path / "lora.yaml", hf_dir, pairs_tsv, targets)
    assert main(["train", str(config), "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    assert main(["export", str(tmp_path / "run"), "--adapter", "--out", str(tmp_path / "adapter")]) == 0
    written = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    ours = encdec.from_pretrained(tmp_path / "run")
    cfg = ours.config
    src, mask, tgt = batch(cfg.vocab_size, cfg.decoder_start_id)
    with torch.no_grad():
        expected = ours(src, tgt, src_mask=mask.bool()).logits
        base = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir, attn_implementation="eager").eval()
        before = base(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        adapted = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
        got = adapted(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    gap = (got - expected).abs().max().item()
    assert gap < 1e-4, f"{family}: peft's logits are {gap:.2e} from encdec's"
    assert (before - expected).abs().max().item() > 1e-3  # the adapter trained: the test compares something
    lora_b = [m.lora_B["default"].weight for m in adapted.modules() if hasattr(m, "lora_B") and m.lora_B]
    assert len(lora_b) == len(written["target_modules"]) and all(w.abs().max() > 0 for w in lora_b)


def test_a_target_name_the_family_lacks_is_one_sentence_naming_hugging_face_s(pairs_tsv, tmp_path, capsys):
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    bart_family("BartConfig", "BartForConditionalGeneration")([text for p in multi30k_texts() for text in p], hf_dir)
    config = run_config(tmp_path / "lora.yaml", hf_dir, pairs_tsv, ["q_proj", "o_proj"])  # o_proj is T5Gemma's
    capsys.readouterr()
    assert main(["train", str(config), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("encdec: error: lora.target_modules 'o_proj' names no layer") and err.count("\n") == 1
    assert "or in Hugging Face's names self_attn.q_proj, self_attn.k_proj, " in err  # as many as fit, whole
    assert err.endswith(" more)\n") and "..." not in err


def test_an_interleaved_transformer_s_adapter_is_reordered_as_its_marian_export(tmp_path):
    """The canonical Transformer exports as Marian with its model dimension reordered sines first; its
    adapters are reordered alike, so peft over the export computes encdec's logits."""
    from encdec.interop import export_hf
    from encdec.interop.peft_adapter import hf_module_names, save_peft_adapter
    from encdec.models import EncoderDecoder
    from encdec.models.lora import add_lora, lora_layers
    from encdec.models.presets import preset

    torch.manual_seed(0)
    cfg = preset("transformer-tiny", vocab_size=360, d_model=32, d_ff=48, n_heads=4, dropout=0.0)
    assert cfg.positions.sinusoidal_layout == "interleaved"
    ours = EncoderDecoder(cfg).eval()
    with pytest.raises(ConfigError, match="the model carries no LoRA adapter"):
        save_peft_adapter(ours, tmp_path / "unused", "base")
    export_hf(ours, build_tokenizer("byte"), tmp_path / "base")
    targets = ["q_proj", "encoder_attn.k_proj", "out_proj", "fc1", "fc2"]
    add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets, aliases=hf_module_names(ours))
    for layer in lora_layers(ours).values():
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
    save_peft_adapter(ours, tmp_path / "adapter", str(tmp_path / "base"))
    src, mask, tgt = batch(cfg.vocab_size, cfg.decoder_start_id)
    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base")
    adapted = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    with torch.no_grad():
        expected = ours(src, tgt, src_mask=mask.bool()).logits
        got = adapted(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert (got - expected).abs().max().item() < 1e-4
