"""Every encoder-decoder family in transformers, built tiny from its config and read by encdec: the table
of docs/hf_families.md.

    python benchmarks/hf_families.py                 # prints the table
    python benchmarks/hf_families.py --write         # and writes docs/hf_families.md

For each model type of transformers' sequence-to-sequence mapping, a random-weight model is built from its
config class with every size shrunk (2 + 2 layers, d_model 32, 4 heads, vocabulary 128), saved with
save_pretrained, and opened by `encdec.interop.load_hf`. Where encdec reads it, both models score one padded
batch in float32 and greedily decode it: "exact" means logits within 1e-4 and the same tokens. Where encdec
refuses it, its own sentence is shown with why (REASONS, written here by hand: what in the architecture
encdec does not compute). A family transformers cannot build small (an audio model whose sub-configs need
more) is shown as such, with encdec's answer to its config.json alone. The table is of transformers'
sequence-to-sequence types; the decoder-only families encdec reads (Gemma 2, Gemma 3, Llama, Qwen2, Qwen3) are
built and scored in bfloat16 by the same `build` and `bf16_errors` (tests/interop/test_family_table.py) and compared
in float32, greedy tokens included, by tests/interop/test_hf_decoder_only.py and test_hf_gemma_decoder_only.py.
Whisper, of transformers' speech mapping, has its row too (SPEECH): its sources are two clips of log-mels, the
second padded as silence is, its greedy tokens transformers' generation loop's (GenerationMixin.generate: Whisper's
own generate adds its prompts and timestamp rules).
"""

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import CONFIG_MAPPING, PretrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES as SPEECH_TYPES

import encdec
from encdec.interop import load_hf
from encdec.interop.families import FAMILIES

DOC = Path(__file__).resolve().parents[1] / "docs" / "hf_families.md"
SPEECH = ("whisper",)  # the speech sequence-to-sequence types encdec reads, beside the text ones
SIZES = {  # config attribute -> the tiny value, wherever a config has it
    **dict.fromkeys(("vocab_size", "decoder_vocab_size"), 128),
    **dict.fromkeys(("d_model", "hidden_size"), 32),
    **dict.fromkeys(("encoder_layers", "decoder_layers", "num_layers", "num_decoder_layers"), 2),
    **dict.fromkeys(("num_hidden_layers",), 2),
    **dict.fromkeys(("encoder_attention_heads", "decoder_attention_heads", "num_heads", "num_attention_heads"), 4),
    "num_key_value_heads": 2,
    **dict.fromkeys(("d_kv", "head_dim"), 8),
    **dict.fromkeys(("d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "intermediate_size"), 64),
    "max_position_embeddings": 64,
    "cross_attention_hidden_size": 32,  # T5Gemma's decoder reads its encoder's width
    "num_experts": 4,
    **dict.fromkeys(("num_sparse_encoder_layers", "num_sparse_decoder_layers"), 1),
    "sliding_window": 4,
    "query_pre_attn_scalar": 8,
    **dict.fromkeys(("dropout", "dropout_rate", "attention_dropout", "activation_dropout"), 0.0),
}
REASONS = {  # why encdec does not read a family (its architecture, in a phrase)
    "audioflamingo3": "an audio-language model: an audio encoder feeding a decoder-only LM",
    "bigbird_pegasus": "block-sparse (BigBird) encoder attention",
    "encoder-decoder": "any two transformers models joined (BERT2BERT and the like): no single layout",
    "glmasr": "a speech recognition model: audio encoder",
    "granite_speech": "a speech model: audio encoder and projector into a decoder-only LM",
    "granite_speech_plus": "a speech model: audio encoder and projector into a decoder-only LM",
    "moss_transcribe_diarize": "a speech model: audio encoder",
    "musicflamingo": "an audio-language model: audio encoder",
    "nemo_speechlm": "a speech model: audio encoder",
    "omniasr": "a speech recognition model: audio encoder",
    "pegasus_x": "staggered block-local encoder attention with global tokens",
    "prophetnet": "an n-stream self-attention decoder predicting several future tokens",
    "qwen2_audio": "an audio-language model: audio encoder feeding a decoder-only LM",
    "qwen3_asr": "a speech recognition model: audio encoder",
    "seamless_m4t": "speech and text translation with separate modality encoders",
    "seamless_m4t_v2": "speech and text translation with separate modality encoders",
    "vibevoice_asr": "a speech recognition model: audio encoder",
    "voxtral": "a speech model: audio encoder feeding a decoder-only LM",
    "voxtral_realtime": "a speech model: audio encoder",
}


def shrink(config: PretrainedConfig) -> PretrainedConfig:
    """`config` with every size SIZES names set small, in its sub-configs too (T5Gemma's encoder, decoder)."""
    aliases = getattr(config, "attribute_map", {})  # Whisper's num_key_value_heads is its encoder's heads
    for name, value in SIZES.items():
        if name in aliases:
            continue
        if hasattr(config, name) and not isinstance(getattr(config, name), (dict, PretrainedConfig)):
            setattr(config, name, value)
    for name in list(vars(config)):
        part = getattr(config, name)
        if isinstance(part, PretrainedConfig):
            shrink(part)
    for name in ("pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id", "forced_eos_token_id"):
        if isinstance(getattr(config, name, None), int) and getattr(config, name) >= SIZES["vocab_size"]:
            setattr(config, name, 127)  # Marian's pad (and start) is its last token
    for name, last in (("eoi_token_index", 1), ("image_token_index", 2)):  # T5Gemma 2's, inside the vocabulary too
        if isinstance(getattr(config, name, None), int) and getattr(config, name) >= SIZES["vocab_size"]:
            setattr(config, name, SIZES["vocab_size"] - last)
    for name in ("suppress_tokens", "begin_suppress_tokens"):  # Whisper's lists, inside the vocabulary too
        if isinstance(getattr(config, name, None), list):
            setattr(config, name, [i for i in getattr(config, name) if i < SIZES["vocab_size"]])
    if getattr(config, "decoder_start_token_id", None) is None and getattr(config, "pad_token_id", None) is not None:
        config.decoder_start_token_id = config.pad_token_id  # T5's convention, which its config leaves unset
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list):  # one per layer: Gemma's sliding every other one, Qwen's (window off) none
        pair = ["sliding_attention" if "sliding_attention" in layer_types else "full_attention", "full_attention"]
        config.layer_types = pair * (getattr(config, "num_hidden_layers", 2) // 2)
    return config


def build(model_type: str, class_name: str, path: Path) -> str | None:
    """A tiny random-weight model of `model_type` saved at `path`; None, or why transformers could not build it."""
    try:
        torch.manual_seed(0)
        config = shrink(CONFIG_MAPPING[model_type]())
        with contextlib.redirect_stderr(io.StringIO()):
            model = getattr(transformers, class_name)(config).eval()
            model.save_pretrained(path)
        return None
    except Exception as error:  # noqa: BLE001 - any failure of a family we do not read is its row's answer
        (path / "config.json").parent.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"model_type": model_type}))
        return f"{type(error).__name__}: {str(error).splitlines()[0][:80]}" if str(error) else type(error).__name__


# bf16 keeps 8 bits of mantissa (a relative step of 2^-8 = 0.4%), and two implementations round in different
# places: encdec in bfloat16 must stay as near the float32 logits as transformers in bfloat16 does, within
# BF16_FACTOR times its distance plus BF16_SLACK of the largest logit (tests/interop/test_family_table.py)
BF16_FACTOR, BF16_SLACK = 1.5, 0.005


def padded_inputs(cfg) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two sources of 9 tokens, the second padded after 6, and 5 decoder inputs: ids, mask, decoder ids."""
    specials = (
        cfg.pad_id,
        cfg.eos_id,
        cfg.decoder_start_id,
        cfg.image_tokens.image_token_id,
    )  # an image token: no text's
    plain = [i for i in range(cfg.vocab_size) if i not in specials]
    ids = torch.tensor(plain)[torch.randint(0, len(plain), (2, 9), generator=torch.Generator().manual_seed(0))]
    ids[:, -1] = cfg.eos_id
    ids[1, 6:] = cfg.pad_id
    ids[1, 5] = cfg.eos_id
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 6:] = False
    tgt = torch.cat([torch.full((2, 1), cfg.decoder_start_id), ids[:, :4]], dim=1)
    if cfg.family == "whisper":  # two clips of log-mels in place of the ids, the second half silence's value
        frames = 2 * cfg.audio.max_source_positions
        features = torch.randn(2, cfg.audio.n_mels, frames, generator=torch.Generator().manual_seed(0))
        features[1, :, frames // 2 :] = -0.75
        return features, None, tgt
    return ids, mask, tgt


def hf_logits(model, ids: torch.Tensor, mask: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """A transformers model's logits of the padded batch: an encoder-decoder's of the decoder inputs over the
    sources (FSMT's keeping no cache: with one it takes the target for a single step and leaves out the causal
    mask); a decoder-only one's (Gemma, Llama, Qwen: the table's decoder-only families) of the decoder inputs alone,
    as encdec's decoder-only family computes them (its forward takes no source); Whisper's over log-mels."""
    if model.config.model_type in SPEECH:
        return model(input_features=ids.to(model.dtype), decoder_input_ids=tgt).logits
    if model.config.is_encoder_decoder:
        options = {"use_cache": False} if model.config.model_type == "fsmt" else {}
        return model(input_ids=ids, attention_mask=mask.long(), decoder_input_ids=tgt, **options).logits
    return model(input_ids=tgt).logits


def bf16_errors(path: Path, class_name: str) -> tuple[float, float]:
    """(encdec's, transformers') largest logit difference in bfloat16, both holding and computing in it, from
    transformers' float32 logits on the padded batch, each as a share of the largest float32 logit."""
    load = getattr(transformers, class_name).from_pretrained
    truth_model = load(path, attn_implementation="eager").eval()
    theirs = load(path, attn_implementation="eager", dtype=torch.bfloat16).eval()
    ours = encdec.from_pretrained(path, dtype=torch.bfloat16).eval()
    ids, mask, tgt = padded_inputs(ours.config)
    with torch.no_grad():
        truth = hf_logits(truth_model, ids, mask, tgt)
        theirs_logits = hf_logits(theirs, ids, mask, tgt).float()
        ours_logits = ours(ids, tgt, src_mask=mask).logits.float()
    scale = truth.abs().max()
    return ((ours_logits - truth).abs().max() / scale).item(), ((theirs_logits - truth).abs().max() / scale).item()


def compare(path: Path, class_name: str) -> tuple[str, str]:
    """(status, detail) of encdec against transformers on one padded batch: logits and greedy tokens."""
    theirs = getattr(transformers, class_name).from_pretrained(path, attn_implementation="eager").eval().float()
    ours = load_hf(path).eval().float()
    ids, mask, tgt = padded_inputs(ours.config)
    with torch.no_grad():
        reference = hf_logits(theirs, ids, mask, tgt)
        logits = ours(ids, tgt, src_mask=mask).logits
        greedy = ours.generate(ids, mask, max_new_tokens=6, num_beams=1, do_sample=False)
        options = dict(max_new_tokens=6, num_beams=1, do_sample=False, min_length=0)
        if mask is None:  # log-mels: transformers' generation loop, Whisper's own rules aside
            expected = transformers.GenerationMixin.generate(theirs, input_features=ids, **options)
        else:
            expected = theirs.generate(input_ids=ids, attention_mask=mask.long(), **options)
    difference = (logits - reference).abs().max().item()
    width = min(greedy.shape[1], expected.shape[1])
    same = torch.equal(greedy[:, :width], expected[:, :width])
    exact = difference < 1e-4 and same
    detail = f"max logit difference {difference:.1e}, greedy tokens {'equal' if same else 'differ'}"
    ours16, theirs16 = bf16_errors(path, class_name)
    detail += f", in bf16 {ours16:.1%} off float32 (transformers' {theirs16:.1%})"
    return ("exact" if exact else "differs"), f"{detail}; {paths(ours, theirs, path, class_name, ids, mask, tgt)}"


def paths(ours, theirs, path: Path, class_name: str, ids, mask, tgt) -> str:
    """What else the family does in encdec: its export reloaded by transformers with the same logits, its
    config.json counted by `encdec size` as transformers counts the model, and a peft adapter written for it."""
    from encdec.cli import main as encdec
    from encdec.interop.to_hf import hf_layout

    layout = hf_layout(ours.config)
    out = path.parent / f"{path.name}-export"
    FAMILIES[layout].save(ours, out)
    reloaded = getattr(transformers, class_name).from_pretrained(out, attn_implementation="eager").eval().float()
    with torch.no_grad():
        again, first = hf_logits(reloaded, ids, mask, tgt), hf_logits(theirs, ids, mask, tgt)
    exported = "export exact" if (again - first).abs().max().item() < 1e-4 else "export differs"
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(io.StringIO()):
        code = encdec(["size", str(path)])
    counted = said.getvalue().split("parameters:")[1].split()[0] if code == 0 else None
    fixed = {id(p) for m in theirs.modules() if "Sinusoidal" in type(m).__name__ for p in m.parameters()}
    if theirs.config.model_type in SPEECH:  # Whisper's encoder sinusoids, frozen where built (not where read)
        fixed.add(id(theirs.model.encoder.embed_positions.weight))
    learned = {id(p): p for p in theirs.parameters() if id(p) not in fixed}  # Marian's sinusoid tables are fixed
    # T5Gemma 2's vision tower and projector: encdec reads (and counts) the text model alone
    image = {id(p) for name, p in theirs.named_parameters() if "vision_tower" in name or "multi_modal" in name}
    learned = {key: p for key, p in learned.items() if key not in image}
    theirs_count = f"{sum(p.numel() for p in learned.values()):,}"
    size = "size exact" if counted == theirs_count else f"size {counted or 'refused'} vs {theirs_count}"
    return f"{exported}; {size}; peft adapter {'written' if FAMILIES[layout].module_names(ours.config) else 'no (merged export)'}"


def status(model_type: str, class_name: str, root: Path) -> tuple[str, str]:
    path = root / model_type
    path.mkdir()
    not_built = build(model_type, class_name, path)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            if not_built is None:
                return compare(path, class_name)
            load_hf(path)
            return "read", f"transformers could not build it small ({not_built})"
    except Exception as error:  # noqa: BLE001 - encdec's refusal is the row's answer
        sentence = str(error).split(": ", 1)[-1].splitlines()[0]
        sentence = sentence.split("; supported:")[0]  # the list of families is the table itself
        why = REASONS.get(model_type, "")
        return "refused", f"{why}{' (' + sentence[:90] + ')' if why else sentence[:120]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table to {DOC.relative_to(DOC.parents[1])}")
    parser.add_argument("--only", help="comma-separated model types (default: every one)")
    args = parser.parse_args()
    types = MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES | {name: SPEECH_TYPES[name] for name in SPEECH}
    chosen = args.only.split(",") if args.only else list(types)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for model_type in chosen:
            state, detail = status(model_type, types[model_type], Path(root))
            rows.append(f"| `{model_type}` | {types[model_type]} | {state} | {detail} |")
            print(rows[-1], file=sys.stderr, flush=True)
    table = "\n".join(
        ["| model_type | transformers class | encdec | how it compares |", "| --- | --- | --- | --- |", *rows]
    )
    exact = sum("| exact |" in row for row in rows)
    head = (
        "# Hugging Face encoder-decoder families in encdec\n\n"
        f"Written by `python benchmarks/hf_families.py --write` with transformers {transformers.__version__} and "
        f"torch {torch.__version__}: each of transformers' {len(rows)} sequence-to-sequence model types (its text "
        "ones and Whisper, the speech family encdec reads, on log-mels) built tiny "
        "from its config (random weights), saved, opened by encdec and compared on a padded batch in float32 "
        f"(logits within 1e-4 and the same greedy tokens: exact); and in bfloat16, both holding and computing in it, "
        "how far each lands from transformers' float32 logits, as a share of the largest (encdec within "
        f"{BF16_FACTOR}x transformers' own distance plus {BF16_SLACK:.1%} for every exact one: "
        f"tests/interop/test_family_table.py). {exact} are exact; the rest are refused in one "
        "sentence, with what in their architecture encdec does not compute.\n\n"
    )
    print(table)
    if args.write:
        DOC.write_text(head + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
