"""`encdec generate MODEL --draft DRAFT [--num-assistant-tokens K] [--draft-shares-encoder] [--draft-quantize int8]`:
speculative decoding; `encdec serve` takes the same options, declared here once (serving.speculative_rows).

The draft is opened as the model is (a run directory or a Hugging Face directory), refused in one sentence where
its tokenizer is not the model's; generate checks the rest (vocabulary, special ids, and with
--draft-shares-encoder the width of the encoder output it reads: generation/speculative.py). The tokens each
target step gained and the share of draft tokens accepted are printed on stderr when the inputs are done.
"""

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from encdec.cli.output_paths import InputPath
from encdec.errors import ConfigError, EncdecError
from encdec.generation.config import AssistantTokens
from encdec.generation.generate import generate
from encdec.generation.speculative import SpeculativeStats
from encdec.generation.text_generator import TextGenerator
from encdec.quantization import SCHEMES, quantize
from encdec.runs.open import OpenedModel, open_model
from encdec.schema import argument_type
from encdec.tokenizers.languages import hf_tokenizer_of

DRAFT_FLAGS = {  # what acts only with --draft: flag -> its argument
    "--num-assistant-tokens": "draft_tokens",
    "--draft-quantize": "draft_quantize",
    "--draft-shares-encoder": "draft_shares_encoder",
}


def add_draft_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--draft",
        metavar="DRAFT_MODEL",
        type=InputPath("--draft", Path),
        help="a smaller model of the same tokenizer (a run or Hugging Face directory): decode speculatively",
    )
    parser.add_argument(
        "--num-assistant-tokens",
        dest="draft_tokens",  # a draft's option, handed to generate by DraftRun, not among GenerationConfig's flags
        metavar="K",
        type=argument_type(AssistantTokens, "--num-assistant-tokens"),
        help="with --draft: tokens the draft proposes per step of the model (default 5)",
    )
    parser.add_argument(
        "--draft-quantize",
        choices=SCHEMES,
        help="with --draft: its linear layers in int8 (its proposals only: the output stays the model's); on a CPU "
        "a t5-small-shaped one-layer draft's step costs a seventh of the model's, not half",
    )
    parser.add_argument(
        "--draft-shares-encoder",
        action="store_true",
        help="with --draft: its decoder reads the model's encoder output (a draft distilled with share_encoder)",
    )


@dataclass
class DraftRun:
    """The draft of one `encdec generate`, and what its target steps accepted so far."""

    model: torch.nn.Module
    shares_encoder: bool
    num_assistant_tokens: int | None
    totals: SpeculativeStats = field(default_factory=SpeculativeStats)

    def generate(self, generator: TextGenerator, model, encoded: dict, **options) -> torch.Tensor:
        """TextGenerator.generate's token ids (R, L), on the host, decoded speculatively; the round counts kept."""
        k = {} if self.num_assistant_tokens is None else {"num_assistant_tokens": self.num_assistant_tokens}
        out = generate(
            model,
            encoded["input_ids"],
            encoded["attention_mask"],
            assistant_model=self.model,
            assistant_shares_encoder=self.shares_encoder,
            return_dict_in_generate=True,
            **generator.options(**options, **k),
        )
        self.totals.add(out.speculative)
        return out.sequences.cpu()

    def report(self) -> None:
        print(self.totals, file=sys.stderr)


def open_draft(args: argparse.Namespace, opened: OpenedModel | None, device: torch.device) -> DraftRun | None:
    """The draft --draft names, on `device`, or None; the draft options without --draft are one sentence."""
    if args.draft is None:
        given = [flag for flag, value in DRAFT_FLAGS.items() if getattr(args, value) not in (None, False)]
        if given:
            raise ConfigError(f"{given[0]} acts only with a draft model: add --draft DRAFT_MODEL")
        return None
    try:
        draft = open_model(args.draft, max_source_len=args.max_source_len, dtype=args.dtype)
    except EncdecError as error:  # which of the two models the sentence is about
        raise ConfigError(f"--draft {error}") from None
    if vocabulary_of(draft) != vocabulary_of(opened):
        raise ConfigError(
            f"--draft {args.draft} has another tokenizer than {opened.path}: a draft proposes token ids the model "
            "must read as its own, so both need one tokenizer"
        )
    model = draft.model.to(device)
    if args.draft_quantize:
        model = quantize(model, args.draft_quantize)
    return DraftRun(model, args.draft_shares_encoder, args.draft_tokens)


def vocabulary_of(opened: OpenedModel):
    """What tells two models' tokenizers apart: a Hugging Face tokenizer's vocabulary (a run's pretrained one's too),
    else the run tokenizer's fingerprint (its kind, specials and model)."""
    hf = hf_tokenizer_of(opened.text)
    if hf is not None:
        return hf.get_vocab()
    return opened.run.tokenizer.fingerprint()
