"""`flowctl workflows`: what the workflows folder holds, each YAML file checked in full.

Discovery (flowctl.runtime.targets.discover) reads only a YAML file's `name:` and
`description:`, which is all a lookup by name needs, so a file with a mistake further down
(or one that does not parse at all) would be listed as if it were fine. Listing loads each
YAML file through the validator too (YAML is parsed under the loader's guards; nothing is
run) and says which ones are broken, with their first problem. Python files stay read as
source, never imported: one that does not parse is warned about by discovery.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flowctl.errors import FlowctlError
from flowctl.runtime.targets import YAML_SUFFIXES, WorkflowEntry, discover


@dataclass(frozen=True)
class ListedWorkflow:
    """A workflow as `flowctl workflows` lists it; `problem` is set when it does not load."""

    entry: WorkflowEntry
    problem: str | None = None


def list_workflows_checked(workflows_dir: str | Path) -> list[ListedWorkflow]:
    """Every workflow in the folder by name, and every YAML file there that does not load
    (named by its file's stem when its `name:` cannot be read), with its first problem."""
    folder = Path(workflows_dir)
    listed: list[ListedWorkflow] = []
    seen: set[str] = set()
    for entry in discover(folder).values():
        if entry.kind == "yaml":
            seen.add(entry.source_path)
            listed.append(ListedWorkflow(entry, yaml_problem(entry.source_path)))
        else:
            listed.append(ListedWorkflow(entry))
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        resolved = str(path.resolve())
        if path.suffix not in YAML_SUFFIXES or resolved in seen or not path.is_file():
            continue
        problem = yaml_problem(resolved)  # discovery could not read its name
        if problem is not None:
            entry = WorkflowEntry(path.stem, "yaml", resolved, resolved)
            listed.append(ListedWorkflow(entry, problem))
    return sorted(listed, key=lambda w: (w.entry.name, w.entry.source_path))


def yaml_problem(path: str) -> str | None:
    """The first problem of a YAML workflow file (`line:col: ...`, then `(and N more)`),
    or None when it loads."""
    from flowctl.yamlflow import load_yaml_file

    try:
        load_yaml_file(path)
    except FlowctlError as e:
        return str(e).removeprefix(f"{path}:")
    return None
