"""Hugging Face LED (model_type led: LEDForConditionalGeneration) <-> encdec's post-norm encoder-decoder whose
encoder attends locally with global tokens (attention.encoder local_global).

LED (Beltagy et al. 2020, the Longformer-Encoder-Decoder) is BART with Longformer's self-attention in the encoder:
each token sees the keys within attention_window / 2 on each side (encdec's local_radius; transformers pads the
input to a multiple of the window, whose padding no real token sees, so outputs are equal on any length), and the
global tokens, which attend to every key through projections of their own (query_global, key_global,
value_global: our global_q, global_k, global_v). transformers chooses them by a global_attention_mask argument;
encdec by model.attention.global_tokens: none (its default, transformers' without that argument) or first, each input's
first real token (LED's summarization examples); the rule is not in config.json, so set it in a run's model
section. Its decoder is BART's. Positions are learned from row 0 (no offset), the encoder's table
max_encoder_position_embeddings rows (model.encoder.max_positions), the decoder's max_decoder_position_embeddings.
One attention_window for every layer: a list of unequal ones is refused. Its defaults, as LEDConfig's: pad 1,
EOS 2, decoder start 2. Its tokenizer is BART's byte-level BPE.
"""

import torch

from encdec.errors import CheckpointError
from encdec.interop.bart import bart_layout
from encdec.interop.family import Family, NameMap, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig

ENCODER = ("encoder.blocks.{i}.self_attn.", "led.encoder.layers.{i}.self_attn.")
# BART's names under led. (LEDForConditionalGeneration's LEDModel), its self-attentions' apart
BART = tuple((ours, theirs.replace("model.", "led.", 1)) for ours, theirs in bart_layout.NAMES.pairs)
NAMES = (
    NameMap("LED", BART)
    .where(lambda ours, theirs: "{side}.blocks.{i}.self_attn." not in ours)
    .plus(
        "LED",
        *(
            (ENCODER[0] + ours, ENCODER[1] + "longformer_self_attn." + theirs)
            for ours, theirs in (
                ("q.{wb}", "query.{wb}"),
                ("k.{wb}", "key.{wb}"),
                ("v.{wb}", "value.{wb}"),
                ("global_q.{wb}", "query_global.{wb}"),
                ("global_k.{wb}", "key_global.{wb}"),
                ("global_v.{wb}", "value_global.{wb}"),
            )
        ),  # fmt: skip
        (ENCODER[0] + "o.{wb}", ENCODER[1] + "output.{wb}"),
        ("decoder.blocks.{i}.self_attn.{qkv}.{wb}", "led.decoder.layers.{i}.self_attn.{qkv}_proj.{wb}"),
        ("decoder.blocks.{i}.self_attn.o.{wb}", "led.decoder.layers.{i}.self_attn.out_proj.{wb}"),
    )
)
KEYS = {**bart_layout.BART_KEYS, "max_positions": "max_decoder_position_embeddings"}


def led_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    windows = hf.get("attention_window", 512)
    windows = set(windows) if isinstance(windows, list) else {windows}
    if len(windows) != 1:
        raise CheckpointError(f"attention_window differs between layers ({sorted(windows)}); encdec reads one a model")
    hf = {"pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2, "bos_token_id": 0, **hf}
    hf["max_position_embeddings"] = hf.get("max_decoder_position_embeddings", 1024)
    return bart_layout.layout_config(
        hf,
        untied_head,
        positions={"kind": "learned"},
        embeddings={"norm": True},
        attention={"encoder": "local_global", "local_radius": windows.pop() // 2},
        encoder={"max_positions": hf.get("max_encoder_position_embeddings", 16384)},
        hf_model_type="led",
    )


def check_led(cfg: ModelConfig) -> None:
    own = [key for key, value in vars(cfg.encoder).items() if value is not None and key != "max_positions"]
    embeddings = {
        "positions.kind must be learned with positions.offset 0": cfg.positions.kind != "learned"
        or cfg.positions.offset != 0,
        "embeddings.norm must be true": not cfg.embeddings.norm,
        "embeddings.scale must be false": cfg.embeddings.scale,
        "attention.encoder must be local_global": cfg.attention.encoder != "local_global",
        f"the encoder's own widths must be the decoder's (model.encoder: {', '.join(own)})": bool(own),
    }
    bart_layout.check_layout(cfg, "LED", embeddings)


def led_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    cfg = model.config
    weights = NAMES.weights(model)
    weights["final_logits_bias"] = weights.pop("final_logits_bias", torch.zeros(cfg.vocab_size)).reshape(1, -1)
    if not cfg.embeddings.tie:  # with tie_word_embeddings false transformers ties no embeddings at all
        for side in ("encoder", "decoder"):
            weights[f"led.{side}.embed_tokens.weight"] = weights["led.shared.weight"].clone()
    config = bart_layout.layout_hf_config(cfg)
    for bart_only in ("max_position_embeddings", "scale_embedding"):
        config.pop(bart_only)
    config["max_encoder_position_embeddings"] = cfg.encoder.max_positions or cfg.positions.max
    config["max_decoder_position_embeddings"] = cfg.positions.max
    config["attention_window"] = [2 * cfg.attention.local_radius] * cfg.n_encoder_layers
    return weights, config


def global_rule_note(cfg: ModelConfig) -> str | None:
    """The warning an export logs where the model picks global tokens, which config.json cannot say."""
    if cfg.attention.global_tokens == "none":
        return None
    return (
        f"model.attention.global_tokens {cfg.attention.global_tokens} is not written: transformers' LED takes its global tokens "
        "as a global_attention_mask argument of each call (and without one, none)"
    )


FAMILIES = (
    Family(
        "led",
        "LEDForConditionalGeneration",
        lambda path, hf_config: bart_layout.load_layout(path, led_config_from_hf, hf_config, NAMES, "led."),
        check_led,
        led_files,
        lambda cfg: cfg.hf_model_type == "led",
        KEYS,
        ("vocab.json", "merges.txt"),  # BART's byte-level BPE beside tokenizer.json
        config_read_alone(led_config_from_hf),
        names=lambda cfg: NAMES,
        encoder_widths=True,  # its encoder's own position table
        note=global_rule_note,
    ),
)
