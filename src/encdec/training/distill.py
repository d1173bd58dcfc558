"""Logit distillation (training.distill): a frozen teacher whose logits on the student's own batches the
objective learns from beside the labels (Hinton et al. 2015; the loss is encdec.models.loss's `distilled`).

    find_teacher     the run or Hugging Face directory training.distill.teacher names, as training.init_from
                     reads one (training/init_from.py), before any data is read or the run directory made;
                     on a resume, the very weights the run started with (its checkpoint's teacher.json)
    load_teacher     its model, refused in one sentence where it cannot teach this student (another
                     vocabulary or tokenizer, batches of another shape); frozen, in eval mode (no dropout),
                     on the student's device
    Teacher.logits   its logits on a batch: the student's own inputs, under the student's autocast

The teacher is no submodule of the student: it is in no optimizer and no checkpoint, and DDP, FSDP and
torch.compile wrap the student alone. Every checkpoint keeps a pointer to it (teacher.json: the directory
read and a hash of its weights), and a resumed run reads that directory again, not the teacher run's best
checkpoint of now (which may have moved); teacher weights other than those hashed are refused. Its forward
draws no random numbers, so the resumed losses equal the uninterrupted run's.
"""

import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from encdec.data.batch import Batch
from encdec.errors import CheckpointError, ConfigError
from encdec.models import ModelConfig, build_model, count_parameters
from encdec.models.model_config import CAUSAL_LMS
from encdec.runs.checkpoint import load_state
from encdec.runs.model_section import build_model_config
from encdec.runs.pointer import NAME, SHA256, SOURCE, read_pointer, source_path, weights_sha256
from encdec.runs.run_dir import CheckpointDir
from encdec.tokenizers import Tokenizer, load_tokenizer
from encdec.training.init_from import Pretrained, from_checkpoint, load_pretrained
from encdec.training.loader import forward
from encdec.training.run_config import RunConfig

log = logging.getLogger(__name__)
LABEL = "training.distill.teacher "


@dataclass
class TeacherPointer:
    """What a distilled run's checkpoints keep of its teacher (teacher.json)."""

    teacher: NAME  # training.distill.teacher as the config named it
    kind: Literal["run", "hf"]
    source: SOURCE  # the checkpoint of a run, or the Hugging Face directory, that was read (its real path)
    sha256: SHA256  # of its weights (runs.pointer.weights_sha256)


@dataclass
class Teacher:
    """The frozen teacher and how much the objective learns from it."""

    model: nn.Module = field(repr=False)  # eval mode, no gradients, on the student's device
    alpha: float
    temperature: float
    pointer: TeacherPointer  # where its weights came from, and their hash
    # a decoder-only teacher of an encoder-decoder student (an adapted one's source): the ids its streams leave
    # out of a source (the student's special tokens) and the id that opens a stream; None: the student's own rows
    streams: tuple[torch.Tensor, int] | None = None

    @torch.no_grad()
    def logits(self, batch: Batch, amp: AbstractContextManager) -> torch.Tensor:
        """Its logits (B, T, V) on the rows the student trains on."""
        with amp:
            if self.streams is not None:
                return stream_logits(self.model, batch, *self.streams)
            return forward(self.model, batch).logits


def stream_logits(model: nn.Module, batch: Batch, dropped: torch.Tensor, opener: int) -> torch.Tensor:
    """A decoder-only model's logits (B, T, V) for an encoder-decoder batch: each row read as one stream, its
    opener, its source's real tokens (special ones dropped) and its target (the labels), each target token
    predicted from the position before it, as the student's decoder predicts it. Rows end in padding alone, which
    a causal model's earlier positions never see. Made on the batch's device, without a host sync."""
    src, labels = batch.src_ids, batch.labels
    keep = torch.ones_like(src, dtype=torch.bool) if batch.src_mask is None else batch.src_mask.bool()
    keep &= ~torch.isin(src, dropped)  # made on the teacher's device, the batch's, once (teacher_streams)
    B, S = src.shape
    T = labels.shape[1]
    kept = keep.sum(1)  # (B,) source tokens of each row
    stream = torch.full((B, 1 + S + T), opener, dtype=src.dtype, device=src.device)
    where = torch.where(keep, keep.cumsum(1), 0)  # each kept token's place after the opener; 0: none (the opener's)
    stream.scatter_(1, where, torch.where(keep, src, opener))
    targets = 1 + kept[:, None] + torch.arange(T, device=src.device)  # (B, T) each label's place
    stream.scatter_(1, targets, labels.clamp(min=0))  # ignored labels (padding at a row's end): token 0, unread
    logits = model(None, stream[:, :-1]).logits  # (B, S + T, V)
    return logits.gather(1, (targets - 1)[..., None].expand(-1, -1, logits.shape[-1]))


def find_teacher(cfg: RunConfig, checkpoint: CheckpointDir | None = None) -> tuple[Pretrained, TeacherPointer] | None:
    """The teacher's weights, model section and tokenizer directory, and the pointer the run's checkpoints
    keep; None without training.distill. Resuming from `checkpoint`, the teacher it names is read again
    (from where it was read, while that exists) and must hash as it did."""
    if not cfg.training.distill:
        return None
    name = cfg.training.distill.teacher
    saved = read_teacher(checkpoint) if checkpoint is not None else None
    if saved is not None and saved.teacher != name:  # a teacher change the user accepted: a new pointer
        saved = None
    if saved is not None and Path(saved.source).is_dir():
        found = (
            from_checkpoint(CheckpointDir(Path(saved.source)))
            if saved.kind == "run"
            else load_pretrained(saved.source, LABEL)
        )
    else:
        found = load_pretrained(name, LABEL)
    pointer = TeacherPointer(name, found.kind, source_path(found.source), weights_sha256(found.weights))
    if saved is not None and pointer.sha256 != saved.sha256:
        raise CheckpointError(
            f"{LABEL}{name} now holds other weights than this run was distilled from (hash {pointer.sha256[:12]}, "
            f"not {saved.sha256[:12]}; {saved.source} is gone or changed): restore that teacher to resume, or start "
            "a new run"
        )
    return found, pointer


def teacher_bytes(found: Pretrained) -> int:
    """What the teacher's weights take on the device: float32, as build_model makes them."""
    return 4 * sum(tensor.numel() for tensor in found.weights.values())


def read_teacher(checkpoint: CheckpointDir) -> TeacherPointer | None:
    """The checkpoint's teacher pointer; None for a run that does not distil (or saved before pointers)."""
    return read_pointer(checkpoint.teacher, TeacherPointer, "teacher pointer")


def load_teacher(
    cfg: RunConfig,
    found: Pretrained,
    pointer: TeacherPointer,
    tokenizer: Tokenizer,
    student: ModelConfig,
    device: torch.device,
) -> Teacher:
    """The teacher `found` holds, checked against the student (its config and tokenizer) and frozen."""
    what = f"{LABEL}{cfg.training.distill.teacher}"
    tok = load_tokenizer(found.tokenizer_dir)
    model_cfg = build_model_config(found.model_section, tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id)
    if model_cfg.vocab_size != student.vocab_size:
        raise ConfigError(
            f"{what} predicts {model_cfg.vocab_size:,} tokens and the student {student.vocab_size:,}: "
            "distillation compares their distributions token by token, so the vocabularies must match"
        )
    if tok.fingerprint() != tokenizer.fingerprint():
        which = (
            f"a {tok.kind} tokenizer and this run with a {tokenizer.kind} one"
            if tok.kind != tokenizer.kind
            else f"a {tok.kind} tokenizer of other tokens than this run's"
        )
        raise ConfigError(f"{what} was trained with {which}: its token ids would mean other text to the student")
    streams = None
    if model_cfg.family == "decoder_only" and student.family == "encoder_decoder":  # an adapted model's source
        streams = teacher_streams(cfg, what, tokenizer, model_cfg, device)
    elif (model_cfg.family in CAUSAL_LMS) != (student.family in CAUSAL_LMS):
        raise ConfigError(
            f"{what} is of the {model_cfg.family} family and the student of the {student.family} one: a teacher "
            "must read the student's own batches, so both are causal language models or neither is (or a "
            "decoder-only teacher of an encoder-decoder trained on PrefixLM rows)"
        )
    if cfg.objective.pack and model_cfg.family != "encoder_decoder":
        raise ConfigError(
            f"objective.pack needs a teacher of the encoder_decoder family too; {what} is {model_cfg.family}"
        )
    with torch.random.fork_rng(devices=[]):  # its throwaway initialisation leaves the student's random stream alone
        model = build_model(model_cfg)
    load_state(model, found.weights, f"{what} does not fit the model its own config describes")
    model.requires_grad_(False).eval().to(device)
    d = cfg.training.distill
    log.info(
        "distilling from %s (%s parameters): alpha %g, temperature %g",
        found.source,
        f"{count_parameters(model):,}",
        d.alpha,
        d.temperature,
    )
    return Teacher(model, d.alpha, d.temperature, pointer, streams)


def share_encoder(student: nn.Module, teacher: Teacher) -> int:
    """training.distill.share_encoder: the teacher's encoder weights (its token table among them) copied into the
    student's encoder, which is frozen; one sentence where a weight's shape differs. The frozen parameters' count."""
    if not all(m.config.family == "encoder_decoder" for m in (student, teacher.model)):
        raise ConfigError(
            "training.distill.share_encoder gives the student the teacher's encoder: both must be of the "
            "encoder_decoder family"
        )
    theirs, mine = teacher.model.encoder.state_dict(), student.encoder.state_dict()
    for name, tensor in mine.items():
        if name not in theirs or theirs[name].shape != tensor.shape:
            held = tuple(theirs[name].shape) if name in theirs else "no such weight"
            raise ConfigError(
                f"training.distill.share_encoder copies the teacher's encoder into the student, but the student's "
                f"encoder.{name} is {tuple(tensor.shape)} and the teacher's {held}: give the student the teacher's "
                "encoder settings (d_model, n_heads, d_ff, n_encoder_layers, ...) and change its decoder alone"
            )
    student.encoder.load_state_dict(theirs)
    student.encoder.requires_grad_(False)
    frozen = sum(p.numel() for p in student.encoder.parameters())
    log.info("the student's encoder is the teacher's, frozen: %s parameters", f"{frozen:,}")
    return frozen


def teacher_streams(
    cfg: RunConfig, what: str, tokenizer: Tokenizer, teacher: ModelConfig, device: torch.device = torch.device("cpu")
) -> tuple[torch.Tensor, int]:
    """What a decoder-only teacher needs to read an encoder-decoder's rows as streams (`stream_logits`): rows
    that are a text and its continuation (PrefixLM: UL2's S denoiser alone, or seq2seq pairs), not span
    corruption's sentinel-marked pieces, which no decoder-only model has read. The dropped ids are made on
    `device`, where the batches are, so a step copies nothing to it."""
    o = cfg.objective
    corrupts = o.kind == "span_corruption" or (o.kind == "ul2" and any(o.ul2_probabilities[:2]))
    if corrupts or cfg.data.mixture:
        raise ConfigError(
            f"{what} is a decoder-only model, which teaches an encoder-decoder on rows it can read as one text: "
            "PrefixLM (objective.kind ul2 with ul2_probabilities [0, 0, 1]) or seq2seq pairs, not span corruption"
        )
    names = ("[R]", "[X]", "[S]", "<pad>")
    dropped = {tokenizer.eos_id, *tokenizer.sentinel_ids, *(tokenizer.special_id(n) for n in names)} - {None}
    return torch.tensor(sorted(dropped), device=device), teacher.eos_id
