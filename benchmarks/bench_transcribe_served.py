"""Batched transcription, in a process and served: a recording cut at its silences, its pieces decoded as one
batch (encdec.transcription.batched), and the same recording uploaded N times at once to `encdec serve`'s
/v1/audio/transcriptions, whose pieces share the running batch.

Run: python benchmarks/bench_transcribe_served.py MODEL AUDIO [--uploads 1,16] [--threads 1]

    python benchmarks/bench_transcribe_served.py runs/speech runs/speech_data/long/000000.wav

MODEL is a speech run or a Whisper directory, AUDIO a recording (the speech data script's --long ones).
Printed: the pieces the recording is cut into; in process, the wall time of transcribe_batched over `--uploads`
copies, 16 pieces a batch; served, the wall time of that many concurrent uploads (after one to warm up), the
decoder steps and the tokens the server counted (/metrics). Real-time factor: audio seconds per wall second.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def upload(url: str, data: bytes) -> bytes:
    boundary = uuid.uuid4().hex
    body = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'.encode()
    body += data + f"\r\n--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=600) as response:
        return response.read()


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics") as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.split(" ")[0] == name)


def in_process(model: str, audio: str, copies: list[int]) -> None:
    import torch

    from encdec.runs.open import open_model
    from encdec.runs.speech_text import waveform
    from encdec.transcription.batched import pieces_of, transcribe_batched

    opened = open_model(model)
    wave = waveform(audio, 7200.0)
    seconds, pieces = len(wave) / 16_000, pieces_of([wave], opened.text)
    lengths = [(end - start) / 16_000 for start, end in pieces.spans]
    print(f"{audio}: {seconds:.1f} s, {len(lengths)} pieces of {min(lengths):.1f} to {max(lengths):.1f} s")
    transcribe_batched(opened.model, opened.text, [wave], opened.generation)  # warm
    for n in copies:
        started = time.perf_counter()
        with torch.inference_mode():
            transcribe_batched(opened.model, opened.text, [wave] * n, opened.generation)
        wall = time.perf_counter() - started
        print(f"in process, {n} x {seconds:.1f} s: {wall:.2f} s wall, {n * seconds / wall:.0f} audio s / wall s")


def served(model: str, audio: str, uploads: list[int], threads: int) -> None:
    import soundfile

    data, seconds = open(audio, "rb").read(), soundfile.info(audio).duration
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "encdec", "serve", model, "--port", str(port), "--max-queue", "4096"]
    command += ["--max-batch-rows", "256", "--max-audio-seconds", "7200", "--max-audio-bytes", str(1 << 30)]
    log = tempfile.TemporaryFile("w+")
    env = os.environ | {"OMP_NUM_THREADS": str(threads)}
    server = subprocess.Popen(command, stdout=log, stderr=log, env=env)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health")
                break
            except OSError:
                time.sleep(0.1)
        upload(url + "/v1/audio/transcriptions", data)  # warm
        for n in uploads:
            steps, tokens = metric(url, "encdec_decoder_steps_total"), metric(url, "encdec_generated_tokens_total")
            started = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(lambda _: upload(url + "/v1/audio/transcriptions", data), range(n)))
            wall = time.perf_counter() - started
            steps = metric(url, "encdec_decoder_steps_total") - steps
            tokens = metric(url, "encdec_generated_tokens_total") - tokens
            print(
                f"served, {n} concurrent uploads of {seconds:.1f} s: {wall:.2f} s wall, "
                f"{n * seconds / wall:.0f} audio s / wall s, {steps:.0f} decoder steps for {tokens:.0f} tokens"
            )
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("audio")
    parser.add_argument("--uploads", default="1,16", help="copies transcribed together, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="torch's threads, in process and in the server")
    args = parser.parse_args()
    copies = [int(n) for n in args.uploads.split(",")]
    import torch

    torch.set_num_threads(args.threads)
    in_process(args.model, args.audio, copies)
    served(args.model, args.audio, copies, args.threads)


if __name__ == "__main__":
    main()
