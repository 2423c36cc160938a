"""The options the commands share, and commands whose options are a config dataclass's fields.

:func:`config_command` gives a command one option per field (``--FIELD-NAME``), with the field's
help (``metadata["help"]``, :func:`envace_gym.config_fields.setting`) and default, read when the app is
built. A field typer cannot take as it is (a dict) or that the command line gives otherwise (another
name, a default of its own, a text that becomes a list) is declared once, as a :class:`Given`.
"""

from __future__ import annotations

import inspect
import json
import types
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Annotated, Any, Optional, Union, get_args, get_origin, get_type_hints

import typer

from envace_gym.env_settings import EnvSettings

#: The env of a command given none.
DEFAULT_ENV = "EnvACE/tau2-retail-v0"


def given_env(argument: str | None, option: str | None) -> str:
    """A command's env as given, as ENV_ID or ``--env`` (:data:`DEFAULT_ENV` without either)."""
    if argument and option and argument != option:
        raise ValueError(f"two envs given: {argument!r} and --env {option!r}")
    return option or argument or DEFAULT_ENV


def parse_pairs(pairs: list[str] | None) -> dict:
    """``KEY=VALUE`` options as a dict; each value is JSON where it parses (``8``, ``0.5``,
    ``true``, ``[1, 2]``), else the text itself."""
    out = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Given:
    """How the command line gives a config field when not as the field itself."""

    to_field: Callable[[Any], Any] = _same  # the option's value -> the field's
    to_option: Callable[[Any], Any] = _same  # the field's default -> the option's
    type: Any = None  # the option's type (None: the field's, as :func:`option_type` makes it)
    decls: tuple[str, ...] = ()  # the option's names (default: --FIELD-NAME)
    default: Any = inspect.Parameter.empty  # the option's default, for a field without one (empty: required)


PAIRS = Given(parse_pairs, lambda _: None, Optional[list[str]])  # a dict field: repeated KEY=VALUE options
ALL_IS_NONE = Given(lambda split: None if split == "all" else split)  # a split field: 'all' is every task (None)
COMMAS = Given(lambda text: text.split(","), ",".join, str)  # a list field given as one comma-separated text


def option_type(hint: Any) -> Any:
    """The type typer parses a field's option as: the field's own, or a union's first type that
    typer knows (Optional when None is in the union)."""
    if get_origin(hint) not in (Union, types.UnionType):
        return hint
    args = get_args(hint)
    first = next(a for a in args if a in (str, int, float, bool) or get_origin(a) is list)
    return Optional[first] if type(None) in args else first


def _given(cls: type, declared: Mapping[str, Given | None]) -> dict[str, Given | None]:
    """Each field's :class:`Given`: the declared one (None: not an option, the command gives it),
    :data:`PAIRS` for a dict, else the field as it is."""
    hints = get_type_hints(cls)
    return {
        f.name: declared[f.name] if f.name in declared else PAIRS if hints[f.name] is dict else Given()
        for f in fields(cls)
    }


def config_params(cls: type, declared: Mapping[str, Given | None]) -> list[inspect.Parameter]:
    """One keyword parameter, annotated as a typer option, per field of the dataclass ``cls``."""
    hints, given = get_type_hints(cls), _given(cls, declared)
    params = []
    for f in fields(cls):
        how = given[f.name]
        if how is None:
            continue
        if f.default is not MISSING:
            default = how.to_option(f.default)
        elif f.default_factory is not MISSING:
            default = how.to_option(f.default_factory())
        else:
            default = how.default
        option = typer.Option(*how.decls, help=f.metadata.get("help"))
        params.append(
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=Annotated[how.type or option_type(hints[f.name]), option],
            )
        )
    return params


def config_from(cls: type, values: dict, declared: Mapping[str, Given | None]):
    """The ``cls`` config of a command's option values (and the fields the command gives itself)."""
    given = _given(cls, declared)
    return cls(**{name: (given[name] or Given()).to_field(value) for name, value in values.items()})


def config_command(
    body: Callable,
    cls: type,
    declared: Mapping[str, Given | None],
    first: tuple[inspect.Parameter, ...] = (),
    last: tuple[inspect.Parameter, ...] = (),
) -> Callable:
    """``body`` as a typer command with the options of ``cls``'s fields (:func:`config_params`, built
    now) between the parameters ``first`` and ``last``; ``body`` is called with a dict of the fields'
    option values (for :func:`config_from`) and the other parameters by name."""
    own = {p.name for p in (*first, *last)}

    def command(**values):
        return body({k: v for k, v in values.items() if k not in own}, **{k: values[k] for k in own})

    command.__name__, command.__doc__ = body.__name__, body.__doc__
    # inspect reads __signature__ from any object; typeshed's functions do not declare it
    command.__signature__ = inspect.Signature([*first, *config_params(cls, declared), *last])  # type: ignore[attr-defined]
    return command


def field_option(cls: type, name: str) -> Any:
    """The annotated option of ``cls``'s field ``name``, for a command that shares it without the config."""
    return next(p.annotation for p in config_params(cls, {}) if p.name == name)


def field_help(cls: type, name: str) -> str:
    """The help of ``cls``'s field ``name``."""
    return next(f.metadata["help"] for f in fields(cls) if f.name == name)


def param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    """A parameter of a :func:`config_command` besides the config's fields."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


# the options that commands without a config share with run: its env, as ENV_ID or --env, and its split
ENV_ARG = Annotated[Optional[str], typer.Argument(help=field_help(EnvSettings, "env_id"), show_default=False)]
ENV_OPT = Annotated[Optional[str], typer.Option("--env", help="The env, as ENV_ID.", show_default=DEFAULT_ENV)]
SPLIT = field_option(EnvSettings, "split")
