"""The agent's option sources: argparse flags from OPTIONS, and the TOML config file.

Flags keep the default None so meshhealth.agent.config.resolve_config can tell "not
given" from "given"; the defaults shown in `--help` (and in docs/configuration.md) come
from `show_default`. Reading the file is the only I/O of the configuration.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Mapping

from meshhealth.agent.config.agent_config import AgentConfig, ConfigError, resolve_config
from meshhealth.agent.config.options import OPTIONS, Option

CONFIG_ENV = "MESHHEALTH_CONFIG"


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags from OPTIONS. Defaults stay None so the resolver can tell 'not given'."""
    parser.add_argument("--config", metavar="FILE", help=f"TOML config file ({CONFIG_ENV})")
    for option in OPTIONS:
        help_text = f"{option.help} [{option.env}; default: {show_default(option)}]"
        if option.flag_only_bool:
            parser.add_argument(
                option.flag,
                dest=option.name,
                action="store_const",
                const="true",
                default=None,
                help=help_text,
            )
        elif option.repeatable:
            parser.add_argument(
                option.flag,
                dest=option.name,
                action="append",
                default=None,
                metavar=option.metavar,
                help=help_text,
            )
        else:
            parser.add_argument(
                option.flag, dest=option.name, default=None, metavar=option.metavar, help=help_text
            )


def show_default(option: Option) -> str:
    """The default as `--help` and docs/configuration.md show it."""
    if option.default_text is not None:
        return option.default_text
    if option.default is None or option.default == ():
        return "none"
    if isinstance(option.default, tuple):
        return ",".join(str(item) for item in option.default)
    if isinstance(option.default, bool):
        return "off"
    return str(option.default)


def load_agent_config(flags: Mapping[str, object], env: Mapping[str, str]) -> AgentConfig:
    """Flags + env + TOML file -> AgentConfig; raises ConfigError naming the source."""
    path = flags.get("config") or env.get(CONFIG_ENV)
    file_values: dict[str, object] = {}
    if path:
        file_values = read_config_file(str(path))
    return resolve_config(flags, env, file_values, file_name=f"config file {path}")


def read_config_file(path: str) -> dict[str, object]:
    """The TOML file's keys as option names; ConfigError for a missing or broken file."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    # TOML keys may use the flag spelling (interval, node-ip) or the field name.
    return {toml_key(key): value for key, value in raw.items()}


def toml_key(key: str) -> str:
    """A TOML key (`node-ip`, `interval`, `interval_s`) -> the option's name."""
    normal = key.replace("-", "_")
    for option in OPTIONS:
        if normal in (option.name, option.flag.removeprefix("--").replace("-", "_")):
            return option.name
    return normal
