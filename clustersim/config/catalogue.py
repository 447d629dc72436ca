"""Find hardware, model and engine profiles by name among the built-in data files."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from pydantic import ValidationError

from clustersim.config.loader import check_unknown_keys, format_validation_error, read_yaml_mapping
from clustersim.config.profiles import EngineProfile, HardwareProfile, ModelProfile
from clustersim.errors import ConfigError, did_you_mean

ProfileT = TypeVar("ProfileT", HardwareProfile, ModelProfile, EngineProfile)
AnyProfile = HardwareProfile | ModelProfile | EngineProfile

_KINDS: dict[str, tuple[str, type[AnyProfile]]] = {
    "hardware": ("gpus", HardwareProfile),
    "model": ("models", ModelProfile),
    "engine": ("engines", EngineProfile),
}


def builtin_data_dir(name: str) -> Path:
    """The directory of built-in data ``name`` (``hardware_profiles`` or ``scenarios``).

    Installed wheels carry it under ``clustersim/_data``; a source checkout has it at the top level.
    """
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "_data" / name, package_dir.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"clustersim's built-in '{name}' folder is missing from the installation")


def load_profile_file(path: Path, model_cls: type[ProfileT]) -> ProfileT:
    """Load one profile YAML file, reporting problems as ``file: field: problem``.

    A file read before and unchanged since (same size and modification time) is not parsed again:
    a sweep plans thousands of runs against the same few dozen profiles, and a profile is frozen.
    """
    try:
        stat = path.stat()
    except OSError:
        return _parse_profile(path, model_cls)  # reports the file's problem
    return cast(ProfileT, _parsed_profile(str(path.resolve()), stat.st_mtime_ns, stat.st_size, model_cls))


@functools.lru_cache(maxsize=512)
def _parsed_profile(path: str, mtime_ns: int, size: int, model_cls: type[AnyProfile]) -> AnyProfile:
    del mtime_ns, size  # part of the key only
    return _parse_profile(Path(path), model_cls)  # type: ignore[type-var]


def _parse_profile(path: Path, model_cls: type[ProfileT]) -> ProfileT:
    raw = read_yaml_mapping(path)
    check_unknown_keys(raw, model_cls, str(path))  # names the field, with the allowed ones
    try:
        return model_cls.model_validate(raw)
    except ValidationError as exc:
        raise format_validation_error(exc, str(path), model_cls) from None


@dataclass(frozen=True)
class Catalogue:
    """All profiles in a ``hardware_profiles`` folder, looked up by name or alias (any case)."""

    root: Path
    base_dir: Path | None = None  # where profile file names in a scenario resolve (the scenario's folder)

    @classmethod
    def builtin(cls) -> Catalogue:
        return cls(builtin_data_dir("hardware_profiles"))

    def names(self, kind: str) -> list[str]:
        """Canonical names of every profile of ``kind`` (hardware, model or engine)."""
        return [p.name for p in self._all(kind)]

    def _all(self, kind: str) -> list[AnyProfile]:
        folder, model_cls = _KINDS[kind]
        return [load_profile_file(p, model_cls) for p in sorted((self.root / folder).glob("*.yaml"))]  # type: ignore[type-var]

    def find(self, kind: str, name: str) -> AnyProfile | None:
        """The profile of ``kind`` named ``name`` (or with it as an alias, any case), None if there is none.
        A profile file that does not load is an error, not a missing profile."""
        wanted = name.lower()
        for profile in self._all(kind):
            if wanted in (k.lower() for k in (profile.name, *profile.aliases)):
                return profile
        return None

    def _find(self, kind: str, name: str, scenario_source: str, field_path: str) -> AnyProfile:
        if name.endswith((".yaml", ".yml")):  # a profile file of the user's, relative to the scenario's folder
            path = Path(name) if self.base_dir is None else self.base_dir / name
            if not path.is_file():
                raise ConfigError(scenario_source, field_path, f"no such {kind} profile file {path}")
            return load_profile_file(path, _KINDS[kind][1])  # type: ignore[type-var]
        found = self.find(kind, name)
        if found is not None:
            return found
        profiles = self._all(kind)
        known = [p.name for p in profiles]
        all_keys = known + [a for p in profiles for a in p.aliases]
        raise ConfigError(
            scenario_source,
            field_path,
            f"unknown {kind} '{name}'{did_you_mean(name, all_keys)}; known: {', '.join(known)}",
        )

    def hardware(self, name: str, source: str = "scenario", field_path: str = "cluster.hardware") -> HardwareProfile:
        found = self._find("hardware", name, source, field_path)
        assert isinstance(found, HardwareProfile)
        return found

    def model(self, name: str, source: str = "scenario", field_path: str = "cluster.model") -> ModelProfile:
        found = self._find("model", name, source, field_path)
        assert isinstance(found, ModelProfile)
        return found

    def engine(self, name: str, source: str = "scenario", field_path: str = "cluster.engine") -> EngineProfile:
        found = self._find("engine", name, source, field_path)
        assert isinstance(found, EngineProfile)
        return found
