"""Transcription as people use it: long recordings by windows, segment and word timestamps, subtitles.

transcript.py holds what a transcription is (segments, words) and response_formats.py writes it as text, JSON, SRT or
WebVTT, the response formats of OpenAI's /v1/audio/transcriptions; longform.py decodes a recording of any length
window after window (`transcribe`, `Transcriber`); the batched mode and the word timestamps build on them. It sits above runs (it opens a model) and below serving and cli.
"""

from encdec.transcription.longform import Transcriber, transcribe
from encdec.transcription.response_formats import FORMATS, render
from encdec.transcription.transcript import Segment, Transcript, Word

__all__ = ["FORMATS", "Segment", "Transcriber", "Transcript", "Word", "render", "transcribe"]
