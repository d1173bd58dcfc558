"""Tiny Hugging Face checkpoints that command and bad-input tests start from, written as a user's would be."""

from pathlib import Path

import torch


def word_level_t5(path: Path, words: list[str], num_layers: int = 1, close_with_eos: bool = False) -> Path:
    """A random-weight T5 (16 wide, seed 0) saved into `path` with a word-level tokenizer over `words` (the id
    of a word is its last place in the list; <pad> </s> <unk> first): a complete Hugging Face directory.
    `close_with_eos` appends </s> to every encoded text, as T5's own tokenizer does."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if close_with_eos:
        backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=len(words), d_model=16, d_kv=4, d_ff=32, num_layers=num_layers, num_heads=4, decoder_start_token_id=0
    )
    transformers.T5ForConditionalGeneration(config).save_pretrained(path)
    return path


def two_vocabulary_tokenizer(path: Path, sizes: tuple[int, int] = (0, 0)):
    """FSMT's tokenizer (Moses and BPE, sacremoses) written into `path` over letters and three merges, with a
    source vocabulary (vocab-src.json) and a target one (vocab-tgt.json) holding the same pieces in the opposite
    order after fairseq's four specials (<s> <pad> </s> <unk>): a text decodes to another one by the wrong table.
    Each is filled up to `sizes` (source, target: a model's) with numbers as words, which every id then decodes to."""
    import json

    import transformers

    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = [*letters, *(f"{c}</w>" for c in letters), "th", "the</w>", "at</w>"]
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    for name, order, size in (("vocab-src.json", pieces, sizes[0]), ("vocab-tgt.json", pieces[::-1], sizes[1])):
        words = [*specials, *order]
        words += [f"{n}</w>" for n in range(size - len(words))]
        (path / name).write_text(json.dumps({piece: i for i, piece in enumerate(words)}))
    (path / "merges.txt").write_text("t h\nth e</w>\na t</w>\n")
    files = {f"{side}_vocab_file": str(path / f"vocab-{side}.json") for side in ("src", "tgt")}
    tokenizer = transformers.FSMTTokenizer(langs=["en", "de"], merges_file=str(path / "merges.txt"), **files)
    tokenizer.save_pretrained(path)
    return tokenizer
