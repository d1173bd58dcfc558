"""The embedding loss's options beyond the seeds (their "next steps"): L1 and Huber disaffinities, a
learned MATMUL aggregation, LayerNorms without learned gain and bias."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lm_checks import V, assert_lm_cached_equals_full, tiny
from safetensors.torch import load_file

import encdec
from encdec.cli import main
from encdec.errors import ConfigError
from encdec.models import ModelConfig, build_model
from encdec.models.research_config import ResearchOptions
from encdec.models.research_losses import CausalMixing, EmbeddingLoss, cumulative_mean
from encdec.training.metrics import read_metrics

SEEDS = Path(__file__).resolve().parents[2] / "configs" / "seeds" / "cpu"
E = torch.tensor([[[1.0, 0.0], [3.0, 0.0]]])  # cumulative means [1, 0], [2, 0]


def plain_loss(kind: str) -> EmbeddingLoss:
    return EmbeddingLoss(2, kind, "NONE", "NONE", use_ln_on_encoder_out=False)


@pytest.mark.parametrize(
    "enc,l1,huber",
    [
        ([[1.0, 0.0], [0.0, 0.0]], 2 / 4, (2 - 0.5) / 4),  # one error of 2: Huber's linear side, |e| - 1/2
        ([[1.5, 0.0], [2.0, 0.0]], 0.5 / 4, 0.5 * 0.5**2 / 4),  # one error of 0.5: its quadratic side, e^2 / 2
    ],
)
def test_l1_and_huber_losses_on_hand_built_tensors(enc, l1, huber):
    enc = torch.tensor([enc])
    assert plain_loss("L1")(E, enc).item() == pytest.approx(l1)
    assert plain_loss("HUBER")(E, enc).item() == pytest.approx(huber)


def test_huber_is_half_the_mse_for_small_errors_and_the_l1_less_a_half_for_large_ones():
    zeros = torch.zeros(1, 3, 2)  # embeddings whose cumulative mean is zero
    small, large = torch.full((1, 3, 2), 0.3), torch.full((1, 3, 2), 5.0)
    huber = plain_loss("HUBER")
    torch.testing.assert_close(huber(zeros, small), plain_loss("MSE")(zeros, small) / 2)
    torch.testing.assert_close(huber(zeros, large), plain_loss("L1")(zeros, large) - 0.5)


def test_matmul_aggregation_is_the_cumulative_mean_at_initialisation():
    torch.manual_seed(0)
    mixing = CausalMixing(8)
    assert torch.equal(mixing.logits, torch.zeros(8, 8))
    for T in (1, 5, 8):  # windows shorter than max_positions use the top-left T x T block
        x = torch.randn(3, T, 4)
        torch.testing.assert_close(mixing(x), cumulative_mean(x))


def test_matmul_weights_are_causal_rows_of_a_softmax():
    mixing = CausalMixing(6)
    with torch.no_grad():
        mixing.logits.normal_()
    weights = mixing.weights(5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))
    past = torch.ones(5, 5, dtype=torch.bool).tril()
    assert torch.equal(weights[~past], torch.zeros(10)) and (weights[past] > 0).all()
    x = torch.randn(2, 5, 3)
    later = x.clone()
    later[:, 3:] = torch.randn(2, 2, 3)
    torch.testing.assert_close(mixing(x)[:, :3], mixing(later)[:, :3])  # row t reads rows 0..t only


def test_matmul_aggregation_learns_away_from_the_mean_after_a_gradient_step():
    torch.manual_seed(0)
    loss = EmbeddingLoss(4, "MSE", "NONE", "INIT", True, aggregation="MATMUL", max_positions=6)
    embeddings, enc = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    loss(embeddings, enc).backward()
    grad = loss.aggregation.logits.grad
    assert grad[:5, :5].tril(-1).abs().sum() > 0  # positions with a past get a gradient
    assert torch.equal(grad.triu(1), torch.zeros(6, 6)) and torch.equal(grad[5], torch.zeros(6))  # unused stay 0
    torch.optim.SGD(loss.parameters(), lr=1.0).step()
    with torch.no_grad():
        assert not torch.allclose(loss.aggregate(embeddings), cumulative_mean(embeddings))


def test_fixed_norms_have_no_parameters_and_are_plain_layer_norms():
    loss = EmbeddingLoss(4, "MSE", "NONE", "INIT", True, norm_affine=False)
    assert list(loss.parameters()) == []
    assert not loss.embedding_norm.elementwise_affine and not loss.encoder_norm.elementwise_affine
    embeddings, enc = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    expected = F.mse_loss(cumulative_mean(F.layer_norm(embeddings, (4,))), F.layer_norm(enc, (4,)))
    torch.testing.assert_close(loss(embeddings, enc), expected)


def test_fixed_norms_remove_the_minimum_where_the_gains_shrink():
    torch.manual_seed(0)
    embeddings, enc = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    learned = EmbeddingLoss(4, "MSE", "NONE", "INIT", True)
    before = learned(embeddings, enc)
    with torch.no_grad():
        learned.embedding_norm.weight.fill_(0.1)
        learned.encoder_norm.weight.fill_(0.1)
    torch.testing.assert_close(learned(embeddings, enc), before * 0.01)  # gains of 0.1 divide the MSE by 100
    fixed = EmbeddingLoss(4, "MSE", "NONE", "INIT", True, norm_affine=False)
    torch.testing.assert_close(fixed(embeddings * 3, enc * 5), fixed(embeddings, enc), rtol=1e-4, atol=1e-5)


def test_the_model_builds_the_options_it_is_given():
    model = tiny("ar_encdec-tiny", research=dict(embedding_loss="L1", embedding_aggregation="MATMUL"))
    P = model.config.positions.max
    assert model.embedding_loss.kind == "L1"
    assert torch.equal(model.embedding_loss.aggregation.logits, torch.zeros(P, P))  # init leaves it at zero
    fixed = tiny("parallel_encdec-tiny", research=dict(embedding_loss="HUBER", embedding_norm_affine=False))
    assert fixed.encoder_loss.aggregation is None and list(fixed.encoder_loss.parameters()) == []


@pytest.mark.parametrize(
    "values,message",
    [
        (dict(embedding_loss="KL"), "embedding_loss must be one of NONE, MSE, COSINE, LOG_COSINE, L1, HUBER"),
        (dict(embedding_loss="MSE", embedding_aggregation="CONV"), "embedding_aggregation must be one of MEAN, MATMUL"),
        (dict(embedding_loss="MSE", embedding_norm_affine="yes"), "embedding_norm_affine must be true or false"),
        (
            dict(embedding_aggregation="MATMUL"),
            "embedding_aggregation is set but model.research.embedding_loss is NONE",
        ),
        (dict(embedding_norm_affine=True), "embedding_norm_affine is set but model.research.embedding_loss is NONE"),
        (
            dict(
                embedding_loss="MSE", embedding_norm_affine=False, embedding_ln_type="NONE", use_ln_on_encoder_out=False
            ),
            "embedding_norm_affine false needs a LayerNorm in the loss",
        ),
    ],
)
def test_bad_new_options_raise_one_sentence_naming_the_key(values, message):
    with pytest.raises(ConfigError, match=f"^model.research.{message}"):
        ResearchOptions(**values)


def test_the_loss_is_training_only_so_decoding_never_computes_it():
    model = tiny("ar_encdec-tiny", research=dict(embedding_loss="MSE", embedding_aggregation="MATMUL"))
    calls = []
    model.embedding_loss.register_forward_hook(lambda *args: calls.append(1))
    assert_lm_cached_equals_full(model)
    encdec.generate(model, torch.randint(0, V - 2, (2, 4)), max_new_tokens=3, eos_token_id=[])
    assert calls == []
    model.train()(None, torch.randint(0, V - 2, (2, 6)))
    assert calls == [1]


@pytest.mark.parametrize(
    "family,research",
    [
        ("ar_encdec-tiny", dict(embedding_loss="L1")),
        ("ar_encdec-tiny", dict(embedding_loss="HUBER", embedding_aggregation="MATMUL")),
        ("parallel_encdec-tiny", dict(embedding_loss="MSE", embedding_aggregation="MATMUL")),
        ("ar_encdec-tiny", dict(embedding_loss="MSE", embedding_norm_affine=False, detach="NONE")),
    ],
)
def test_training_with_each_option_lowers_the_loss(family, research):
    model = tiny(family, research=research, dropout=0.0).train()
    ids = torch.randint(0, V - 2, (4, 16), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        out = model(None, ids[:, :-1], labels=ids[:, 1:])
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]


def test_a_checkpoint_keeps_the_learned_aggregation():
    model = tiny("ar_encdec-tiny", research=dict(embedding_loss="MSE", embedding_aggregation="MATMUL"))
    with torch.no_grad():
        model.embedding_loss.aggregation.logits.normal_()
    rebuilt = build_model(ModelConfig.from_dict(model.config.to_dict()))
    rebuilt.load_state_dict(model.state_dict())  # strict: the same names and shapes
    torch.testing.assert_close(rebuilt.embedding_loss.aggregation.logits, model.embedding_loss.aggregation.logits)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        ["model.research.embedding_loss=L1"],
        ["model.research.embedding_loss=HUBER"],
        ["model.research.embedding_aggregation=MATMUL"],
        ["model.research.embedding_norm_affine=false"],
        ["model.position=rope", "model.research.sub_pos_embed=YES_LN"],
    ],
    ids=["l1", "huber", "matmul", "fixed-norms", "rope-sub"],
)
def test_the_cli_trains_each_option_and_its_checkpoint_loads(tmp_path, shared_data, options):
    stories = shared_data / "tinystories" / "tinystories_train_head.txt.gz"
    run = tmp_path / "run"
    sets = [f"data.train=[{stories}]", "data.validation=[]", "data.max_documents=200", "evaluation.steps=1"]
    sets += ["training.steps=5", "training.batch_size=4", "schedule.warmup_steps=0", *options]
    args = ["train", str(SEEDS / "000_mse_embedding_loss.yaml"), "--out", str(run)]
    assert main(args + [arg for s in sets for arg in ("--set", s)]) == 0
    train = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    losses = [r["loss"] for r in train]
    assert len(losses) == 5 and all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert all(r["embedding_loss"] >= 0 for r in train)
    model = encdec.from_pretrained(run, checkpoint="latest")
    saved = load_file(run / "checkpoints" / "step_00000005" / "model.safetensors")
    state = model.state_dict()
    assert set(saved) <= set(state) and all(torch.equal(state[k], saved[k]) for k in saved)
    if "model.research.embedding_aggregation=MATMUL" in options:
        assert model.embedding_loss.aggregation.logits.abs().sum() > 0  # trained, saved and loaded
    encdec.generate(model, torch.randint(0, 100, (1, 4)), max_new_tokens=3, eos_token_id=[])


def test_a_huge_learned_aggregation_is_refused_before_it_is_allocated():
    """MATMUL holds max_positions^2 weights: a context of 10^6 asks for 4 TB, refused in one sentence."""
    from encdec.models.presets import preset
    from encdec.models.weights_memory import check_weights_fit, estimated_parameters

    research = dict(embedding_loss="MSE", embedding_aggregation="MATMUL")
    small = preset("ar_encdec-tiny", vocab_size=V, max_positions=128, research=research)
    model = build_model(small)
    assert estimated_parameters(small) >= sum(p.numel() for p in model.parameters())  # still an upper estimate
    huge = preset("ar_encdec-tiny", vocab_size=V, max_positions=10**6, research=research)
    with pytest.raises(ConfigError, match="the model has about 1e\\+12 parameters"):
        check_weights_fit(huge)
