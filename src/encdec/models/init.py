"""Weight initialisation schemes.

"t5": Hugging Face T5's `_init_weights` (Mesh TensorFlow), std by fan-in:
    embeddings N(0, 1), q N(0, (C * D)^-0.5), k and v N(0, C^-0.5), o N(0, (H * D)^-0.5),
    wi N(0, C^-0.5), wo N(0, d_ff^-0.5), relative bias N(0, C^-0.5), untied head N(0, C^-0.5).
"normal": GPT-2 / nanoGPT: every Linear and Embedding N(0, 0.02), biases 0, and the
    residual output projections (attention o, feed-forward wo) N(0, 0.02 / sqrt(2 * n_layers)).
"""

import math

from torch import nn

from encdec.models.model_config import ModelConfig
from encdec.modules import Attention, FeedForward, MoE, RelativePositionBias


def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    if cfg.init == "t5":
        _init_t5(model, cfg)
    else:
        _init_normal(model, cfg)


def _init_t5(model: nn.Module, cfg: ModelConfig) -> None:
    C = cfg.d_model
    for module in model.modules():
        if isinstance(module, Attention):
            inner = module.n_heads * module.d_head
            nn.init.normal_(module.q.weight, std=(C * module.d_head) ** -0.5)
            nn.init.normal_(module.k.weight, std=C**-0.5)
            nn.init.normal_(module.v.weight, std=C**-0.5)
            nn.init.normal_(module.o.weight, std=inner**-0.5)
        elif isinstance(module, FeedForward):
            for name in ("wi", "wi_0", "wi_1"):
                if hasattr(module, name):
                    nn.init.normal_(getattr(module, name).weight, std=C**-0.5)
            nn.init.normal_(module.wo.weight, std=module.wo.in_features**-0.5)
        elif isinstance(module, MoE):
            nn.init.normal_(module.router.weight, std=C**-0.5)
        elif isinstance(module, RelativePositionBias):
            nn.init.normal_(module.embed.weight, std=C**-0.5)
        elif isinstance(module, nn.Embedding) and module is getattr(model, "embed", None):
            nn.init.normal_(module.weight, std=1.0)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    if getattr(model, "lm_head", None) is not None:
        nn.init.normal_(model.lm_head.weight, std=C**-0.5)


def _init_normal(model: nn.Module, cfg: ModelConfig) -> None:
    residual_std = 0.02 / math.sqrt(2 * max(cfg.n_encoder_layers, cfg.decoder_layers))
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and not isinstance(module, RelativePositionBias):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
    for module in model.modules():
        if isinstance(module, Attention):
            nn.init.normal_(module.o.weight, std=residual_std)
        elif isinstance(module, FeedForward):
            nn.init.normal_(module.wo.weight, std=residual_std)
