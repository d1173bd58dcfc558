"""The package's layers (docs/architecture.md): no import circle among its modules, nothing lower importing
anything higher, and a model loaded and run for inference without the training loop or its metrics."""

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
FIXTURE_RUN = Path(__file__).resolve().parent / "fixtures" / "checkpoint_2ba69c1" / "run"

# bottom to top: a module may import its own package and anything in a lower layer
LAYERS = [
    {"encdec.errors", "encdec.lazy_names"},
    {"encdec.safe_paths", "encdec.sizing", "encdec.schema", "encdec.cpu_features"},
    {"encdec.modules", "encdec.tokenizers", "encdec.audio"},
    {"encdec.generation", "encdec.data", "encdec.quantization"},
    {"encdec.models"},
    {"encdec.interop", "encdec.evaluation"},
    {"encdec.runs"},
    {"encdec.training", "encdec.inspection", "encdec.transcription"},
    {"encdec.serving"},
    {"encdec.cli"},
    {"encdec", "encdec.__main__"},
]


def module_names() -> dict[str, Path]:
    names = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top or inside a function: `import a.b.c` and
    `from a.b import c` also import the packages a and a.b (a module's own ancestors left out)."""
    names = module_names()
    graph = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        imported = set()
        for target in targets:
            parts = target.split(".")
            imported.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {t for t in imported if t in names and t != name and t not in ancestors}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(name: str) -> int:
    """The layer of a module: that of the layer entry it is or lies in (the root package "encdec" is only
    itself: a new package must be placed)."""
    rank = None
    for i, members in enumerate(LAYERS):
        for member in members:
            if name == member or (member != "encdec" and name.startswith(member + ".")):
                rank = i
    assert rank is not None, f"{name} belongs to no layer; add its package to LAYERS and docs/architecture.md"
    return rank


def owner(name: str) -> str:
    """The package a module belongs to, for the layer rule: encdec.X for encdec.X.Y.Z."""
    return ".".join(name.split(".")[:2])


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_nothing_imports_a_higher_layer_or_a_neighbour_of_its_own():
    wrong = []
    for name, imported in import_graph().items():
        for target in imported:
            same_package = owner(target) == owner(name)
            if layer_of(target) > layer_of(name) or (layer_of(target) == layer_of(name) and not same_package):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def family_folder(name: str) -> str | None:
    """The Hugging Face family folder a module lies in (encdec.interop.<folder>), None outside one."""
    parts = name.split(".")
    is_folder = (
        len(parts) >= 3 and parts[:2] == ["encdec", "interop"] and (SRC / "encdec" / "interop" / parts[2]).is_dir()
    )
    return parts[2] if is_folder else None


def test_a_family_is_known_through_the_registry_alone():
    """docs/architecture.md's family folders: only the registry (interop.families) imports a family folder; a
    folder reads another only through its shared layout module (t5_layout, bart_layout, ...), never its family."""
    wrong = []
    for name, imported in import_graph().items():
        for target in imported:
            folder = family_folder(target)
            if folder is None or folder == family_folder(name) or name == "encdec.interop.families":
                continue
            if any(t.startswith(target + ".") and t.endswith("_layout") for t in imported):  # its package, on the way
                continue
            if family_folder(name) is None or not target.endswith("_layout"):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_no_two_modules_share_a_basename_but_init():
    """A module's name says what it holds: metrics.py or memory.py in two folders would mean two things."""
    folders: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        if path.name != "__init__.py":
            folders.setdefault(path.name, []).append(str(path.parent.relative_to(SRC)))
    assert {name: where for name, where in folders.items() if len(where) > 1} == {}


def test_a_detected_circle_is_reported():
    """The checker itself: a planted circle a -> b -> c -> a and a self-contained d are told apart."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_loading_a_run_and_generating_leaves_training_its_objectives_and_metrics_unimported():
    code = f"""
import sys, torch, encdec
model = encdec.from_pretrained({str(FIXTURE_RUN)!r})
tokenizer = encdec.load_tokenizer({str(FIXTURE_RUN)!r})
ids = torch.tensor(tokenizer.encode(["A dog runs."], add_eos=True))
model.generate(ids, max_new_tokens=4, num_beams=2)
higher = ("encdec.training", "encdec.data.objectives")  # the loop, its config and the objectives it reads
loaded = sorted(m for m in sys.modules if m.startswith(higher) or m in ("rouge_score", "sacrebleu"))
print(",".join(loaded) or "none")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


def test_the_server_and_the_maps_read_declared_capabilities_not_a_model_s_insides():
    """serving/ and inspection/ learn what a model offers from its declared `capabilities` and its named parts
    (`attention_layers`), never by probing it with getattr / hasattr or reaching into its blocks, so a new
    family declares what it offers in one place."""
    import dataclasses

    from encdec.generation.interface import Capabilities

    probed = {f.name for f in dataclasses.fields(Capabilities)} | {"capabilities", "generation_defaults", "config"}
    found = []
    for folder in ("serving", "inspection"):
        for path in sorted((SRC / "encdec" / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                where = f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr"):
                    name = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
                    if node.func.id == "hasattr" or name in probed:
                        found.append(f"{where} {node.func.id}({name!r})")
                if isinstance(node, ast.Attribute) and node.attr == "blocks":
                    found.append(f"{where} .blocks")
    assert found == []


GENERATE_MODULES = ("encdec", "encdec.generation", "encdec.generation.generate")  # where `generate` is imported from


def test_text_is_encoded_generated_and_decoded_by_the_one_text_generator():
    """`encdec generate`, `encdec evaluate` (and the trainer's generating evaluation, through
    evaluation.generated) and the server reach text generation through generation.text_generator alone: none of
    them imports `generate` itself, and nothing else in the package decodes generated rows (`batch_decode`)
    or encodes in a language (`encode_in`)."""
    graph = import_graph()
    callers = (
        "encdec.cli.generate_text",
        "encdec.evaluation.generated",
        "encdec.serving.validate",
        "encdec.serving.app",
    )
    assert [name for name in callers if "encdec.generation.text_generator" not in graph[name]] == []
    text_paths = {"cli/generate_text.py", "cli/evaluate.py", "evaluation/generated.py", "serving/app.py"}
    text_paths |= {"serving/validate.py", "serving/token_stream.py", "training/samples.py"}
    found = []
    for path in sorted((SRC / "encdec").rglob("*.py")):
        where = str(path.relative_to(SRC / "encdec"))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and where in text_paths and node.module in GENERATE_MODULES:
                found += [f"{where}: imports generate" for alias in node.names if alias.name == "generate"]
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in ("batch_decode", "encode_in") and where != "generation/text_generator.py":
                    found.append(f"{where}:{node.lineno} calls {name}")
    assert found == []
