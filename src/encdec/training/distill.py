"""Logit distillation (training.distill): a frozen teacher whose logits on the student's own batches the
objective learns from beside the labels (Hinton et al. 2015; the loss is encdec.models.loss's `distilled`).

    find_teacher     the run or Hugging Face directory training.distill.teacher names, as training.init_from
                     reads one (training/pretrained.py), before any data is read or the run directory made
    load_teacher     its model, refused in one sentence where it cannot teach this student (another
                     vocabulary or tokenizer, batches of another shape); frozen, in eval mode (no dropout),
                     on the student's device
    Teacher.logits   its logits on a batch: the student's own inputs, under the student's autocast

The teacher is no submodule of the student: it is in no optimizer and no checkpoint, and DDP, FSDP and
torch.compile wrap the student alone. A resumed run reads it again from training.distill.teacher; its
forward draws no random numbers, so the resumed losses equal the uninterrupted run's.
"""

import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from encdec.data.batch import Batch
from encdec.errors import ConfigError
from encdec.models import ModelConfig, build_model, count_parameters
from encdec.models.config import CAUSAL_LMS
from encdec.runs.checkpoint import load_state
from encdec.runs.config import RunConfig, build_model_config
from encdec.tokenizers import Tokenizer, load_tokenizer
from encdec.training.loader import forward
from encdec.training.pretrained import Pretrained, load_pretrained

log = logging.getLogger(__name__)
LABEL = "training.distill.teacher "


@dataclass
class Teacher:
    """The frozen teacher and how much the objective learns from it."""

    model: nn.Module = field(repr=False)  # eval mode, no gradients, on the student's device
    alpha: float
    temperature: float
    source: Path  # the checkpoint (or Hugging Face) directory its weights came from

    @torch.no_grad()
    def logits(self, batch: Batch, amp: AbstractContextManager) -> torch.Tensor:
        """Its logits (B, T, V) on the rows the student trains on."""
        with amp:
            return forward(self.model, batch).logits


def find_teacher(cfg: RunConfig) -> Pretrained | None:
    """The teacher's weights, model section and tokenizer directory; None without training.distill."""
    return load_pretrained(cfg.training.distill.teacher, LABEL) if cfg.training.distill else None


def load_teacher(
    cfg: RunConfig, found: Pretrained, tokenizer: Tokenizer, student: ModelConfig, device: torch.device
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
    if (model_cfg.family in CAUSAL_LMS) != (student.family in CAUSAL_LMS):
        raise ConfigError(
            f"{what} is of the {model_cfg.family} family and the student of the {student.family} one: a teacher "
            "must read the student's own batches, so both are causal language models or neither is"
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
    return Teacher(model, d.alpha, d.temperature, found.source)
