"""T5Gemma (model_type t5gemma): a random-weight checkpoint (saved with save_pretrained: no download) with
capped attention scores and logits, a sliding window narrower than the test's sequences in every other layer,
grouped-query attention and stacks of different depths, or an encoder wider than the decoder, loads exactly: logits within 1e-4 of transformers'
eager attention on a padded batch, greedy and beam-4 tokens identical, an export transformers reloads with the
same logits, `encdec generate` on the directory with a tokenizer.json alone, a server's rows equal generate
alone; `encdec size` of t5gemma-2b-2b's config.json is transformers' count."""

import json

import pytest
import torch
from gemma_kit import TEXTS, VOCAB, tokenizer_json

import encdec
from encdec.cli import main
from encdec.errors import CheckpointError, ConfigError
from encdec.interop import export_hf
from encdec.interop.from_hf import hf_model_config
from encdec.tokenizers.pretrained import PretrainedTokenizer
from tests.interop import parity_kit
from tests.interop.serving_kit import assert_served_equals_generate_alone, mixed

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


def stack(layers: int, **overrides) -> dict:
    """A stack's config: 4 query heads over 2 key/value heads, a window of 3 in its even layers (the default
    layer_types), query_pre_attn_scalar other than head_dim, scores capped at 1.5, logits at 4."""
    return {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 40,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "query_pre_attn_scalar": 12,
        "sliding_window": 3,
        "attn_logit_softcapping": 1.5,
        "final_logit_softcapping": 4.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    } | overrides


# an encoder wider than the decoder, with more heads of other widths (t5gemma-9b-2b's kind, the unbalanced)
WIDER_ENCODER = dict(hidden_size=48, intermediate_size=56, num_attention_heads=6, num_key_value_heads=3, head_dim=8)


def hf_model(tied: bool = True, encoder: dict | None = None, **decoder):
    """A random-weight T5GemmaForConditionalGeneration, its norms' weights random too (they start at 0)."""
    torch.manual_seed(0)
    config = transformers.T5GemmaConfig(
        encoder=stack(3, **(encoder or {})), decoder=stack(2, **decoder), vocab_size=VOCAB, tie_word_embeddings=tied
    )
    config._attn_implementation = "eager"  # transformers' SDPA cannot cap scores
    model = transformers.T5GemmaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.normal_(0, 0.1 if "embed" in name or "lm_head" in name else 0.2)
    return model


def saved(path, tied: bool = True, encoder: dict | None = None):
    reference = hf_model(tied, encoder)
    reference.save_pretrained(path)
    tokenizer_json(path)
    return reference


@pytest.fixture(scope="module", params=["tied", "untied", "wider-encoder"])
def pair(request, tmp_path_factory):
    """(transformers' model, ours) of one checkpoint, its head tied to the decoder's token table or its own, or
    its encoder wider than its decoder (model.encoder)."""
    path = tmp_path_factory.mktemp(request.param)
    reference = saved(path, request.param != "untied", WIDER_ENCODER if request.param == "wider-encoder" else None)
    ours = encdec.load_hf(path)
    assert ours.config.encoder_width == (48 if request.param == "wider-encoder" else 32)
    return reference, ours, path


def padded_batch():
    """(3, 12) ids with rows of 12, 7 and 3 real tokens, their mask, and (3, 9) decoder inputs from the decoder
    start (no pad among them: transformers' uncached forward would mask a pad id there)."""
    return parity_kit.padded_rows(VOCAB, (12, 7, 3), 12, 9, low=4, start=2)


def logit_gap(reference, ours, left: bool = False) -> float:
    return parity_kit.logit_gap(reference, ours, padded_batch(), left)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_logits_equal_transformers_on_a_padded_batch(pair, left):
    reference, ours, path = pair
    assert logit_gap(reference, ours, left) < 1e-4
    cfg = ours.config
    assert (cfg.attention.sliding_window, cfg.attention.global_every, cfg.attention.softcap, cfg.output.softcap) == (
        3,
        2,
        1.5,
        4.0,
    )
    assert (cfg.n_encoder_layers, cfg.decoder_layers, cfg.n_kv_heads, cfg.attention.scale_dim) == (3, 2, 2, 12)
    assert cfg.embeddings.tie == reference.config.tie_word_embeddings and not cfg.embeddings.shared
    assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id) == (0, 1, 2)
    assert hf_model_config(path) == cfg  # config.json alone (encdec size) reads the same model


def test_every_gemma_setting_changes_the_logits(pair):
    """Each of the caps and the window acts in the test above: without it, the logits move."""
    reference, ours, _ = pair
    attentions = [m for m in ours.modules() if isinstance(m, encdec.modules.Attention)]
    for module in attentions:
        module.softcap = None
    assert logit_gap(reference, ours) > 1e-2
    for module in attentions:
        module.softcap = 1.5
    ours.encoder.window = ours.decoder.window = None
    assert logit_gap(reference, ours) > 1e-2
    ours.encoder.window = ours.decoder.window = 3
    assert logit_gap(reference, ours) < 1e-4


@pytest.mark.parametrize("options", [{}, {"num_beams": 4}], ids=["greedy", "beam 4"])
def test_generated_tokens_equal_transformers(pair, options):
    reference, ours, _ = pair
    src, mask, _ = padded_batch()
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=12, do_sample=False, **options)
    assert expected.shape[1] > 4  # past the window of 3
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=12, **options), expected)


def test_a_decoder_start_token_id_in_config_json_starts_decoding_as_in_transformers(tmp_path):
    """transformers' generate starts at decoder_start_token_id where a config.json sets one, else at the
    decoder's bos_token_id: encdec reads the same."""
    reference = hf_model()
    reference.config.decoder_start_token_id = reference.generation_config.decoder_start_token_id = 0
    reference.save_pretrained(tmp_path)
    ours = encdec.load_hf(tmp_path)
    src, mask, _ = padded_batch()
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert ours.config.decoder_start_id == 0 and expected[0, 0] == 0
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=6), expected)


def test_the_compiled_fixed_step_generates_the_eager_tokens(pair):
    _, ours, _ = pair
    src, mask, _ = padded_batch()
    for options in ({}, {"num_beams": 4}):
        expected = encdec.generate(ours, src, mask, max_new_tokens=12, **options)
        assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=12, compile=True, **options), expected)


def test_a_server_batch_of_rows_each_at_its_own_position_equals_generate_alone(pair):
    _, ours, _ = pair
    assert_served_equals_generate_alone(ours, (4, VOCAB), mixed(12))


def test_an_export_reloads_in_transformers_with_the_same_logits(pair, tmp_path):
    reference, ours, path = pair
    name = export_hf(ours, PretrainedTokenizer.from_directory(path), tmp_path / "out")
    assert name == "T5GemmaForConditionalGeneration"
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out", attn_implementation="eager")
    assert type(reloaded).__name__ == name
    assert logit_gap(reloaded.eval(), ours) < 1e-4
    again = encdec.load_hf(tmp_path / "out")
    assert again.config == ours.config
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def test_a_tokenizer_json_alone_is_read_and_generate_runs_on_the_command_line(pair, tmp_path, capsys):
    reference, ours, path = pair
    tokenizer = PretrainedTokenizer.from_directory(path)
    assert not (path / "tokenizer_config.json").exists()
    ids = tokenizer.encode(TEXTS[0])
    assert tokenizer.decode(ids) == TEXTS[0] and 3 not in ids  # no <unk>
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(TEXTS) + "\n")
    args = ["generate", str(path), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "6"]
    assert main(args) == 0
    outputs = [json.loads(line)["output"] for line in capsys.readouterr().out.splitlines()]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(path)  # Gemma's, padding on the left
    encoded = hf_tokenizer(TEXTS, return_tensors="pt", padding=True)
    assert (encoded["input_ids"][:, -1] != 0).all()
    expected = reference.generate(**encoded, max_new_tokens=6, do_sample=False)
    assert outputs == [text.strip() for text in hf_tokenizer.batch_decode(expected[:, 1:], skip_special_tokens=True)]


GEMMA_2_2B = {  # Gemma 2 2B's published stack, which transformers' T5GemmaModuleConfig takes as its defaults
    "vocab_size": 256000,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "model_type": "t5_gemma_module",
}
T5GEMMA_2B_2B = {  # t5gemma-2b-2b's config.json as written from those values (not copied from the Hub's file)
    "architectures": ["T5GemmaForConditionalGeneration"],
    "model_type": "t5gemma",
    "encoder": GEMMA_2_2B,
    "decoder": GEMMA_2_2B,
    "vocab_size": 256000,
    "tie_word_embeddings": True,
}


def test_encdec_size_of_t5gemma_2b_2b_is_transformers_parameter_count(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(T5GEMMA_2B_2B))
    assert main(["size", str(tmp_path / "config.json")]) == 0
    keys = {k: v for k, v in T5GEMMA_2B_2B.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        built = transformers.T5GemmaForConditionalGeneration(transformers.T5GemmaConfig(**keys))
    expected = sum(p.numel() for p in built.parameters())
    assert f"parameters:                    {expected:,}\n" in capsys.readouterr().out
    assert expected == 5_596_853_760  # two token tables of 590M (the head tied to the decoder's) and the stacks


def test_what_encdec_cannot_read_or_write_is_one_sentence(tmp_path):
    reference = hf_model()
    reference.config.decoder.rms_norm_eps = 1e-5  # stacks of other norms (their widths may differ)
    config = json.loads(reference.config.to_json_string())
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="encoder and decoder differ in rms_norm_eps .1e-06 and 1e-05.; encdec"):
        hf_model_config(tmp_path)
    config["decoder"]["rms_norm_eps"] = 1e-6
    config["encoder"]["layer_types"] = ["full_attention", "sliding_attention", "full_attention"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="layer_types are not one global layer every n"):
        hf_model_config(tmp_path)
    config["encoder"]["layer_types"] = None
    config["decoder"]["num_attention_heads"] = 0
    config["encoder"]["num_attention_heads"] = 0
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="config.json's num_attention_heads"):
        hf_model_config(tmp_path)
    rot5 = encdec.build_model(encdec.preset("rot5-tiny"))
    with pytest.raises(
        ConfigError, match="^this model cannot be saved as Hugging Face T5Gemma: .*norms.kind must be gemma"
    ):
        encdec.interop.families.FAMILIES["t5gemma"].save(rot5, tmp_path / "out")
    with pytest.raises(
        ConfigError, match="^model.attention.sliding_window is not used by the ar_encdec family; remove it$"
    ):
        encdec.build_model(encdec.preset("ar_encdec-tiny", sliding_window=4))  # decoder_only's is Gemma's
    with pytest.raises(
        ConfigError, match="^model.attention.sliding_window does not combine with model.positions.kind relative"
    ):
        encdec.build_model(encdec.preset("t5-tiny", sliding_window=4))
