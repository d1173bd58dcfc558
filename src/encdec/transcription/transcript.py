"""What a transcription is: a recording's segments, each with its time span, text and tokens, and its words
where word timestamps were asked for. Times are seconds from the recording's start. The fields are those of
openai-whisper's result and OpenAI's verbose_json, so a client of either reads them under the same names."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Word:
    word: str  # as decoded, with its leading space
    start: float
    end: float
    probability: float | None = None  # the mean probability of its tokens, where the decoding kept scores


@dataclass(frozen=True)
class Segment:
    id: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    seek: int = 0  # the frame (10 ms) its window started at
    temperature: float = 0.0  # the temperature of the decoding kept (fallback may raise it)
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None
    words: tuple[Word, ...] = ()


@dataclass(frozen=True)
class Transcript:
    text: str
    segments: tuple[Segment, ...]
    duration: float  # the recording's length
    language: str | None = None
    task: str = "transcribe"
    extra: dict = field(default_factory=dict)  # anything a caller adds to the JSON (the model's name, ...)

    @property
    def words(self) -> tuple[Word, ...]:
        return tuple(word for segment in self.segments for word in segment.words)
