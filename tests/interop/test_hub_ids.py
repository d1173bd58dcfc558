"""Hub ids (org/name[@revision]) wherever a model is named, read offline from a Hugging Face cache the
tests lay out as huggingface_hub lays it out: models--org--name/refs/<branch> and snapshots/<commit>/."""

import pytest
import torch

import encdec
from encdec.errors import CheckpointError
from encdec.interop import export_hf
from encdec.interop.hub_ids import hub_id
from encdec.tokenizers import build_tokenizer

pytest.importorskip("huggingface_hub")

MAIN, PINNED = "a" * 40, "b" * 40  # two commits of org/tiny: main and an older one


def tiny_export(path, seed: int) -> torch.nn.Module:
    tokenizer = build_tokenizer("byte", num_sentinels=0)
    torch.manual_seed(seed)
    ids = dict(pad_id=tokenizer.pad_id, eos_id=tokenizer.eos_id, decoder_start_id=tokenizer.decoder_start_id)
    model = encdec.build_model(encdec.preset("t5-tiny", vocab_size=tokenizer.vocab_size, **ids)).eval()
    export_hf(model, tokenizer, path)
    return model


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hub cache holding org/tiny at two commits (branch main -> MAIN, tag v1 -> PINNED)."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    models = {}
    for commit, seed in ((MAIN, 0), (PINNED, 1)):
        models[commit] = tiny_export(repo / "snapshots" / commit, seed)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    (repo / "refs" / "v1").write_text(PINNED)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    return repo, models


def logits(model, src=torch.tensor([[5, 6, 7, 8, 1]]), tgt=torch.tensor([[0, 5, 6]])):
    with torch.no_grad():
        return model(src, tgt).logits


@pytest.mark.parametrize(
    "name, expected",
    [
        ("org/tiny", ("org/tiny", None)),
        ("org/tiny@v1", ("org/tiny", "v1")),
        ("google/flan-t5-small@refs/pr/3", ("google/flan-t5-small", "refs/pr/3")),
        ("runs", None),
        ("/abs/path", None),
        ("a/b/c", None),
        ("./x/y", None),
    ],
)
def test_a_hub_id_is_org_slash_name_with_an_optional_revision(name, expected):
    assert hub_id(name) == expected


def test_a_hub_id_loads_from_the_cache_offline_and_equals_its_snapshot(hub_cache):
    repo, models = hub_cache
    model = encdec.from_pretrained("org/tiny")
    assert torch.allclose(logits(model), logits(models[MAIN]), atol=1e-5)
    tokenizer = encdec.load_tokenizer("org/tiny")
    assert tokenizer.encode("hi there") == build_tokenizer("byte", num_sentinels=0).encode("hi there")


@pytest.mark.parametrize("revision", [PINNED, "v1"])
def test_a_revision_pins_its_snapshot(hub_cache, revision):
    _, models = hub_cache
    pinned = logits(encdec.from_pretrained(f"org/tiny@{revision}"))
    assert torch.allclose(pinned, logits(models[PINNED]), atol=1e-5)
    assert not torch.allclose(pinned, logits(models[MAIN]), atol=1e-3)


def test_a_local_directory_of_the_same_name_wins(hub_cache, tmp_path):
    _, models = hub_cache
    local = tiny_export(tmp_path / "org" / "tiny", seed=2)
    assert torch.allclose(logits(encdec.from_pretrained("org/tiny")), logits(local), atol=1e-5)


@pytest.mark.parametrize(
    "name, message",
    [
        ("org/absent", "org/absent is not a local directory, and org/absent is not in the Hugging Face cache"),
        ("org/tiny@v9", "org/tiny@v9 names no commit, branch or tag in the Hugging Face cache"),
    ],
)
def test_a_model_absent_from_the_cache_is_one_sentence(hub_cache, name, message):
    with pytest.raises(CheckpointError, match=message) as error:
        encdec.from_pretrained(name)
    assert "\n" not in str(error.value)


UNCACHED = "d" * 40


@pytest.mark.parametrize(
    "revision, expected",
    [
        (None, MAIN),  # no revision: the default branch's snapshot, as before
        (MAIN, MAIN),  # a commit whose snapshot is cached
        (PINNED, PINNED),
        ("main", MAIN),  # a branch or tag whose ref the cache keeps
        ("v1", PINNED),
        ("release/1", PINNED),  # a ref name with a slash, in refs/release/1
        ("v9", None),  # no such ref
        (UNCACHED, None),  # a commit the cache has no snapshot of
        (PINNED[:7], None),  # a short hash: offline, nothing can expand it
        ("gone", None),  # a ref naming a commit whose snapshot is not cached
        ("garbage", None),  # a ref file holding no commit
        ("linked", None),  # a ref that is a symlink
        ("../refs/v1", None),  # climbing out of refs/ and back
        ("./v1", None),
        ("v1/", None),
        ("release", None),  # a folder of refs, not a ref
        ("refs/v1", None),
        ("../snapshots/" + PINNED, None),
    ],
)
def test_an_offline_revision_is_resolved_exactly_from_the_cache_or_refused(hub_cache, revision, expected):
    """HF_HUB_OFFLINE: a revision is a commit with a snapshot or a ref (refs/NAME) naming one, read as that
    snapshot, never as the one that happens to be cached; anything else is one sentence naming it."""
    from encdec.interop.hub_ids import resolve_model

    repo, _ = hub_cache
    (repo / "refs" / "release").mkdir()
    (repo / "refs" / "release" / "1").write_text(PINNED)
    (repo / "refs" / "gone").write_text(UNCACHED)
    (repo / "refs" / "garbage").write_text("not a commit\n")
    (repo / "refs" / "linked").symlink_to(repo / "refs" / "v1")
    name = "org/tiny" + (f"@{revision}" if revision else "")
    if expected is None:
        with pytest.raises(CheckpointError, match="names no commit, branch or tag in the Hugging Face cache") as error:
            resolve_model(name)
        assert "\n" not in str(error.value) and name in str(error.value)
    else:
        assert resolve_model(name) == repo / "snapshots" / expected


def test_a_pickle_only_snapshot_loads_its_tensors_and_refuses_anything_else(hub_cache):
    from safetensors.torch import load_file

    repo, models = hub_cache
    snapshot = repo / "snapshots" / MAIN
    torch.save(load_file(snapshot / "model.safetensors"), snapshot / "pytorch_model.bin")  # HF's names, pickled
    (snapshot / "model.safetensors").unlink()
    assert torch.allclose(logits(encdec.from_pretrained("org/tiny")), logits(models[MAIN]), atol=1e-5)

    class Payload:  # anything but tensors needs unpickling code: weights_only refuses it
        def __reduce__(self):
            return (print, ("unpickled",))

    torch.save({"shared.weight": Payload()}, snapshot / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pytorch_model.bin carries pickled objects other than tensors"):
        encdec.from_pretrained("org/tiny")


def test_fine_tuning_starts_from_a_hub_id(hub_cache):
    from encdec.training.init_from import load_pretrained

    repo, models = hub_cache
    pretrained = load_pretrained("org/tiny@v1")
    assert pretrained.kind == "hf" and pretrained.source == repo / "snapshots" / PINNED
    assert torch.equal(
        pretrained.weights["encoder.blocks.0.self_attn.q.weight"],
        models[PINNED].state_dict()["encoder.blocks.0.self_attn.q.weight"],
    )


def test_generate_takes_a_hub_id_and_writes_what_its_snapshot_gives(hub_cache, capsys, tmp_path):
    from encdec.cli import main

    repo, _ = hub_cache
    (tmp_path / "in.txt").write_text("hello there\nonce upon a time\n")
    args = ["-i", "in.txt", "--max-new-tokens", "5"]
    assert main(["generate", str(repo / "snapshots" / MAIN), *args]) == 0
    expected = capsys.readouterr().out
    assert main(["generate", "org/tiny", *args]) == 0
    assert capsys.readouterr().out == expected and expected.count("\n") == 2


def test_export_takes_a_hub_id_and_writes_its_pinned_snapshot_anew(hub_cache, tmp_path):
    from encdec.cli import main

    _, models = hub_cache
    assert main(["export", "org/tiny@v1", "--out", str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "model.safetensors").is_file()
    assert torch.allclose(logits(encdec.from_pretrained(str(tmp_path / "exported"))), logits(models[PINNED]), atol=1e-6)
