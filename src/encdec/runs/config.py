"""The run configuration: one YAML file per run, loaded into typed sections.

    model:      a preset name and/or any ModelConfig field (vocab size and special
                ids default to the tokenizer's); checked as a ModelConfig when loaded
    tokenizer:  which tokenizer (byte, sentencepiece, hf, bpe / unigram trained on
                the corpus, tiktoken)
    data:       corpus files (or a Hugging Face hub name) and the validation split
    objective:  causal_lm, span_corruption, ul2, prefix_lm or seq2seq, lengths, and packing
                (several examples to a row, for the encoder_decoder family only)
    optimizer, schedule, training, evaluation, output

Field names of the seeds' code map as: n_embd -> model.d_model, n_head ->
model.n_heads, n_layer -> model.n_encoder_layers, context_size -> objective.seq_len,
batch_size -> training.batch_size, gradient_accumulation_steps -> training.grad_accum,
est_interval -> evaluation.interval, est_steps -> evaluation.steps, lr_decay_iters ->
schedule.decay_steps, warmup_iters -> schedule.warmup_steps.
"""

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from encdec.data.objectives import OBJECTIVES
from encdec.data.objectives.factory import PACKABLE
from encdec.errors import ConfigError, suggestion
from encdec.models import ModelConfig, check_fields, preset, preset_names
from encdec.runs.config_checks import check_run_config
from encdec.runs.typed_yaml import apply_override, check_value, from_dict, short

SCHEDULES = ("constant", "linear", "cosine", "inverse_sqrt")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
DISTRIBUTED = ("ddp", "fsdp")
PATH_KEYS = (("data", "train"), ("data", "validation"), ("tokenizer", "path"))  # files a config names
MAX_CONFIG_BYTES = 1 << 20  # a run config is a page of YAML; anything near this is a mistake
# Stand-ins for what the tokenizer decides later, so a model section is checked when it loads:
# a vocabulary no tokenizer exceeds and the usual special ids (a section's own values win).
PROVISIONAL_TOKENS = {"vocab_size": 1 << 24, "pad_id": 0, "eos_id": 1, "decoder_start_id": 0}


@dataclass
class TokenizerSection:
    kind: str = "byte"  # byte | sentencepiece | hf | bpe | unigram | tiktoken
    path: str | None = None  # the .model / tokenizer.json file
    vocab_size: int = 8192  # for bpe / unigram trained on the training corpus
    num_sentinels: int = 100
    extra_specials: list[str] = field(default_factory=list)


@dataclass
class DataSection:
    format: str = "tinystories"  # tinystories | text | instruct | jsonl | parallel | tsv
    train: list[str] = field(default_factory=list)  # files; parallel: [source, target]
    validation: list[str] = field(default_factory=list)  # empty: split val_fraction off train
    val_fraction: float = 0.05
    hub_name: str | None = None  # used when the train files are absent, e.g. roneneldan/TinyStories
    source_field: str = "dialogue"
    target_field: str = "summary"
    text_field: str = "text"
    max_documents: int | None = None  # read at most this many (in memory; the hub streams them)
    shards: str | None = None  # a directory for token shards, prepared once and memory-mapped; None: in memory


@dataclass
class ObjectiveSection:
    kind: str = "ul2"  # causal_lm | span_corruption | ul2 | prefix_lm | seq2seq
    seq_len: int = 256  # causal LM window / document chunk length
    windows: str = "random"  # causal LM: random (yif-AI) or sequential
    max_source_len: int = 512
    max_target_len: int = 128
    noise_density: float = 0.15
    mean_span: float = 3.0
    ul2_probabilities: list[float] = field(default_factory=lambda: [0.25, 0.25, 0.5])  # R, X, S
    mode_tokens: bool = False
    source_template: str = "{source}"  # seq2seq; ROT5 summarization: "{source}\nSummary:"
    target_template: str = "{target}"
    pack: bool = False  # several examples per row, attending within their own (seq2seq, span_corruption, ul2)


@dataclass
class OptimizerSection:
    kind: str = "adamw"  # adamw | adafactor (T5's) | adamw_scale (nanoT5's: steps scaled by each parameter's RMS)
    lr: float = 5e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.01  # on parameters of 2 or more dimensions only
    eps: float = 1e-8


@dataclass
class ScheduleSection:
    kind: str = "linear"  # constant | linear (ROT5) | cosine (nanoGPT) | inverse_sqrt (Vaswani)
    warmup_steps: int | None = None  # None: warmup_fraction of training.steps
    warmup_fraction: float = 0.01
    min_lr: float = 0.0  # cosine floor
    decay_steps: int | None = None  # cosine: lr_decay_iters; None: training.steps


@dataclass
class TrainingSection:
    steps: int = 1000
    batch_size: int = 16  # global: split over processes under torchrun
    grad_accum: int = 1
    clip_norm: float = 1.0  # 0 turns clipping off
    label_smoothing: float = 0.0  # the target mixed with a uniform one (Szegedy et al. 2016; 0.1 in Vaswani et al.)
    seed: int = 1337
    precision: str = "auto"  # auto (bf16 on a GPU that has it, else fp32) | fp32 | bf16 | fp16 (GPUs, loss scaling)
    compile: bool = False
    activation_checkpointing: bool = (
        False  # recompute each block's activations in backward: less memory, ~1/3 more compute
    )
    device: str = "auto"  # auto (cuda when present) | cpu | cuda
    deterministic: bool = False  # bitwise-repeatable GPU runs (torch's deterministic algorithms; slower)
    data_workers: int | None = None  # processes building batches; None: 2 beside a GPU, 0 on a CPU
    distributed: str = "ddp"  # under torchrun: ddp or fsdp
    threads: int | None = None  # torch CPU threads
    peak_tflops: float | None = (
        None  # the device's peak for the logged MFU; None: NVIDIA's data sheet (H100, H200, A100)
    )
    early_stopping_patience: int = 0  # stop after this many evaluations without a better best_by (0: never)
    init_from: str | None = None  # fine-tune: start from this run directory's best weights and its tokenizer


@dataclass
class EvaluationSection:
    interval: int = 100  # every N steps (est_interval)
    steps: int = 10  # over M batches of train and validation (est_steps)
    generate: int = 0  # validation examples generated and scored at each evaluation (0: none)
    metric: str = "rougeL"  # what those generations are scored by: rouge1 | rouge2 | rougeL | bleu | chrf
    max_new_tokens: int = 64  # per generated example
    num_beams: int = 1


@dataclass
class OutputSection:
    log_interval: int = 10
    save_interval: int = 0  # 0: save at every evaluation
    keep_last: int = 2
    plot: bool = True
    best_by: str = "val_loss"  # the best checkpoint: lowest val_loss, or highest evaluation.metric ("metric")
    tensorboard: bool | None = None  # a TensorBoard log in RUN_DIR/tensorboard; None: when tensorboard is installed


@dataclass
class RunConfig:
    model: dict = field(default_factory=dict)
    tokenizer: TokenizerSection = field(default_factory=TokenizerSection)
    data: DataSection = field(default_factory=DataSection)
    objective: ObjectiveSection = field(default_factory=ObjectiveSection)
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    output: OutputSection = field(default_factory=OutputSection)

    def __post_init__(self):
        check_model_section(self.model, overlay=bool(self.training.init_from))
        choices = {
            "objective.kind": (self.objective.kind, OBJECTIVES),
            "schedule.kind": (self.schedule.kind, SCHEDULES),
            "training.precision": (self.training.precision, PRECISIONS),
            "training.device": (self.training.device, DEVICES),
            "training.distributed": (self.training.distributed, DISTRIBUTED),
        }
        for key, (value, allowed) in choices.items():
            if value not in allowed:
                raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {short(value)}")
        check_run_config(self)
        check_packing(self)

    @property
    def warmup_steps(self) -> int:
        s = self.schedule
        return s.warmup_steps if s.warmup_steps is not None else int(s.warmup_fraction * self.training.steps)


def check_model_section(section: dict, overlay: bool = False) -> None:
    """Refuse a model section that cannot build a ModelConfig: an unknown key or preset, a value of
    the wrong type or out of range, or settings that contradict each other (n_kv_heads not dividing
    n_heads, ...). The vocabulary and special ids are the tokenizer's, unknown until the data is
    read, so stand-ins take their place. An `overlay` (a fine-tuning run's keys on top of the
    pretrained model's section) is only type-checked here; the merged section is checked when built.
    """
    hints = typing.get_type_hints(ModelConfig)
    for key, value in section.items():
        if key == "preset":
            check_value(str, value, "model.preset")
        elif key not in hints:
            raise ConfigError(f"unknown key model.{short(key)[1:-1]}{suggestion(key, ['preset', *hints])}")
        else:
            check_value(hints[key], value, f"model.{key}")
    if not overlay:
        check_fields(build_model_config(section, **PROVISIONAL_TOKENS))  # a field its family ignores is refused


def check_packing(cfg: RunConfig) -> None:
    """objective.pack needs an encoder-decoder objective and a family that keeps packed examples apart:
    the encoder_decoder family's segment-aware masks and positions (models.encoder_decoder)."""
    if not cfg.objective.pack:
        return
    if cfg.objective.kind not in PACKABLE:
        raise ConfigError(f"objective.pack works with objective.kind {', '.join(PACKABLE)}, not {cfg.objective.kind}")
    family = model_family(cfg.model)
    if family != "encoder_decoder":
        raise ConfigError(
            f"objective.pack needs model.family encoder_decoder, whose attention keeps packed "
            f"examples apart; the {family} family does not"
        )


def model_family(section: dict) -> str:
    """The family a model section builds: its own key, else its preset's, else the default."""
    if "family" in section:
        return section["family"]
    name = section.get("preset")
    if name in preset_names():
        return preset(name, **PROVISIONAL_TOKENS).family
    return ModelConfig.family


def build_model_config(section: dict, vocab_size: int, pad_id: int, eos_id: int, decoder_start_id: int) -> ModelConfig:
    """The ModelConfig the model section describes; token ids default to the tokenizer's."""
    values = {"vocab_size": vocab_size, "pad_id": pad_id, "eos_id": eos_id, "decoder_start_id": decoder_start_id}
    values.update({k: v for k, v in section.items() if k != "preset"})
    name = section.get("preset")
    if name is not None and name not in preset_names():
        raise ConfigError(f"model.preset {short(name)} is unknown{suggestion(name, preset_names(), 'presets')}")
    try:
        return preset(name, **values) if name is not None else ModelConfig.from_dict(values)
    except ConfigError as error:
        message = str(error)
        raise ConfigError(message if "model." in message else f"model: {message}") from None


def load_config(path: str | Path, overrides: list[str] = (), paths_from_file: bool = True) -> RunConfig:
    """Read a run config from YAML, apply `--set` overrides, and check it.

    Relative data and tokenizer paths written in the file are relative to the file's folder (so a
    config works from any directory) and become absolute; paths given with --set are relative to
    the current directory, as the shell's are. A config a run saved holds absolute paths already
    (older runs saved theirs relative to where they ran: `paths_from_file=False` keeps those)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    values = read_yaml(path)
    if paths_from_file:
        resolve_paths(values, path.parent)
    for assignment in overrides:
        apply_override(values, assignment)
    return from_dict(RunConfig, values)


def resolve_paths(values: dict, base: Path) -> None:
    """Make the relative paths of PATH_KEYS in `values` (a config file's mapping) absolute from `base`.

    A path missing there but present relative to the current directory (how configs were written
    before) is one sentence naming both places."""
    for section, key in PATH_KEYS:
        node = values.get(section)
        if not isinstance(node, dict) or not node.get(key):
            continue
        given = node[key] if isinstance(node[key], list) else [node[key]]
        resolved = []
        for item in given:
            if not isinstance(item, str) or Path(item).is_absolute():
                resolved.append(item)
                continue
            full = os.path.normpath(os.path.abspath(base / item))
            if not os.path.exists(full) and os.path.exists(item):
                suggestion = os.path.relpath(os.path.abspath(item), os.path.abspath(base))
                raise ConfigError(
                    f"{section}.{key}: {item} is not at {full} (paths in a config are relative to its "
                    f"folder) but is at {os.path.abspath(item)}; write {suggestion}"
                )
            resolved.append(full)
        node[key] = resolved if isinstance(node[key], list) else resolved[0]


def read_yaml(path: Path) -> dict:
    """The mapping a YAML config file holds: bounded in size, UTF-8, without aliases (whose expansion
    is unbounded: a few lines of nested aliases make billions of nodes)."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {path} is {path.stat().st_size:,} bytes; run configs are at most {MAX_CONFIG_BYTES:,}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {error.start})") from None
    try:
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise ConfigError(f"config file {path} uses YAML aliases (*name), which run configs do not accept")
        values = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(values).__name__}")
    return values


def save_config(config: RunConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))
