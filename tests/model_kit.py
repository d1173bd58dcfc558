"""Model settings that tests in several folders build from: Gemma's blocks in an encoder-decoder, T5Gemma's
layout, and the tiny shapes of Hugging Face's T5 and BART configs."""

# Gemma's layer: its (1 + weight) RMSNorm before and after each sublayer, gated GELU, scaled scores, no RoPE across
GEMMA_BLOCKS = dict(
    norm="gemma_rmsnorm", post_norms=True, activation="gated_gelu", rope_cross="none", scale_attention=True
)
# T5Gemma's: Gemma's blocks with a score scale of its own, a window of 3 every other layer, scaled untied embeddings
T5GEMMA = dict(GEMMA_BLOCKS, attention_scale_dim=12, sliding_window=3, scale_embeddings=True, shared_embeddings=False)

HF_T5_SHAPE = dict(
    d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2, num_heads=4
)  # transformers.T5Config's
HF_BART_SHAPE = dict(  # transformers.BartConfig's (and MBart's)
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    max_position_embeddings=128,
)

# a T5 whose head widths do not add up to d_model and whose stacks differ in depth, so that a count or a shape
# that takes one width or depth for another is caught
UNEVEN_T5 = dict(vocab_size=100, d_model=32, n_heads=4, d_head=12, d_ff=48, n_encoder_layers=2, n_decoder_layers=3)
