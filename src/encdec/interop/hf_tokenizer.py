"""An encdec tokenizer written as files transformers' AutoTokenizer reads: tokenizer.json + tokenizer_config.json.

Every kind becomes a `tokenizers` pipeline with the same ids, specials included,
loaded as a PreTrainedTokenizerFast that adds nothing around the text, as encdec's
`encode` does by default:
    hf, bpe, unigram  the tokenizer's own JSON, without a post-processor
    sentencepiece     the .model converted: BPE or unigram pieces and scores, byte
                      fallback, the normalizer's charsmap, whitespace and dummy prefix
    byte              a byte-level BPE without merges: ids 0..255 are the bytes
    tiktoken          the encoding's ranks as byte-level BPE merges, split by its regex
    pretrained        the Hugging Face tokenizer's own save_pretrained
Unlike encdec's (except `hf`), a Hugging Face tokenizer matches special-token names
written inside text. A pipeline that encodes a fixed sample differently from encdec
is refused rather than written.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from encdec.errors import DataError
from encdec.safe_paths import atomic_path, output_dir, staged_files, write_atomic
from encdec.tokenizers import Tokenizer

# encodes the same with both or the conversion is wrong: spaces, digits, accents, byte fallback
CHECK_TEXT = "Once upon a time,  Lily (age 3) saw 1,234 ducks: «Süße Grüße!»\tnaïve café, 東京 🙂 "
SP_TRAINER, SP_NORMALIZER = 2, 3  # ModelProto fields
SP_UNSUPPORTED = {  # (spec, field number, value encdec cannot convert) -> why; training-only options pass
    (SP_TRAINER, 24, 1): "treat_whitespace_as_suffix",
    (SP_NORMALIZER, 5, 0): "escape_whitespaces false",
}


@dataclass
class TokenizerFiles:
    """A tokenizer converted and checked, ready to write: a `tokenizers` pipeline and its config, or HF's own."""

    backend: object | None  # tokenizers.Tokenizer
    config: dict
    pretrained: object | None = None  # a transformers tokenizer, saved as it is

    def save(self, path: Path) -> None:
        """Write the files into `path`, each a new file renamed into place (a link there is replaced)."""
        output_dir(path, "--out")
        if self.pretrained is not None:
            with staged_files(path) as stage:
                self.pretrained.save_pretrained(stage)
            return
        with atomic_path(path / "tokenizer.json") as tmp:
            self.backend.save(str(tmp))
        write_atomic(path / "tokenizer_config.json", json.dumps(self.config, indent=2, ensure_ascii=False) + "\n")


def convert_tokenizer(tokenizer: Tokenizer) -> TokenizerFiles:
    """`tokenizer` as AutoTokenizer's files; one sentence (DataError) when its kind cannot be converted exactly."""
    if tokenizer.kind == "pretrained":
        return TokenizerFiles(None, {}, pretrained=tokenizer.hf)
    builders = {
        "hf": hf_backend,
        "sentencepiece": sentencepiece_backend,
        "byte": byte_backend,
        "tiktoken": tiktoken_backend,
    }
    if tokenizer.kind not in builders:
        raise DataError(f"a {tokenizer.kind!r} tokenizer cannot be written for Hugging Face")
    backend, unk = builders[tokenizer.kind](tokenizer)
    check_backend(tokenizer, backend)
    names = sorted(tokenizer.specials.names, key=tokenizer.specials.names.get)
    id_to_name = {i: name for name, i in tokenizer.specials.names.items()}
    roles = {"pad_token": tokenizer.pad_id, "eos_token": tokenizer.eos_id, "bos_token": tokenizer.bos_id}
    role_names = {id_to_name.get(i, backend.id_to_token(i)) for i in roles.values()}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **{role: id_to_name.get(i, backend.id_to_token(i)) for role, i in roles.items()},
        **({"unk_token": unk} if unk else {}),
        "additional_special_tokens": [name for name in names if name not in role_names],
        "clean_up_tokenization_spaces": False,
    }
    return TokenizerFiles(backend, config)


def check_backend(tokenizer: Tokenizer, backend) -> None:
    """Refuse a converted pipeline whose vocabulary, special ids or encoding of CHECK_TEXT differ from encdec's."""
    size = backend.get_vocab_size(with_added_tokens=True)
    if size != tokenizer.vocab_size:
        raise DataError(f"the {tokenizer.kind} tokenizer converts to {size} ids instead of {tokenizer.vocab_size}")
    for name, token_id in tokenizer.specials.names.items():
        if backend.token_to_id(name) != token_id:
            raise DataError(f"the {tokenizer.kind} tokenizer's special {name} does not keep its id {token_id}")
    expected = tokenizer.encode([CHECK_TEXT])[0]
    if backend.encode(CHECK_TEXT, add_special_tokens=False).ids != expected:
        raise DataError(f"the {tokenizer.kind} tokenizer converts to one that encodes text differently")


def add_specials(backend, tokenizer: Tokenizer):
    """Add the specials in id order, so those beyond the base vocabulary get the ids encdec appended them at."""
    from tokenizers import AddedToken

    names = sorted(tokenizer.specials.names, key=tokenizer.specials.names.get)
    backend.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in names])
    return backend


def hf_backend(tokenizer) -> tuple:
    """hf, bpe and unigram: the tokenizer's JSON without its post-processor (encdec adds no BOS or EOS)."""
    from tokenizers import Tokenizer as Backend

    data = json.loads(tokenizer.tokenizer.to_str())
    data["post_processor"] = None
    model = data["model"]
    unk = model.get("unk_token")
    if model.get("type") == "Unigram" and model.get("unk_id") is not None:
        unk = model["vocab"][model["unk_id"]][0]
    return Backend.from_str(json.dumps(data)), unk


def byte_backend(tokenizer) -> tuple:
    """ids 0..255 are UTF-8 bytes: GPT-2's byte-to-character table as a vocabulary, no merges."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers

    alphabet = byte_alphabet()
    backend = Backend(models.BPE({alphabet[b]: b for b in range(256)}, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return add_specials(backend, tokenizer), None


def tiktoken_backend(tokenizer) -> tuple:
    """The encoding's merge ranks as a byte-level BPE (as transformers' TikTokenConverter builds it)."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    encoding = tokenizer.encoding
    ranks, pattern = getattr(encoding, "_mergeable_ranks", None), getattr(encoding, "_pat_str", None)
    if ranks is None or pattern is None:
        raise DataError("this tiktoken version does not expose its merge ranks, so its tokenizer cannot be written")
    alphabet = byte_alphabet()

    def text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    merges = []
    for token, rank in ranks.items():
        splits = [(token[:i], token[i:]) for i in range(1, len(token))]
        merges += [(rank, ranks[a], ranks[b], a, b) for a, b in splits if a in ranks and b in ranks]
    merges.sort()
    backend = Backend(models.BPE({text(t): r for t, r in ranks.items()}, [(text(a), text(b)) for *_, a, b in merges]))
    backend.model.ignore_merges = True  # tiktoken looks a whole piece up before merging its bytes
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    return add_specials(backend, tokenizer), None


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in character for each byte value (the ByteLevel pre-tokenizer's table)."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    table, extra = [], 0
    for b in range(256):
        table.append(chr(b) if b in printable else chr(256 + extra))
        extra += b not in printable
    return table


def sentencepiece_backend(tokenizer) -> tuple:
    """The .model as a `tokenizers` pipeline that mirrors SentencePiece's normalizer and model."""
    from tokenizers import Regex, decoders, models, normalizers
    from tokenizers import Tokenizer as Backend

    proto = tokenizer._model
    for (spec, field, value), why in SP_UNSUPPORTED.items():
        if read_spec(proto, spec).get(field) == value:
            raise DataError(f"the SentencePiece model {tokenizer.model_file} uses {why}, which encdec cannot convert")
    trainer, normalizer = read_spec(proto, SP_TRAINER), read_spec(proto, SP_NORMALIZER)
    sp = tokenizer.processor
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    byte_fallback, unk = bool(trainer.get(35, 0)), sp.id_to_piece(sp.unk_id())
    model_type = trainer.get(3, 1)  # 1 unigram, 2 BPE
    if model_type == 1:
        backend = Backend(models.Unigram(pieces, unk_id=sp.unk_id(), byte_fallback=byte_fallback))
    elif model_type == 2:
        vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
        backend = Backend(
            models.BPE(vocab, bpe_merges(vocab, pieces), unk_token=unk, fuse_unk=True, byte_fallback=byte_fallback)
        )
    else:
        raise DataError(f"the SentencePiece model {tokenizer.model_file} is a word or char model, not BPE or unigram")
    steps = [normalizers.Precompiled(normalizer[2])] if normalizer.get(2) else []
    if normalizer.get(4, 1):  # remove_extra_whitespaces
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    if normalizer.get(3, 1):  # add_dummy_prefix
        steps.append(normalizers.Prepend(" "))
    backend.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "\u2581")])
    decode = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence(decode + ([decoders.Strip(" ", 1, 0)] if normalizer.get(3, 1) else []))
    return add_specials(backend, tokenizer), unk


def bpe_merges(vocab: dict[str, int], pieces: list[tuple[str, float]]) -> list[tuple[str, str]]:
    """SentencePiece BPE merges, best first: every split of a piece into two pieces, ranked by the piece's
    score (as transformers' converter orders them)."""
    merges = []
    for piece, score in pieces:
        splits = [(piece[:i], piece[i:]) for i in range(1, len(piece))]
        found = sorted((s for s in splits if s[0] in vocab and s[1] in vocab), key=lambda s: (vocab[s[0]], vocab[s[1]]))
        merges += [(score, a, b) for a, b in found]
    merges.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)
    return [(a, b) for _, a, b in merges]


def read_spec(proto: bytes, field: int) -> dict[int, int | bytes]:
    """The scalar fields of sub-message `field` of a serialized ModelProto, by number (protobuf wire format)."""
    for number, value in proto_fields(proto):
        if number == field:
            return dict(proto_fields(value))
    return {}


def proto_fields(data: bytes):
    """(field number, value) pairs of one protobuf message; varints as ints, everything else as bytes."""
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        wire = key & 7
        if wire == 0:
            value, i = varint(data, i)
        elif wire == 2:
            size, i = varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i : i + size], i + size
        else:
            raise DataError(f"the SentencePiece model is not a valid protobuf (wire type {wire})")
        yield key >> 3, value


def varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, i
