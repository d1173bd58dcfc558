"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a small draft proposes k tokens, the target
checks them in one step. This file holds the rules and the checks; the rounds run in speculative_rounds.py.

    out = generate(target, src_ids, assistant_model=draft, num_assistant_tokens=5)   # strategies.py's row

Each round the draft decodes k tokens one at a time (greedy: its argmax; sampling: drawn from its processed
distribution q) and the target reads the last kept token and the k drafts in one step (k + 1 positions through
its cache), which gives its processed distribution p at each. Greedy keeps the longest prefix of drafts equal to
the target's argmax and then the target's own token, so the output is plain greedy's, token for token. Sampling
accepts a draft x with probability min(1, p(x) / q(x)) and at the first rejection draws from norm(max(0, p - q)),
or from p after k acceptances (Leviathan et al. 2023, section 2.3 and appendix A.1): every token is distributed as
the target's sampling draws it. The logits processors (temperature, top-k/p, penalties) act on p and q alike, each
over the tokens before its position. `draft_tokens` and `verify` below are the one copy of these rules.

A batch: rows accept different counts, and each row keeps its own (speculative_rounds.SpeculativeBatch, in
`generate` as in a server's continuous batch, serving.speculative_rows): its caches are cut back row by row to
its own kept length, so a row advances by what it accepts whatever the others do, and leaves the batch when it is
done.

Drafts (`shares_encoder`): a decoder trained against the target's frozen encoder (training.distill's
share_encoder) reads the target's encoder output, its own encoder never run, so its width must be the target's;
any other model of the same vocabulary and special tokens runs its own encoder once.

Shapes: R rows, k draft tokens a round, V vocabulary.
"""

from dataclasses import dataclass

import torch

from encdec.errors import ConfigError
from encdec.generation.config import GenerationConfig
from encdec.generation.interface import capabilities_of, model_device
from encdec.generation.search import argmax

SPECIAL_IDS = ("vocab_size", "decoder_start_id", "eos_id", "pad_id")


@dataclass
class Draft:
    """generate's assistant_model, as the speculative row runs it."""

    model: object  # an encoder-decoder (models.EncoderDecoder) of the target's vocabulary
    shares_encoder: bool  # reads the target's encoder output instead of running its own encoder


@dataclass
class SpeculativeStats:
    """How a speculative generation went: target steps (rounds), the drafts proposed and those kept."""

    target_steps: int = 0
    drafted: int = 0
    accepted: int = 0

    def count(self, drafted: int, accepted: int) -> None:
        """One target step that checked `drafted` tokens and kept `accepted` of them."""
        self.target_steps += 1
        self.drafted += drafted
        self.accepted += accepted

    def add(self, other: "SpeculativeStats") -> None:
        """Count `other`'s steps too (a command's batches)."""
        self.target_steps += other.target_steps
        self.drafted += other.drafted
        self.accepted += other.accepted

    @property
    def tokens_per_step(self) -> float:
        """Tokens each row gained per target step: the accepted drafts and the target's own token."""
        return (self.accepted + self.target_steps) / max(self.target_steps, 1)

    @property
    def acceptance_rate(self) -> float:
        """The share of proposed drafts kept."""
        return self.accepted / max(self.drafted, 1)

    def __str__(self) -> str:
        return (
            f"speculative decoding: {self.tokens_per_step:.2f} tokens per target step, {self.accepted:,} of "
            f"{self.drafted:,} draft tokens accepted ({100 * self.acceptance_rate:.0f}%)"
        )


def check_draft(target, draft, shares_encoder: bool, cfg: GenerationConfig) -> Draft:
    """`draft` as the speculative row runs it, or one sentence (ConfigError) on why it cannot draft for `target`
    with these options."""
    checked = check_pair(target, draft, shares_encoder)
    refused = options_refusal(cfg)
    if refused is not None:
        raise ConfigError(refused)
    return checked


def check_pair(target, draft, shares_encoder: bool) -> Draft:
    """`draft` as a speculative search runs it beside `target` (generate's, a server's: serving.speculative_rows),
    or one sentence (ConfigError) on why it cannot draft for it, whatever the options."""
    for name, model in (("the model", target), ("the draft", draft)):
        if not capabilities_of(model).speculates:
            raise ConfigError(
                f"speculative decoding runs encoder-decoders of text (their decode state is cut back to the tokens "
                f"kept), and {name} is not one"
            )
    mine, theirs = target.config, draft.config
    for name in SPECIAL_IDS:
        if getattr(mine, name) != getattr(theirs, name):
            raise ConfigError(
                f"the draft's {name} is {getattr(theirs, name)} and the model's {getattr(mine, name)}: a draft "
                "must share the model's tokenizer and vocabulary, token for token"
            )
    if shares_encoder and mine.encoder_config().d_model != theirs.encoder_config().d_model:
        raise ConfigError(
            f"the draft reads the model's encoder output, of d_model {mine.encoder_config().d_model}, but its "
            f"decoder reads d_model {theirs.encoder_config().d_model}: share the encoder of a draft of the same width"
        )
    if model_device(draft) != model_device(target):
        raise ConfigError(f"the draft is on {model_device(draft)} and the model on {model_device(target)}: move one")
    return Draft(draft, shares_encoder)


def options_refusal(cfg: GenerationConfig) -> str | None:
    """Why speculative decoding cannot run under `cfg` (one sentence), or None: it is greedy or sampling. generate
    refuses such options with a draft; a server decodes such requests without its draft."""
    unsupported = [  # what is asked, whether it is, what to do instead
        ("num_beams > 1", cfg.num_beams > 1, "set num_beams 1 (--num-beams 1; a checkpoint's default may be more)"),
        ("compile", cfg.compile, "leave compile out"),
        ("a temperature fallback", cfg.temperatures is not None, "give one temperature"),
        ("Whisper's rules", cfg.whisper is not None, "decode without a draft"),
        ("minimum Bayes risk", cfg.mbr is not None, "leave out mbr (its samples are drawn without a draft)"),
    ]
    for what, given, instead in unsupported:
        if given:
            return f"speculative decoding (a draft model) is greedy or sampling, without {what}: {instead}"
    return None


def draft_tokens(scores: torch.Tensor, cfg: GenerationConfig, generator: torch.Generator | None) -> torch.Tensor:
    """scores (R, V), the draft's processed logits -> (R,) its proposal: the argmax, or a draw from q."""
    if not cfg.do_sample:
        return argmax(scores)
    return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(1)


def verify(
    drafts: torch.Tensor,
    p_scores: list[torch.Tensor],
    q_scores: list[torch.Tensor],
    cfg: GenerationConfig,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """drafts (R, n), the target's processed logits at n + 1 positions and the draft's at n -> the round's tokens
    (R, n + 1) and each row's accepted count a (R,): tokens[:, :a] are its accepted drafts, tokens[:, a] the
    target's own (greedy: its argmax; sampling: the correction drawn from norm(max(0, p - q)), or from p where
    all n were accepted)."""
    R, n = drafts.shape
    if not cfg.do_sample:
        tokens = torch.stack([argmax(scores) for scores in p_scores], dim=1)  # (R, n + 1)
        accepted = (drafts == tokens[:, :n]).long().cumprod(1).sum(1)  # the longest agreeing prefix
        return tokens, accepted
    p = torch.stack([scores.softmax(-1) for scores in p_scores], dim=1)  # (R, n + 1, V)
    if n == 0:
        return torch.multinomial(p[:, 0], 1, generator=generator), torch.zeros(R, dtype=torch.long, device=p.device)
    q = torch.stack([scores.softmax(-1) for scores in q_scores], dim=1)  # (R, n, V)
    p_x = p[:, :n].gather(2, drafts[..., None]).squeeze(2)  # (R, n)
    q_x = q.gather(2, drafts[..., None]).squeeze(2)
    u = torch.rand((R, n), generator=generator, device=p.device)
    accepted = (u * q_x < p_x).long().cumprod(1).sum(1)  # accepted with probability min(1, p / q)
    residual = torch.cat(((p[:, :n] - q).clamp(min=0), p[:, n:]), dim=1)  # (R, n + 1, V)
    at = residual[torch.arange(R, device=p.device), accepted]  # (R, V) each row's first rejection (or p after all)
    at = torch.where(at.sum(-1, keepdim=True) > 0, at, p[torch.arange(R, device=p.device), accepted])  # p = q there
    correction = torch.multinomial(at, 1, generator=generator)  # (R, 1)
    tokens = torch.cat((drafts, correction), dim=1).scatter(1, accepted[:, None], correction)
    return tokens, accepted
