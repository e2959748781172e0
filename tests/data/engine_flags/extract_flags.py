"""Long option names an engine's argument parser defines, read from its source without importing it:
every literal "--name" string, plus (SGLang) the dataclass fields registered through Arg(...) or a bare
help string, named "--" + field with "-" for "_" unless Arg(cli_name=...) says otherwise, and their aliases."""

import ast
import pathlib
import re
import sys


def literal_flags(text):
    return set(re.findall(r'"(--[a-z0-9][a-z0-9-]*)"', text))


def field_flags(tree):
    out = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = node.annotation
        if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) in ("A", "Annotated")):
            continue
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else []
        if len(elts) < 2:
            continue
        meta = elts[1]
        name = "--" + node.target.id.replace("_", "-")
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            out.add(name)
        elif isinstance(meta, ast.Call) and getattr(meta.func, "id", None) == "Arg":
            kw = {k.arg: k.value for k in meta.keywords}
            if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
                continue
            if isinstance(kw.get("cli_name"), ast.Constant):
                name = kw["cli_name"].value
            out.add(name)
            if isinstance(kw.get("aliases"), ast.List):
                out |= {e.value for e in kw["aliases"].elts if isinstance(e, ast.Constant)}
    return out


flags = set()
for path in sys.argv[1:]:
    text = pathlib.Path(path).read_text()
    flags |= literal_flags(text) | field_flags(ast.parse(text))
print("\n".join(sorted(flags)))
