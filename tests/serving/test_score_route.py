"""POST /score against a real `encdec serve`: each target's token log-probabilities average to the model's own loss
and equal `encdec score`'s, scored while other requests decode; MBR served as `generate` runs it; bad requests one
sentence."""

import json
import threading

import pytest
import torch
from server_kit import Served, call, tiny_model_dir

from encdec.cli import main
from encdec.evaluation.encoding import opened_encoding
from encdec.evaluation.likelihood import collate, pair_examples
from encdec.generation.text_generator import TextGenerator
from encdec.runs.open import open_model

pytest.importorskip("fastapi")
pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [("A man rides a bike.", "Ein Mann fährt Rad."), ("Two dogs.", "Zwei Hunde."), ("A cat.", "Eine Katze sitzt.")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("scored") / "t5")


@pytest.fixture(scope="module")
def server(model_dir):
    served = Served(model_dir, "--max-inputs", "4")
    yield served
    code, log = served.stop()
    assert code == 0 and "Traceback" not in log, log[-3000:]


def scores(server, pairs, **parameters) -> tuple[int, object]:
    body = {"inputs": [{"source": s, "target": t} for s, t in pairs], "parameters": parameters}
    return call(server.url + "/score", body)[:2]


def test_served_scores_are_the_model_s_loss_and_encdec_score_s_while_others_decode(server, model_dir, tmp_path):
    decoding = threading.Thread(
        target=call, args=(server.url + "/generate", {"inputs": "A long one.", "parameters": {"max_new_tokens": 60}})
    )
    decoding.start()
    status, answer = scores(server, PAIRS)
    decoding.join(timeout=300)
    assert status == 200 and len(answer) == 3
    opened = open_model(model_dir)
    examples, _ = pair_examples(opened.model, opened_encoding(opened), PAIRS)
    batch = collate(opened.model)(examples)
    with torch.no_grad():
        loss = opened.model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, labels=batch.labels).ce_loss
    logprobs = [p for pair in answer for p in pair["token_logprobs"]]
    assert -sum(logprobs) / len(logprobs) == pytest.approx(loss.item(), rel=1e-5)
    (tmp_path / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS))
    out = tmp_path / "scores.jsonl"
    assert main(["score", str(model_dir), "--data", str(tmp_path / "pairs.tsv"), "--out", str(out)]) == 0
    for line, served in zip(out.read_text().splitlines(), answer):
        written = json.loads(line)
        assert written["tokens"] == served["tokens"] and written["token_ids"] == served["token_ids"]
        assert written["token_logprobs"] == pytest.approx(served["token_logprobs"], abs=1e-5)
        assert written["score"] == pytest.approx(served["score"], abs=1e-5)
    status, summed = scores(server, PAIRS[:1], normalise="gnmt", alpha=1.0)
    length = len(summed[0]["token_ids"])
    assert status == 200 and summed[0]["score"] == pytest.approx(summed[0]["total"] / ((5 + length) / 6))


@pytest.mark.parametrize(
    "body, says",
    [
        ({"inputs": []}, "non-empty list"),
        ({"inputs": [{"source": "a"}]}, "a source and a target"),
        ({"inputs": [{"source": "a", "target": " "}]}, "target is empty"),
        ({"inputs": [{"source": "a", "target": "b"}] * 5}, "at most 4"),
        ({"inputs": [{"source": "a", "target": "b"}], "parameters": {"normalise": "max"}}, "normalise"),
        ({"inputs": [{"source": "a", "target": "b"}], "parameters": {"alpha": 0.5}}, "gnmt"),
        ({"inputs": [{"source": "a", "target": "b"}], "parameters": {"top_k": 5}}, "top_k"),
        ({"inputs": [{"source": "a", "target": "b"}], "stream": True}, "unknown field"),
    ],
)
def test_a_bad_score_request_is_one_sentence(server, body, says):
    status, answer, _ = call(server.url + "/score", body)
    assert 400 <= status < 500 and set(answer) == {"error"} and says in answer["error"], answer


def test_served_mbr_is_generate_s(server, model_dir):
    parameters = {"do_sample": True, "mbr": 4, "seed": 3, "max_new_tokens": 10}
    status, answer, _ = call(server.url + "/generate", {"inputs": "A man rides a bike.", "parameters": parameters})
    opened = open_model(model_dir)
    expected = TextGenerator(opened.text, opened.generation)(opened.model, ["A man rides a bike."], **parameters)
    assert status == 200 and answer["generated_text"] == expected[0]
    detailed = {"inputs": "A man rides a bike.", "parameters": {**parameters, "details": True}}
    status, answer, _ = call(server.url + "/generate", detailed)
    assert status == 200 and answer["generated_text"] == expected[0] and answer["details"]["generated_tokens"] > 0
    status, answer, _ = call(server.url + "/generate", {"inputs": "a", "parameters": {**parameters, "mbr": 100}})
    assert status == 422 and "mbr" in answer["error"]
