"""Overrides checked before Hydra sees them, so that a typo gets a suggestion instead of Hydra's
"Key 'trails' is not in struct" or "Could not load 'domain/retial'": an unknown option of a config
group lists the group's options (the domains, for `domain=`), an unknown key names the closest key
at its place (difflib). Overrides this check cannot judge (sweeps of a multirun, `+key` additions,
deletions, hydra.*) are left to Hydra, whose own errors still apply.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from handoff.errors import ConfigError, did_you_mean


def groups(conf_dir: Path) -> dict[str, list[str]]:
    """Each config group of conf/ (hydra's own excluded) and its options."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(conf_dir.iterdir())
            if d.is_dir() and d.name != "hydra"}


def _choices(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def group_problems(parsed: list, options: dict[str, list[str]]) -> list[str]:
    """`group=option` overrides naming an option the group does not have."""
    problems = []
    for o in parsed:
        if o.key_or_group in options and not o.is_delete() and not o.is_sweep_override():
            known = options[o.key_or_group]
            for choice in _choices(o.value()):
                if choice not in known:
                    problems.append(f"{o.key_or_group}: no option {choice!r}{did_you_mean(choice, known)}; "
                                    f"the options: {', '.join(known)} (conf/{o.key_or_group}/)")
    return problems


def key_problem(cfg: DictConfig, key: str) -> str | None:
    """Why `key` (a dotted path) is not in the composed config, or None when it is."""
    node, walked = cfg, []
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            return None  # a list index or a value's inside: Hydra and the validation judge it
        if part not in node:
            where = ".".join(walked)
            return (f"{key}: no such key{' under ' + where if where else ''}"
                    f"{did_you_mean(part, list(node.keys()))}; add a new key with +{key}=...")
        node, walked = node[part], [*walked, part]
    return None


def check_overrides(overrides: list[str], conf_dir: Path, compose) -> None:
    """ConfigError listing every unknown group option and key of `overrides`; `compose(overrides)`
    composes the config with the group choices (the keys depend on them)."""
    from handoff.sweep.run import parse_overrides

    parsed = parse_overrides(overrides)
    options = groups(conf_dir)
    problems = group_problems(parsed, options)
    if problems:
        raise ConfigError.of("overrides", problems)
    plain = [o for o in parsed if not o.is_sweep_override() and not o.is_delete() and not o.is_add()
             and not o.is_force_add() and o.key_or_group not in options and not o.key_or_group.startswith("hydra")
             and o.package is None]
    if not plain:
        return
    cfg = compose([o.input_line for o in parsed if o.key_or_group in options and not o.is_sweep_override()])
    problems = [p for p in (key_problem(cfg, o.key_or_group) for o in plain) if p]
    if problems:
        raise ConfigError.of("overrides", problems)


def conf_note(conf_dir: Path, cwd: Path) -> str | None:
    """The line saying which conf/ a sweep reads, when it is not the current directory's."""
    here = cwd / "conf"
    if here.resolve() == conf_dir.resolve():
        return None
    unused = "; ./conf here is not read" if here.is_dir() else ""
    return f"handoff sweep: reading the config from {conf_dir} (handoff's own, not the current directory's){unused}"


def print_conf_note(conf_dir: Path) -> None:
    note = conf_note(conf_dir, Path.cwd())
    if note:
        print(note, file=sys.stderr, flush=True)
