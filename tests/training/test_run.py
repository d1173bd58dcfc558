import subprocess
import sys

import torch

from encdec.training.run import is_run_dir, load_run


def test_a_finished_run_loads_back_with_the_weights_it_was_evaluated_with(tmp_path, tiny_config):
    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "encdec", "train", str(tiny_config), "--out", str(run),
                    "--set", "training.steps=6"], check=True, capture_output=True)  # fmt: skip
    assert is_run_dir(run) and not is_run_dir(tmp_path)
    loaded = load_run(run, "latest")
    assert loaded.checkpoint.name == "step_00000006"
    ids = loaded.tokenizer.encode(["Once upon a time"], add_eos=True)
    src = torch.tensor(ids)
    out = loaded.model(src, src, labels=src)
    assert torch.isfinite(out.loss)
    assert loaded.model.config.vocab_size == loaded.tokenizer.vocab_size
