"""What submit() sends: the spec as text, `path=value` overrides, base_dir.

traind parses the text itself, with the loader trainctl uses, so a spec means
the same from every client (docs/spec.md). Here the spec is read only to find
the data files it names, which submit() may upload (local_data_files).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import yaml

SpecLike = Union[str, bytes, "os.PathLike[str]", Mapping[str, Any]]
SetLike = Union[Mapping[str, Any], Iterable[str], None]

_SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def spec_text(spec: SpecLike) -> str:
    """The text to send for `spec`.

    - a dict (any Mapping): dumped as JSON;
    - an os.PathLike, or a one-line str naming an existing file (or ending in
      .yaml/.yml/.json): the file's text (FileNotFoundError when missing);
    - any other str or bytes: the spec's YAML or JSON text itself.
    """
    if isinstance(spec, Mapping):
        return json.dumps(spec, ensure_ascii=False)
    if isinstance(spec, bytes):
        return spec.decode("utf-8")
    if isinstance(spec, os.PathLike):
        return _read(os.fspath(spec))
    if isinstance(spec, str):
        if "\n" not in spec and (os.path.isfile(spec) or spec.endswith(_SPEC_SUFFIXES)):
            return _read(spec)
        return spec
    raise TypeError(f"spec: expected a path, YAML/JSON text or a dict, not {type(spec).__name__}")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def override_value(value: Any) -> str:
    """A Python value as the YAML text of an override.

    JSON is YAML, so strings stay strings ("42" is not the number 42), lists
    and dicts become flow sequences and mappings, and None clears the field.
    """
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def overrides(set: SetLike = None, name: Optional[str] = None,
              priority: Optional[int] = None) -> List[str]:
    """`path=value` strings, applied by traind in order (trainctl's --set).

    `set` is either a dict {path: Python value} (e.g. {"training.epochs": 10,
    "metrics.val": ["loss", "accuracy"]}) or trainctl's text form, a list of
    "path=value" strings whose values are YAML ("model.layers[0].dense.units=32").
    `name` and `priority` come last, so they win.
    """
    out: List[str] = []
    if isinstance(set, Mapping):
        for path, value in set.items():
            out.append(f"{path}={override_value(value)}")
    elif isinstance(set, str):
        raise TypeError('set: expected a dict or a list of "path=value" strings, not a str')
    elif set is not None:
        for item in set:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(f'set: expected "path=value", got {item!r}')
            out.append(item)
    if name is not None:
        out.append(f"name={override_value(str(name))}")
    if priority is not None:
        out.append(f"priority={int(priority)}")
    return out


def base_dir(given: Optional["os.PathLike[str] | str"]) -> str:
    """The absolute directory relative data paths are resolved against.

    Default: the current directory, as trainctl does (so `submit(
    "examples/iris-cv.yaml")` from the source tree means what `trainctl submit
    examples/iris-cv.yaml` does, and relative paths behave like open()'s).
    """
    return os.path.abspath(os.fspath(given) if given is not None else os.getcwd())


def submission(spec: SpecLike, set: SetLike = None, name: Optional[str] = None,
               priority: Optional[int] = None,
               base_dir_: Optional["os.PathLike[str] | str"] = None) -> Tuple[str, List[str], str]:
    return spec_text(spec), overrides(set, name, priority), base_dir(base_dir_)


# The spec's file fields, and the dataset field that takes each one's place.
DATA_FILE_FIELDS = (("data.path", "data.dataset"),
                    ("cross_validation.validation_path", "cross_validation.validation_dataset"))


def _snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), name.strip())


def _field(tree: Any, path: str) -> Any:
    """The value at dotted snake_case `path` in a parsed spec whose keys may
    be snake_case or lowerCamelCase; None when absent."""
    for part in path.split("."):
        if not isinstance(tree, Mapping):
            return None
        tree = next((v for k, v in tree.items() if isinstance(k, str) and _snake(k) == part),
                    None)
    return tree


def local_data_files(spec: SpecLike, text: str, overrides_: Iterable[str]) -> Dict[str, str]:
    """The file fields of the spec, after the overrides, that name a file and
    no dataset: {"data.path": "examples/data/iris.csv", ...}, as written (a
    relative path is relative to the submit's base_dir). A spec this cannot
    read gives {} (traind reports what is wrong with it)."""
    if isinstance(spec, Mapping):
        tree: Any = spec
    else:
        try:
            tree = yaml.safe_load(text)
        except yaml.YAMLError:
            return {}
    values = {f: _field(tree, f) for pair in DATA_FILE_FIELDS for f in pair}
    for item in overrides_:
        path, _, value = item.partition("=")
        path = ".".join(_snake(p) for p in path.split("."))
        try:
            parsed = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            parsed = value
        for field in values:
            if field == path:
                values[field] = parsed
            elif field.startswith(path + "."):  # a whole message replaced
                values[field] = _field(parsed, field[len(path) + 1:])
    out = {}
    for path_field, dataset_field in DATA_FILE_FIELDS:
        path = values[path_field]
        if isinstance(path, str) and path and not values[dataset_field]:
            out[path_field] = path
    return out
