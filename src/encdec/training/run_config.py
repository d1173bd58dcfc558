"""The run configuration: one YAML file per run, loaded into typed sections: how a run trains.

    model:      a preset name and/or any ModelConfig field (vocab size and special
                ids default to the tokenizer's); built as a ModelConfig when loaded (runs/model_section.py)
    tokenizer:  which tokenizer (byte, sentencepiece, hf, bpe / unigram trained on
                the corpus, tiktoken)
    data:       corpus files (or a Hugging Face hub name) and the validation split
    objective:  causal_lm, span_corruption, ul2, prefix_lm or seq2seq, lengths, and packing
                (several examples to a row, for the encoder_decoder family only)
                (tokenizer, data and objective are declared in data_sections.py)
    optimizer, schedule, training, evaluation, output
    lora:       LoRA adapters on a pretrained model (training.init_from); absent: full fine-tuning

Field names of the seeds' code map as: n_embd -> model.d_model, n_head ->
model.n_heads, n_layer -> model.n_encoder_layers, context_size -> objective.seq_len,
batch_size -> training.batch_size, gradient_accumulation_steps -> training.grad_accum,
est_interval -> evaluation.interval, est_steps -> evaluation.steps, lr_decay_iters ->
schedule.decay_steps, warmup_iters -> schedule.warmup_steps.

Training reads it; inference never does. What a checkpoint needs to be used is written beside its weights
(`RunConfig.description`: the model config, the text format, a LoRA run's adapter config) and read back by
encdec.runs, which declares those parts: the model section's building (runs/model_section.py), the objective's
text keys (runs/text.py's TextObjective, which ObjectiveSection extends) and the lora section (runs/adapter.py).
"""

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import yaml
from torch import nn

from encdec.data.objectives.factory import PACKABLE
from encdec.errors import CheckpointError, ConfigError
from encdec.generation.config import Beams
from encdec.models.config_specs import MOVED
from encdec.runs.adapter import TRAIN_ONLY, AdapterConfig, LoraSection
from encdec.runs.description import Description
from encdec.runs.model_section import ModelSection
from encdec.runs.run_dir import CheckpointDir
from encdec.runs.state import MAX_STEPS
from encdec.runs.text import MAX_LENGTH, Direction, RunTokenizer, TextFormat
from encdec.safe_paths import write_atomic
from encdec.schema import (
    Count,
    Duration,
    Length,
    Positive,
    Range,
    Satisfies,
    check,
    load_yaml,
    read,
    read_yaml_file,
    short,
)
from encdec.training.data_sections import DataSection, Length_, ObjectiveSection, TokenizerSection

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
DISTRIBUTED = ("ddp", "fsdp")
METRICS = ("rouge1", "rouge2", "rougeL", "bleu", "chrf", "exact_match", "wer", "cer")
NAMES_OR_PATHS = (  # or a Hub id
    ("training", "init_from"),
    ("training", "init_decoder_from"),
    ("training.distill", "teacher"),
    ("data", "dataset"),
)
PATH_KEYS = (("data", "train"), ("data", "validation"), ("tokenizer", "path"), *NAMES_OR_PATHS)  # (section, key)
DECODER_ONLY_OBJECTIVES = ("causal_lm", "prefix_lm")
# The largest values a run config accepts: far beyond any real run, small enough that nothing
# sized by them is allocated before its own memory estimate refuses it (with runs' MAX_STEPS and MAX_LENGTH,
# which a checkpoint's state.json and text.json declare too).
MAX_BATCH = 1 << 20  # rows a step
MAX_GRAD_ACCUM = 1 << 16
MAX_PROCESSES = 4096  # threads and data workers (above the machine's cores they are capped with a warning)
MAX_LR = 100.0

Fraction = Annotated[float, Range(0, 1)]
Probability = Annotated[float, Range(0, 1, below=True)]


@dataclass
class OptimizerSection:
    kind: Literal["adamw", "adafactor", "adamw_scale"] = "adamw"  # adafactor: T5's; adamw_scale: nanoT5's
    lr: Annotated[float, Range(0, MAX_LR, above=True)] = 5e-4
    betas: Annotated[list[float], Length(2, "numbers in [0, 1)", each=Range(0, 1, below=True))] = field(
        default_factory=lambda: [0.9, 0.999]
    )
    weight_decay: Annotated[float, Range(0, MAX_LR)] = 0.01  # on parameters of 2 or more dimensions only
    eps: Annotated[float, Range(0, MAX_LR, above=True)] = 1e-8


@dataclass
class ScheduleSection:
    kind: Literal["constant", "linear", "cosine", "inverse_sqrt"] = "linear"  # linear: ROT5; cosine: nanoGPT
    warmup_steps: Count | None = None  # None: warmup_fraction of training.steps
    warmup_fraction: Fraction = 0.01
    min_lr: Annotated[float, Range(0, MAX_LR)] = 0.0  # cosine floor; at most optimizer.lr
    decay_steps: Positive | None = None  # cosine: lr_decay_iters; None: training.steps


@dataclass
class DistillSection:
    """Logit distillation from a frozen teacher (Hinton et al. 2015, section 2): the step's objective becomes
    (1 - alpha) * CE + alpha * temperature^2 * KL(teacher_T || student_T), over the target tokens CE counts;
    the teacher needs the student's tokenizer and vocabulary (encdec.training.distill)."""

    # a run directory (its best, else latest, checkpoint), a Hugging Face model directory or a Hub id
    teacher: Annotated[str, Satisfies(lambda v: isinstance(v, str) and v.strip() != "", "a run or model directory")]
    alpha: Fraction = 0.5  # the distillation term's share of the objective: 0 plain CE (KL still logged), 1 KL alone
    temperature: Annotated[float, Range(0, 1000, above=True)] = 2.0  # softens both distributions; T^2 keeps gradients
    # the student's encoder (its token table among it) is the teacher's, copied and frozen: its decoder learns to
    # read the teacher's encoder output, as a speculative draft over the teacher does (generation/speculative.py)
    share_encoder: bool = False


# a time budget or interval: seconds, or a duration's text (90s, 15m, 1h30m, 1:30:00), in the config as on the command line
Seconds = Annotated[float, Duration(), Range(1, 1e8, says="from 1 to 100,000,000 seconds")]


@dataclass
class TrainingSection:
    steps: Annotated[int, Range(1, MAX_STEPS)] = 1000
    batch_size: Annotated[int, Range(1, MAX_BATCH)] = 16  # global: split over processes under torchrun
    batch_tokens: Annotated[int, Range(1, MAX_BATCH * MAX_LENGTH)] | None = None  # seq2seq: a token budget a batch
    # (rows x longest source + target, length-bucketed; at most batch_size rows): fairseq's --max-tokens
    # pad each batch's lengths up to a multiple of this and its rows up to batch_size (a packed or an epoch's last
    # short batch), so that a compiled step (compile) meets a few shapes, not one per batch; None: batches as built
    bucket_length: Annotated[int, Range(1, MAX_LENGTH)] | None = None
    grad_accum: Annotated[int, Range(1, MAX_GRAD_ACCUM)] = 1
    clip_norm: Annotated[float, Range(0, 1e6)] = 1.0  # 0 turns clipping off
    label_smoothing: Probability = 0.0  # the target mixed with a uniform one (Szegedy et al. 2016; 0.1 in Vaswani)
    seed: Annotated[int, Range(0, 2**32 - 1)] = 1337
    precision: Literal[PRECISIONS] = (
        "auto"  # auto (bf16 on a GPU that has it or a CPU with AMX or AVX-512 BF16, else fp32) | fp32 | bf16 | fp16
    )
    compile: bool = False
    activation_checkpointing: bool = False  # recompute each block's activations in backward: less memory, more compute
    device: Literal[DEVICES] = "auto"  # auto (cuda when present) | cpu | cuda
    deterministic: bool = False  # bitwise-repeatable GPU runs (torch's deterministic algorithms; slower)
    data_workers: Annotated[int, Range(0, MAX_PROCESSES)] | None = None  # None: 2 beside a GPU, 0 on a CPU
    distributed: Literal[DISTRIBUTED] = "ddp"  # under torchrun: ddp or fsdp
    # torch CPU threads (above the cores: capped); None: the cores other processes leave free when the run starts,
    # kept by its resumes (runs.state.TrainState.threads)
    threads: Annotated[int, Range(1, MAX_PROCESSES)] | None = None
    peak_tflops: Annotated[float, Range(0, 1e9, above=True)] | None = None  # for the logged MFU; None: data sheet
    early_stopping_patience: Count = 0  # stop after this many evaluations without a better best_by (0: never)
    init_from: str | None = None  # fine-tune: start from this run directory's best weights and its tokenizer
    # a decoder-only init_from adapted into an encoder-decoder (training/adaptation.py), unbalanced: the decoder
    # from this other decoder-only model, and the steps in which only the weights neither had train
    init_decoder_from: str | None = None
    cross_attention_warmup: Annotated[int, Range(0, MAX_STEPS)] = 0
    distill: DistillSection | None = None  # learn from a frozen teacher's logits as well as the labels; None: off
    # globs of parameter names that train, the rest frozen (at most 256, of 256 characters each)
    train_only: TRAIN_ONLY = field(default_factory=list)
    ema_decay: Annotated[float, Range(0, 1, below=True)] | None = None  # a moving average of the weights; None/0: off
    ema_eval: bool = False  # evaluate (and choose `best` by) the moving average instead of the live weights
    # seconds of training (summed over resumes) after which the run evaluates, saves and stops; None: steps alone
    max_time: Seconds | None = None


@dataclass
class EvaluationSection:
    interval: Positive = 100  # every N steps (est_interval)
    interval_time: Seconds | None = None  # and every so many seconds of training; None: steps alone
    steps: Annotated[int, Range(1, MAX_STEPS)] = 10  # over M batches of train and validation (est_steps)
    generate: Annotated[int, Range(0, MAX_BATCH)] = 0  # validation examples generated and scored each time (0: none)
    metric: Literal[METRICS] = "rougeL"  # what those generations are scored by
    max_new_tokens: Length_ = 64  # per generated example
    num_beams: Beams = 1  # as GenerationConfig bounds it


@dataclass
class OutputSection:
    log_interval: Positive = 10
    save_interval: Count = 0  # 0: save at every evaluation
    save_interval_time: Seconds | None = None  # and every so many seconds of training; None: steps alone
    keep_last: Positive = 2
    plot: bool = True
    best_by: Literal["val_loss", "metric"] = (
        "val_loss"  # lowest val_loss, or the best evaluation.metric (wer, cer: lowest)
    )
    tensorboard: bool | None = None  # a TensorBoard log in RUN_DIR/tensorboard; None: when tensorboard is installed


@dataclass
class RunConfig:
    model: dict | ModelSection = field(default_factory=dict)  # read as a mapping, held as the ModelSection it builds
    tokenizer: TokenizerSection = field(default_factory=TokenizerSection)
    data: DataSection = field(default_factory=DataSection)
    objective: ObjectiveSection = field(default_factory=ObjectiveSection)
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    output: OutputSection = field(default_factory=OutputSection)
    lora: LoraSection | None = None  # None: every parameter (or training.train_only's) trains

    def __post_init__(self):
        """The fields' own rules (again, for a config built in Python), then the rules across fields."""
        check(self)
        if not isinstance(self.model, ModelSection):  # built once; a fine-tuning run's keys wait for the pretrained's
            self.model = ModelSection(self.model, overlay=bool(self.training.init_from))
        if self.schedule.min_lr > self.optimizer.lr:
            raise ConfigError(
                f"schedule.min_lr ({self.schedule.min_lr}) must not exceed optimizer.lr ({self.optimizer.lr})"
            )
        if self.output.best_by == "metric" and not self.evaluation.generate:
            raise ConfigError("output.best_by is metric but evaluation.generate is 0: set how many examples to score")
        if sum(self.objective.ul2_probabilities) <= 0:
            raise ConfigError("objective.ul2_probabilities must have a positive sum (R, X, S), got all zeros")
        check_packing(self)
        if self.training.bucket_length and self.training.batch_tokens:
            raise ConfigError(
                "training.bucket_length pads every batch to training.batch_size rows; training.batch_tokens sizes "
                "batches by their tokens instead: choose one"
            )
        if self.training.ema_decay and self.lora is not None:
            raise ConfigError("training.ema_decay averages full weights; a LoRA run keeps adapters alone: drop one")
        if self.training.ema_eval and not self.training.ema_decay:
            raise ConfigError("training.ema_eval evaluates the moving average: set training.ema_decay above 0")
        if self.lora is not None and not self.training.init_from:
            raise ConfigError("lora adapts a pretrained model: set training.init_from to the run or model to adapt")
        if self.training.init_decoder_from and not self.training.init_from:
            raise ConfigError(
                "training.init_decoder_from is the decoder's source of an adaptation: set training.init_from to "
                "the encoder's decoder-only model"
            )
        if self.training.cross_attention_warmup and not self.training.init_decoder_from:
            raise ConfigError(
                "training.cross_attention_warmup trains the cross-attention an unbalanced adaptation initialises "
                "afresh: set training.init_decoder_from, or drop the warm-up"
            )
        if self.training.init_decoder_from and self.lora is not None:
            raise ConfigError(
                "lora adapts a model's own weights; an adaptation (training.init_decoder_from) makes new ones"
            )
        for data, objective in self.sections():
            if (data.src_lang or data.tgt_lang) and objective.kind != "seq2seq":
                raise ConfigError(
                    f"data.src_lang and tgt_lang are the languages of seq2seq pairs; objective {objective.kind} reads "
                    "texts: drop them or use objective.kind seq2seq"
                )
        members = [member_objective(self, i) for i in range(len(self.data.mixture))]
        if len({kind in DECODER_ONLY_OBJECTIVES for kind in [o.kind for o in members]}) > 1:
            raise ConfigError(
                "data.mixture mixes decoder-only objectives (causal_lm, prefix_lm) with encoder-decoder ones: "
                "every member's batches must fit the one model"
            )

    @property
    def warmup_steps(self) -> int:
        s = self.schedule
        return s.warmup_steps if s.warmup_steps is not None else int(s.warmup_fraction * self.training.steps)

    def sections(self) -> list[tuple[DataSection, ObjectiveSection]]:
        """Each data section the run reads with its objective: the data section's, or each mixture member's."""
        if not self.data.mixture:
            return [(self.data, self.objective)]
        return [(member.data, member_objective(self, i)) for i, member in enumerate(self.data.mixture)]

    def languages(self) -> list[Direction]:
        """The directions the run trains in (data.src_lang / tgt_lang of its sections), each once, in order."""
        found = [Direction(d.src_lang, d.tgt_lang) for d, _ in self.sections() if d.src_lang or d.tgt_lang]
        return list(dict.fromkeys(found))

    def text_format(self, model: nn.Module) -> TextFormat:
        """How the run's `model` takes text, as its objective fed it (text.json)."""
        return self.objective.text_format(RunTokenizer.padding_side_for(model), self.languages())

    def adapter_config(self) -> AdapterConfig | None:
        """What puts this run's checkpoints on their base (adapter.json); None but for a LoRA run."""
        return AdapterConfig(self.lora, self.training.train_only) if self.lora is not None else None

    def to_dict(self) -> dict:
        """The config as its YAML file holds it: each section's values, the model section as written."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {
            name: dict(value) if name == "model" else dataclasses.asdict(value) if value is not None else None
            for name, value in values.items()
        }

    def description(self, model: nn.Module) -> Description:
        """What this run's checkpoints of `model` say about themselves (runs/description.py)."""
        return Description(model.config, self.text_format(model), self.adapter_config())


def member_objective(cfg: RunConfig, index: int) -> ObjectiveSection:
    """The objective section of mixture member `index`: the run's, with the member's own keys over it."""
    member = cfg.data.mixture[index]
    values = {**dataclasses.asdict(cfg.objective), **member.objective}
    return read(ObjectiveSection, values, f"data.mixture[{index}].objective.")


def check_packing(cfg: RunConfig) -> None:
    """objective.pack needs an encoder-decoder objective and a family that keeps packed examples apart:
    the encoder_decoder family's segment-aware masks and positions (models.encoder_decoder)."""
    if not cfg.objective.pack:
        return
    if cfg.objective.kind not in PACKABLE:
        raise ConfigError(f"objective.pack works with objective.kind {', '.join(PACKABLE)}, not {cfg.objective.kind}")
    family = cfg.model.family
    if family != "encoder_decoder":
        raise ConfigError(
            f"objective.pack needs model.family encoder_decoder, whose attention keeps packed "
            f"examples apart; the {family} family does not"
        )
    attention = cfg.model.get("attention")  # a spec, its flat keys already in it (ModelSection)
    if isinstance(attention, dict) and attention.get("encoder") == "transient_global":  # a checkpoint's: first step
        raise ConfigError(
            "objective.pack does not combine with model.attention.encoder transient_global, whose block keys "
            "would span the packed examples"
        )
    if isinstance(attention, dict) and attention.get("global_tokens", "none") != "none":
        raise ConfigError(
            "objective.pack does not combine with model.attention.global_tokens, whose global tokens would be each row's, "
            "not each packed example's"
        )


def load_config(path: str | Path, overrides: list[str] = (), paths_from_file: bool = True) -> RunConfig:
    """Read a run config from YAML, apply `--set` overrides, and check it.

    Relative data, tokenizer, init_from and distill.teacher paths written in the file are relative to the
    file's folder (so a config works from any directory) and become absolute; paths given with --set are
    relative to the current directory, as the shell's are. A config a run saved holds absolute paths already
    (older runs saved theirs relative to where they ran: `paths_from_file=False` keeps those)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    values = read_yaml_file(path)
    if paths_from_file:
        resolve_paths(values, path.parent)
    for assignment in overrides:
        apply_override(values, assignment)
    return read(RunConfig, values)


def resolve_paths(values: dict, base: Path) -> None:
    """Make the relative paths of PATH_KEYS in `values` (a config file's mapping) absolute from `base`.

    A path missing there but present relative to the current directory (how configs were written
    before) is one sentence naming both places."""
    data = values.get("data")
    members = data.get("mixture") if isinstance(data, dict) else None
    nodes = [(section, key, section_of(values, section)) for section, key in PATH_KEYS]
    for member in members if isinstance(members, list) else []:
        if isinstance(member, dict) and isinstance(member.get("data"), dict):
            nodes += [("data", key, member["data"]) for key in ("train", "validation", "dataset")]
    for section, key, node in nodes:
        if not isinstance(node, dict) or not node.get(key):
            continue
        given = node[key] if isinstance(node[key], list) else [node[key]]
        resolved = []
        for item in given:
            if not isinstance(item, str) or Path(item).is_absolute():
                resolved.append(item)
                continue
            full = os.path.normpath(os.path.abspath(base / item))
            if (section, key) in NAMES_OR_PATHS and not os.path.exists(full) and not os.path.exists(item):
                resolved.append(item)  # no such path either way: a Hub id, or left as written for its own error
                continue
            if not os.path.exists(full) and os.path.exists(item):
                suggestion = os.path.relpath(os.path.abspath(item), os.path.abspath(base))
                raise ConfigError(
                    f"{section}.{key}: {item} is not at {full} (paths in a config are relative to its "
                    f"folder) but is at {os.path.abspath(item)}; write {suggestion}"
                )
            resolved.append(full)
        node[key] = resolved if isinstance(node[key], list) else resolved[0]


def section_of(values: dict, dotted: str) -> dict | None:
    """The mapping at a dotted section ("training.distill") of a config's values; None where any part is
    missing or not a mapping."""
    node = values
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def apply_override(values: dict, assignment: str) -> None:
    """Apply "a.b.c=value" to nested dict `values`; the value is parsed as YAML (10, 1e-3, true, [1, 2])."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set takes key.sub=value, got {short(assignment)}")
    value = load_yaml(raw, f"--set {short(key)[1:-1]}'s value") if raw.strip() else None
    node = values
    parts = model_key(values.get("model"), key.split("."))
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {part} is not a section")
    node[parts[-1]] = value


def model_key(section: object, parts: list[str]) -> list[str]:
    """An override's key, where the model section holds it: an old flat key (n_experts) in its spec
    (config_specs.MOVED), and a spec's key (experts.count) flat, where the section writes it flat."""
    if parts[0] != "model":
        return parts
    section = section if isinstance(section, dict) else {}
    name = ".".join(parts[1:])
    flat = {place: old for old, place in MOVED.items()}.get(name)
    if flat is not None and flat in section:
        return ["model", flat]
    if name in MOVED and name not in section:
        return ["model", *MOVED[name].split(".")]
    return parts


def saved_config(checkpoint: CheckpointDir) -> RunConfig:
    """The config a checkpoint saved, read whole, as a resume or a fine-tuning start reads it; CheckpointError
    where it cannot be read (inference reads the checkpoint's description instead: runs/description.py)."""
    try:
        return load_config(checkpoint.config, paths_from_file=False)
    except ConfigError as error:
        raise CheckpointError(f"the config saved in {checkpoint.path} cannot be read: {error}") from None


def save_config(config: RunConfig, path: Path) -> None:
    write_atomic(path, yaml.safe_dump(config.to_dict(), sort_keys=False))  # replaces a link, never follows
