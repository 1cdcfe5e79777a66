"""A run's settings, resolved once, in layers, each remembering where it came from.

The layers, lowest first: the command's own defaults, the recipe's, a checkpoint's (the model a run
continues, or the run it resumes), the options given. `recipe.pretraining_plan` and its siblings
build a run's plan; the CLI prints it, `run_config.json` stores its values with their `sources`,
and the Python API goes through the same functions, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

GIVEN = "given"
DEFAULT = "default"


@dataclass(frozen=True)
class Setting:
    value: object
    source: str  # "default", "recipe small-budget", "checkpoint DIR", "resumed run", "given"


class Plan:
    """Named settings. `layer(source, values)` puts each value that is not None on top of what is
    there; `unset` removes a setting that a later layer makes meaningless (a preset, once a
    checkpoint brings its own size)."""

    def __init__(self) -> None:
        self._settings: dict[str, Setting] = {}

    def layer(self, source: str, values: dict) -> Plan:
        for name, value in values.items():
            if value is not None:
                self._settings[name] = Setting(value, source)
        return self

    def unset(self, source: str, *names: str) -> Plan:
        for name in names:
            self._settings[name] = Setting(None, source)
        return self

    def __getitem__(self, name: str):
        return self._settings[name].value

    def __contains__(self, name: str) -> bool:
        return name in self._settings

    def get(self, name: str, default=None):
        setting = self._settings.get(name)
        return default if setting is None else setting.value

    def source(self, name: str) -> str:
        return self._settings[name].source

    def values(self) -> dict:
        return {name: s.value for name, s in self._settings.items()}

    def sources(self) -> dict[str, str]:
        """Each setting's source, for run_config.json."""
        return {name: s.source for name, s in self._settings.items()}

    def not_from(self, *sources: str) -> str:
        """The settings whose source is none of `sources`, grouped by source, for the settings line:
        e.g. "given: lr, warmup; from checkpoint run/model: positions" ("" when there are none)."""
        groups: dict[str, list[str]] = {}
        for name, setting in self._settings.items():
            if setting.source not in sources and setting.value is not None:
                groups.setdefault(setting.source, []).append(name)
        return "; ".join(f"{source if source == GIVEN else 'from ' + source}: {', '.join(names)}"
                         for source, names in groups.items())
