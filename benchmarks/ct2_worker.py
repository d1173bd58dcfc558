"""CTranslate2 in a process of its own, for benchmarks/bench_generate.py: `generate_systems.Ct2Worker` starts it.

Run: python benchmarks/ct2_worker.py MODEL_DIR DEVICE COMPUTE_TYPE THREADS

It loads the converted model once, writes one pickled message to stdout (None when ready,
or why it cannot run), then answers each pickled request read from stdin (a batch of token
lists and keyword arguments of translate_batch) with the pickled best hypothesis of each
example, until stdin closes. Anything else printed goes to stderr.

Why a process of its own: in one process with torch, the two libraries' OpenMP thread
pools slow each other down. On this 2-core CPU, at two threads, one CTranslate2 call
made encdec's later greedy decoding steps take 10.3 ms instead of 5.2, for as long as the
process lived; CTranslate2's own steps took 6.4-6.9 ms there against 2.9 in a process of
its own; with one thread neither changed (docs/benchmarks.md). Its users do not load torch
beside it either. This file imports only ctranslate2.
"""

import os
import pickle
import sys


def main(argv: list[str]) -> None:
    model_dir, device, compute_type, threads = argv
    stdin, stdout = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")  # the answers' own copy of stdout
    os.dup2(2, 1)  # anything else written to stdout, by Python or native code, goes to stderr
    try:
        import ctranslate2

        if compute_type not in ctranslate2.get_supported_compute_types(device):
            raise ValueError(f"compute type {compute_type} is not supported on {device} by this build")
        translator = ctranslate2.Translator(
            model_dir, device=device, compute_type=compute_type, inter_threads=1, intra_threads=int(threads)
        )
    except Exception as error:  # noqa: BLE001 - reported to the parent, which leaves the column out
        pickle.dump(f"{type(error).__name__}: {error}", stdout)
        stdout.flush()
        return
    pickle.dump(None, stdout)
    stdout.flush()
    while True:
        try:
            batch, kwargs = pickle.load(stdin)
        except EOFError:
            return
        results = translator.translate_batch(batch, **kwargs)
        pickle.dump([result.hypotheses[0] for result in results], stdout)
        stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
