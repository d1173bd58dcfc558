"""What a checkpoint says about itself, so that it opens without the training config that made it.

    model.json     the ModelConfig its weights belong to, resolved: vocabulary size and special ids included
    text.json      how the model takes text (runs.text.TextFormat): templates, UL2's mode token, padding
                   side, the source length training cut inputs to
    adapter.json   a LoRA checkpoint's: the adapters' shape and what trains (runs.adapter.AdapterConfig),
                   beside base.json, which names the base they go on

With the tokenizer and generation.json beside the weights, that is all inference reads: a tightened rule
of the training config never makes a checkpoint unloadable, and a checkpoint directory copied out of its
run opens on its own, like a Hugging Face model directory. Each part is read through its declared schema,
a bad one refused in one sentence naming the file.

A checkpoint written before these parts is described by its config.yaml (`described_by_config`): of it,
only the model section, the objective's text keys (runs.text.TextObjective), the lora section and
training.train_only are read, each as declared, the rest of the training config never.
"""

from dataclasses import asdict, dataclass

from encdec.errors import CheckpointError, ConfigError
from encdec.models import ModelConfig, check_fields
from encdec.models.config_specs import moved_to_specs
from encdec.runs.adapter import TRAIN_ONLY, AdapterConfig, LoraSection
from encdec.runs.checkpoint import write_json_parts
from encdec.runs.model_section import ModelSection
from encdec.runs.run_dir import CheckpointDir
from encdec.runs.text import RunTokenizer, TextFormat, TextObjective
from encdec.schema import load_json, read, read_yaml_file, short, value_of
from encdec.tokenizers import Tokenizer

MESSAGE_CHARS = 200  # of a schema's refusal quoted in a checkpoint's: the sentence stays one line of under 300


@dataclass
class Description:
    """A checkpoint's model config, text format and (for a LoRA checkpoint) adapter config."""

    model: ModelConfig
    text: TextFormat
    adapter: AdapterConfig | None = None


def describe(checkpoint: CheckpointDir, tokenizer: Tokenizer) -> Description:
    """The checkpoint's own description, or for one written before it, the one its config.yaml gives with
    `tokenizer` (the checkpoint's: a config's vocabulary and special ids default to it)."""
    if checkpoint.model_config.exists():
        return read_description(checkpoint)
    return described_by_config(checkpoint, tokenizer)


def description_files(description: Description) -> dict:
    """Its parts as the JSON-able values `save_checkpoint` writes (runs.checkpoint.JSON_PARTS)."""
    files = {"model_config": description.model.to_dict(), "text": asdict(description.text)}
    if description.adapter is not None:
        files["adapter"] = asdict(description.adapter)
    return files


def write_description(checkpoint: CheckpointDir, description: Description) -> None:
    """Its parts into `checkpoint`, a directory being written (a temporary one, renamed into place whole)."""
    write_json_parts(checkpoint, description_files(description))


def read_description(checkpoint: CheckpointDir) -> Description:
    """model.json, text.json and (where base.json names a base) adapter.json, each as declared."""
    model = read_model_config(checkpoint)
    for part in (checkpoint.TEXT, *([checkpoint.ADAPTER] if checkpoint.base.exists() else [])):
        if not checkpoint.part(part).exists():
            raise CheckpointError(
                f"checkpoint {checkpoint.path} has {checkpoint.MODEL_CONFIG} but no {part}; the checkpoint is incomplete"
            )
    text = read_part(checkpoint.text, TextFormat, "text format")
    adapter = read_part(checkpoint.adapter, AdapterConfig, "adapter config") if checkpoint.adapter.exists() else None
    return Description(model, text, adapter)


def read_model_config(checkpoint: CheckpointDir) -> ModelConfig:
    """model.json: the ModelConfig the checkpoint's weights belong to, as declared and as its family builds it."""
    model = read_part(checkpoint.model_config, ModelConfig, "model config", "model.", moved_to_specs)
    try:
        check_fields(model)  # a field its family does not use, as building it would refuse
    except ConfigError as error:
        raise CheckpointError(f"{checkpoint.model_config} is not a model config encdec writes ({error})") from None
    return model


def read_part(path, schema: type, what: str, prefix: str = "", upgrade=None):
    """JSON part `path` as dataclass `schema`, else one CheckpointError sentence naming it; `upgrade` reads an
    older shape first (a model.json written before the specs: config_specs.moved_to_specs)."""
    values = load_json(path, f"the {what}", CheckpointError)
    try:
        return read(schema, upgrade(values) if upgrade and isinstance(values, dict) else values, prefix)
    except ConfigError as error:
        why = str(error) if len(str(error)) <= MESSAGE_CHARS else str(error)[: MESSAGE_CHARS - 3] + "..."
        raise CheckpointError(f"{path} is not a {what} encdec writes ({why})") from None


def described_by_config(checkpoint: CheckpointDir, tokenizer: Tokenizer) -> Description:
    """What a checkpoint from before its description parts is, read from the few keys of its config.yaml
    that say it: the model section (its vocabulary and ids the tokenizer's, where it sets none), the
    objective's text keys, the lora section and training.train_only."""
    if not checkpoint.config.is_file():
        raise CheckpointError(
            f"checkpoint {checkpoint.path} has neither {checkpoint.MODEL_CONFIG} nor {checkpoint.CONFIG}; "
            "nothing says what model its weights are"
        )
    try:
        values = read_yaml_file(checkpoint.config)
        model = ModelSection(section(values, "model")).build(  # its unused fields refused, as building refuses
            tokenizer.vocab_size, tokenizer.pad_id, tokenizer.eos_id, tokenizer.decoder_start_id
        )
        objective = section(values, "objective")
        keys = TextObjective.__dataclass_fields__
        text = read(TextObjective, {k: v for k, v in objective.items() if k in keys}, "objective.")
        adapter = None
        if values.get("lora") is not None:
            trained = section(values, "training").get("train_only", [])
            adapter = AdapterConfig(
                read(LoraSection, values["lora"], "lora."), value_of(TRAIN_ONLY, trained, "training.train_only")
            )
    except ConfigError as error:
        raise CheckpointError(f"the config saved in {checkpoint.path} cannot be read: {error}") from None
    return Description(model, text.text_format(RunTokenizer.padding_side_of(model)), adapter)


def section(values: dict, name: str) -> dict:
    """Section `name` of a config's mapping ({} where it is absent), refused unless it is a mapping."""
    found = values.get(name)
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise ConfigError(f"{name} must be a mapping, got {short(found)}")
    return found
