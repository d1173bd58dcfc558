"""Draw encdec's import structure at a git revision: which package imports which, as a Mermaid graph and a
table, and the lines a reader reads along a declared path through the code.

    python scripts/import_structure.py                 # the working tree's HEAD
    python scripts/import_structure.py --rev babfa45   # as it was at a commit
    python scripts/import_structure.py --read t5       # also: the files a reader reads for T5, with lines
    python scripts/import_structure.py --inside interop  # the parts of one package and their imports

docs/architecture.md shows its output before and after the redesign of issue 57. It reads the sources from git
(`git ls-tree`, `git show`), so any revision can be drawn without checking it out; a package is encdec's
second level (encdec.models, encdec.interop/<family> counts as encdec.interop, and so on).
"""

import argparse
import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The files a reader reads to follow T5 from its config to a decoded token (greedy, eager), by role. A path
# missing at a revision is reported as such: the redesign moves files, and the list names them as they are now.
READING = {
    "t5": [
        "src/encdec/models/model_config.py",
        "src/encdec/models/config_specs.py",
        "src/encdec/models/components.py",
        "src/encdec/models/encoder_decoder.py",
        "src/encdec/models/stack.py",
        "src/encdec/models/encoder.py",
        "src/encdec/models/decoder.py",
        "src/encdec/modules/attention.py",
        "src/encdec/modules/attention_kinds/__init__.py",
        "src/encdec/modules/attention_kinds/kind.py",
        "src/encdec/modules/attention_kinds/masked.py",
        "src/encdec/modules/attention_kinds/positional.py",
        "src/encdec/modules/blocks.py",
        "src/encdec/modules/positions.py",
        "src/encdec/modules/feed_forward.py",
        "src/encdec/modules/norms.py",
        "src/encdec/modules/decode_state.py",
        "src/encdec/modules/layer_caches.py",
        "src/encdec/modules/kv_cache.py",
        "src/encdec/generation/generate.py",
        "src/encdec/generation/search.py",
    ]
}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def sources(rev: str) -> dict[str, str]:
    """Module name -> source text of every encdec module at `rev`."""
    found = {}
    for path in git("ls-tree", "-r", "--name-only", rev, "src/encdec").split():
        if path.endswith(".py"):
            parts = Path(path).relative_to("src").with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = git("show", f"{rev}:{path}")
    return found


def package_of(module: str, inside: str | None = None) -> str:
    """encdec.models.encoder_decoder -> encdec.models; encdec.errors -> encdec.errors; encdec -> encdec. Inside
    a package (`inside`, such as "interop"), one level deeper: encdec.interop.t5.t5_layout -> encdec.interop.t5."""
    depth = 3 if inside is not None and module.startswith(f"encdec.{inside}.") else 2
    return ".".join(module.split(".")[:depth])


def imported_modules(name: str, text: str, known: set[str]) -> set[str]:
    """The encdec modules `text` (module `name`) imports, relative imports resolved."""
    package = name.split(".")
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module in known}


def package_edges(rev: str, inside: str | None = None) -> tuple[Counter, Counter, Counter]:
    """(package -> package module-import counts, modules per package, lines per package) at `rev`; with
    `inside`, only the parts of that package and the imports among them."""
    texts = sources(rev)
    if inside is not None:
        texts = {name: text for name, text in texts.items() if name.startswith(f"encdec.{inside}.")}
    edges, modules, lines = Counter(), Counter(), Counter()
    for name, text in texts.items():
        source = package_of(name, inside)
        modules[source] += 1
        lines[source] += text.count("\n")
        for target in imported_modules(name, text, set(texts)):
            if package_of(target, inside) != source and package_of(target, inside) != "encdec":
                edges[source, package_of(target, inside)] += 1
    return edges, modules, lines


def short(package: str) -> str:
    return package.split(".")[-1] if package.count(".") > 1 else package.removeprefix("encdec.") or "encdec"


def markdown(rev: str, inside: str | None = None) -> str:
    edges, modules, lines = package_edges(rev, inside)
    out = [
        f"Import structure at `{git('rev-parse', '--short', rev).strip()}`: "
        f"{sum(modules.values())} modules, {sum(lines.values())} lines.",
        "",
        "```mermaid",
        "graph TD",
    ]
    for (source, target), count in sorted(edges.items()):
        out.append(f"  {short(source)} -->|{count}| {short(target)}")
    out += ["```", "", "| package | modules | lines | packages it imports (module imports) |", "|---|---|---|---|"]
    for package in sorted(modules):
        targets = ", ".join(f"{short(t)} ({c})" for (s, t), c in sorted(edges.items()) if s == package)
        out.append(f"| {short(package)} | {modules[package]} | {lines[package]} | {targets or '-'} |")
    return "\n".join(out)


def reading(rev: str, path_name: str) -> str:
    out, total = [f"Reading `{path_name}` at `{git('rev-parse', '--short', rev).strip()}`:", ""], 0
    present = set(git("ls-tree", "-r", "--name-only", rev, "src/encdec").split())
    for path in READING[path_name]:
        if path not in present:
            out.append(f"- {path}: not at this revision")
            continue
        count = git("show", f"{rev}:{path}").count("\n")
        total += count
        out.append(f"- {path}: {count} lines")
    out.append(f"\n{total} lines in all.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="a git revision (default: HEAD)")
    parser.add_argument("--inside", metavar="PACKAGE", help="draw the parts of one package (models, interop, ...)")
    parser.add_argument("--read", choices=sorted(READING), help="also list the files a reader reads, with lines")
    args = parser.parse_args(argv)
    try:
        git("rev-parse", "--verify", f"{args.rev}^{{commit}}")
    except subprocess.CalledProcessError:
        print(f"error: {args.rev!r} is not a revision of this repository", file=sys.stderr)
        return 2
    print(markdown(args.rev, args.inside))
    if args.read:
        print()
        print(reading(args.rev, args.read))
    return 0


if __name__ == "__main__":
    sys.exit(main())
