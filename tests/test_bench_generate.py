"""benchmarks/bench_generate.py at a toy shape: its flags, its table and its token checks."""

import pytest
import torch

from tests.bench_kit import load_benchmark


@pytest.fixture
def bench(monkeypatch):
    module = load_benchmark(monkeypatch, "bench_generate")
    monkeypatch.setattr(module, "SOURCE", 12)
    monkeypatch.setattr(module, "NEW", 5)
    return module


def cells(line: str) -> list[str]:
    """A markdown table row's cells, stripped."""
    return [cell.strip("| ") for cell in line.split(" | ")]


def printed_table(bench, capsys, *argv: str) -> tuple[list[str], list[str]]:
    """`bench_generate ARGV`: every line it printed, and its first table's header cells."""
    bench.main(list(argv))
    lines = capsys.readouterr().out.splitlines()
    return lines, cells(lines[1])


def test_batches_are_a_comma_separated_list(bench):
    assert bench.parse_args(["--batch", "8,64"]).batch == [8, 64]


def test_int8_in_bf16_on_the_cpu_is_refused(bench, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--dtype", "bf16", "--quantize", "int8"])
    assert "--quantize int8 on the CPU needs --dtype fp32" in capsys.readouterr().err


def test_bf16_beside_bf16_is_refused(bench, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--dtype", "bf16", "--bf16"])
    assert "--bf16 adds a bf16 encdec beside fp32 systems" in capsys.readouterr().err


def test_same_share_counts_equal_tokens(bench):
    a = torch.tensor([[0, 1, 2, 3]])
    assert bench.same_share(a, a.clone()) == "yes"
    assert bench.same_share(a, torch.tensor([[0, 1, 2, 4]])) == "75%"


def test_a_toy_run_prints_one_row_per_batch_and_mode_with_int8(bench, capsys, one_thread):
    toy = ["--shape", "toy", "--batch", "1,2", "--repeats", "1", "--modes", "greedy", "beam 4"]
    argv = [*toy, "--quantize", "int8", "--bf16", "--no-ctranslate2", "--no-kernels"]
    lines, header = printed_table(bench, capsys, *argv)
    rows = [cells(line) for line in lines[3:]]
    assert len(rows) == 4 and [r[1] for r in rows] == ["greedy", "beam 4", "greedy", "beam 4"]
    assert "encdec int8 tok/s" in header and len(rows[0]) == len(header)
    for r in rows:  # each ratio under its own heading
        rate = {
            name: float(r[header.index(f"{name} tok/s")]) for name in ("hf", "encdec", "encdec int8", "encdec bf16")
        }
        for ratio, (a, b) in {
            "encdec int8 / HF": ("encdec int8", "hf"),
            "encdec bf16 / encdec": ("encdec bf16", "encdec"),
        }.items():
            assert float(r[header.index(ratio)][:-1]) == pytest.approx(rate[a] / rate[b], rel=0.01, abs=0.011)
    same = header.index("encdec same tokens as HF")
    assert all(r[same] == "yes" for r in rows)  # fp32 encdec equals HF token for token
    for name in ("hf", "encdec", "encdec int8"):  # the peak of torch's allocations during a call, in MiB
        column = header.index(f"{name} peak MiB")
        assert all(float(r[column]) >= 0 for r in rows)


def test_the_cpu_peak_is_the_most_held_at_once(bench):
    from generate_systems import cpu_peak_mib

    def work():
        kept = torch.ones(2**20)  # 4 MiB, held to the end
        for _ in range(3):
            torch.ones(2**19).sum()  # 2 MiB each, freed at once: the peak is 6 MiB, not 10
        return kept

    assert 6.0 <= cpu_peak_mib(work) < 6.1


def test_the_kernels_alone_take_less_than_encdec_whole_call(bench, capsys, one_thread):
    bench.main(["--shape", "toy", "--batch", "2", "--repeats", "3", "--modes", "greedy", "beam 4", "--no-ctranslate2"])
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Kernels alone"))
    assert lines[start + 1].startswith("| batch | mode | HF ms | encdec ms | kernels ms |")
    rows = [cells(line) for line in lines[start + 3 :]]
    assert [r[1] for r in rows] == ["greedy", "beam 4"]
    assert all(0 < float(r[4]) < float(r[3]) for r in rows)  # a bound below encdec's whole call


@pytest.mark.cuda
def test_a_toy_cuda_run_in_bf16_reports_peak_memory(bench, capsys):
    bench.main(
        [
            "--device",
            "cuda",
            "--dtype",
            "bf16",
            "--shape",
            "toy",
            "--batch",
            "2",
            "--repeats",
            "1",
            "--modes",
            "greedy",
            "--no-ctranslate2",
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    assert "encdec peak MiB" in lines[1] and len(lines) == 4


@pytest.mark.slow
def test_a_toy_run_with_compile_adds_a_column_and_the_compile_time(bench, capsys, one_thread):
    toy = ["--shape", "toy", "--batch", "2", "--repeats", "1", "--modes", "greedy"]
    lines, header = printed_table(bench, capsys, *toy, "--compile", "--no-ctranslate2", "--no-kernels")
    assert "encdec compiled tok/s" in header and "encdec compiled / HF" in header
    assert cells(lines[3])[header.index("encdec compiled same tokens as HF")] == "yes"
    assert lines[-1].startswith("encdec compiled, first call")


def test_ctranslate2_runs_in_a_process_of_its_own_and_equals_hf_in_greedy(bench, capsys, one_thread):
    pytest.importorskip("ctranslate2")
    lines, header = printed_table(
        bench, capsys, "--shape", "toy", "--batch", "2", "--repeats", "1", "--modes", "greedy", "--bf16"
    )
    row = cells(lines[3])
    assert row[header.index("ct2 same tokens as HF")] == "yes"
    assert float(row[header.index("ct2 int8 tok/s")]) > 0
    rate = {name: float(row[header.index(f"{name} tok/s")]) for name in ("encdec", "encdec bf16", "ct2", "ct2 int8")}
    assert float(row[header.index("encdec bf16 / encdec")][:-1]) == pytest.approx(
        rate["encdec bf16"] / rate["encdec"], abs=0.011
    )
    best = max(rate["encdec"], rate["encdec bf16"]) / max(rate["ct2"], rate["ct2 int8"])
    assert float(row[header.index("encdec's best / CT2's best")][:-1]) == pytest.approx(best, rel=0.01, abs=0.011)
    kernels = cells(lines[-1])  # the kernels table's row, CT2's time last
    ct2_ms = 2 * bench.NEW / float(row[header.index("ct2 tok/s")]) * 1e3
    assert float(kernels[-1]) == pytest.approx(ct2_ms, rel=0.01, abs=0.05)  # printed to 0.1 ms


def test_a_ctranslate2_worker_that_cannot_load_says_why(bench, tmp_path):
    pytest.importorskip("ctranslate2")
    from generate_systems import Ct2Worker

    worker = Ct2Worker(str(tmp_path / "missing"), "cpu", "float32", 1)
    assert worker.error is not None and "missing" in worker.error
    process = worker.process
    del worker  # its process ends with it
    assert process.wait(timeout=30) == 0
