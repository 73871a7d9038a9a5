"""What the commands of the command line share, `xover` (cli.py) and `xover cluster` (cli_cluster.py) alike:
the options the callback sets for every command, and how an expected failure ends one. Its own module: cli.py
registers cli_cluster's commands as it loads, so cli_cluster cannot import cli.py."""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any

import typer
from sqlalchemy.exc import DBAPIError
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from .console import print_error, print_notice
from .errors import Interrupted, TimedOut, XoverError, printable
from .redact import mask_word
from .store.session import database_url, store_failed


def _placeholders_as_given(command: TyperCommand | TyperGroup, ctx: Any) -> None:
    """A flag takes no value, so its help shows none: typer's rich help gives every option its type's
    placeholder (`--json <bool>`), a flag's too, unless the option has a metavar of its own. An option given
    once per value (`--script a.py --script b.py`) shows one value's placeholder, not `<list[str]>`, and so
    does an argument that takes several (`recipes...`)."""
    for param in command.get_params(ctx):  # --help itself included
        if isinstance(param, TyperArgument) and param.nargs == -1:  # `recipes...` says there are several
            each = re.sub(r"^<list\[(.*)\]>$", r"<\1>", param.display_type(ctx))
            param.display_type_rich = functools.partial(_one_value, each)  # type: ignore[method-assign]
            continue
        if not isinstance(param, TyperOption) or param.metavar is not None:
            continue
        if param.is_flag or param.count:
            param.metavar = ""
        elif param.multiple:
            param.metavar = re.sub(r"^<list\[(.*)\]>$", r"<\1>", param.display_type(ctx))


def _one_value(each: str, ctx: Any = None) -> str:
    """The placeholder of an argument that takes several values, for one of them (typer asks with `ctx=`)."""
    return each


def _refuse_empty_values(command: TyperCommand | TyperGroup, ctx: Any) -> None:
    """An option given an empty value on the command line (`-H ""`, `--corun-with ""`, `--script ""`) is refused:
    each read it as not given (`-H "$HOSTS"` with HOSTS unset ran on this machine; `--corun-with ""` measured no
    interference, silently). Empty values in the environment (XOVER_DB=) stay unset, as click reads them."""
    for param in command.get_params(ctx):
        if not isinstance(param, TyperOption) or param.is_flag or param.name is None:
            continue
        if getattr(ctx.get_parameter_source(param.name), "name", None) != "COMMANDLINE":
            continue
        value = ctx.params.get(param.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        empty = next((v for v in values if isinstance(v, str) and not v.strip()), None)
        if empty is not None:
            print_error(f"{max(param.opts, key=len)} {empty!r}: an empty value; give one, or leave the option out")
            raise typer.Exit(2)


def _refusing_repeats(parser: Any, ctx: Any) -> Any:
    """`parser` (click's, for the command or group of `ctx`) made to refuse an option that takes one value given
    more than once (`--profiles A.csv --profiles B.csv`, `--db X --db Y`, `--json --json`, `--gpu --no-gpu`): click
    keeps the last without a word, and a user who repeats one meant both or made a mistake. An option meant to
    repeat (`--script`, `--group`: a list) or to be counted is given as often as wanted; -h/--help and --version
    are left to show what they show. Refused as the words are read, before any option's value is checked or used
    (`ctx.resilient_parsing`, the shell's completion, excepted). The hook is click's parser: each option's
    `process` is told of every time it is given (click 8's `_OptionParser`; tests/unit/test_cli_repeats.py)."""
    if ctx.resilient_parsing:
        return parser
    given: dict[Any, list[tuple[str, Any]]] = {}
    for option in {id(option): option for option in [*parser._long_opt.values(), *parser._short_opt.values()]}.values():
        param = option.obj
        if param.multiple or param.count or param.name in ("help", "version"):
            continue
        spelt = max(option._long_opts or option._short_opts, key=len)
        option.process = functools.partial(_count_each, option.process, given, param, spelt)
    return parser


def _count_each(
    process: Any, given: dict[Any, list[tuple[str, Any]]], param: Any, spelt: str, value: Any, state: Any
) -> None:
    """One time an option is given: refused if it was given before (_refusing_repeats), else read as click reads it."""
    times = given.setdefault(param, [])
    times.append((spelt, value))
    if len(times) > 1:
        print_error(_repeated(param, times))
        raise typer.Exit(2)
    process(value, state)


def _repeated(param: Any, times: list[tuple[str, Any]]) -> str:
    """What was given twice, in words: the values a value's option was given, or the flags."""
    name = max(param.opts, key=len)
    if param.is_flag:
        spellings = list(dict.fromkeys(spelt for spelt, _ in times))
        if len(spellings) > 1:  # --gpu and --no-gpu
            return f"{' and '.join(spellings)} were both given; give one of them, once"
        return f"{name} was given twice; give it once"
    values = ", ".join(_shown(value) for _, value in times)
    return f"{name} was given twice ({values}); it takes one value: give it once"


def _shown(value: Any) -> str:
    """An option's value as the refusal of a repeat shows it: one line, a password masked, a long one cut."""
    if isinstance(value, (list, tuple)):  # an option of several values at once (nargs > 1)
        return " ".join(_shown(each) for each in value)
    if not isinstance(value, str):
        return "(no value)"
    text = printable(mask_word(value))
    return text if len(text) <= 200 else f"{text[:197]}..."  # a path whole; 5,000 digits not


class Command(TyperCommand):
    """A command whose help shows no value after a flag (_placeholders_as_given), and that refuses an option's
    empty value (_refuse_empty_values) and a single-valued option given twice (_refusing_repeats)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # typer's own click's Context and HelpFormatter
        """Typer's help, each flag without a placeholder."""
        _placeholders_as_given(self, ctx)
        super().format_help(ctx, formatter)

    def make_parser(self, ctx: Any) -> Any:
        """Click's parser, refusing a single-valued option given twice (_refusing_repeats)."""
        return _refusing_repeats(super().make_parser(ctx), ctx)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Typer's parse, then no option given an empty value; what follows `--` is kept (State)."""
        State.after_double_dash = list(args[args.index("--") + 1 :]) if "--" in args else None
        rest = super().parse_args(ctx, args)
        _refuse_empty_values(self, ctx)
        return rest


class Group(TyperGroup):
    """A group of commands whose help shows no value after a flag (_placeholders_as_given), and that refuses
    an option's empty value (_refuse_empty_values) and a single-valued option given twice (_refusing_repeats):
    the group's own, given before its command (`xover --db X --db Y run`)."""

    def make_parser(self, ctx: Any) -> Any:
        """Click's parser, refusing a single-valued option given twice (_refusing_repeats)."""
        return _refusing_repeats(super().make_parser(ctx), ctx)

    def format_help(self, ctx: Any, formatter: Any) -> None:  # typer's own click's Context and HelpFormatter
        """Typer's help, each flag without a placeholder."""
        _placeholders_as_given(self, ctx)
        super().format_help(ctx, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Typer's parse, then no option given an empty value."""
        rest = super().parse_args(ctx, args)
        _refuse_empty_values(self, ctx)
        return rest


# `-h` is `--help` on every command (no command has a -h of its own; -H is --hosts)
HELP_OPTIONS = ["-h", "--help"]


class App(typer.Typer):
    """xover's Typer apps: a Group whose commands are Commands, so no help, of any command, shows a value
    after a flag; `-h` or `--help` shows a command's help."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(
            cls=Group, context_settings=_with_help_options(settings.pop("context_settings", None)), **settings
        )

    def command(self, *names: Any, cls: type[TyperCommand] | None = None, **settings: Any) -> Any:
        """`Typer.command`, making a Command unless told another class."""
        context = _with_help_options(settings.pop("context_settings", None))
        return super().command(*names, cls=cls or Command, context_settings=context, **settings)


def _with_help_options(context: dict[str, Any] | None) -> dict[str, Any]:
    """A command's context settings, -h among its help options (a command's own, not only its group's: a
    command made alone, as the tests make them, has them too)."""
    return {"help_option_names": HELP_OPTIONS, **(context or {})}


class State:
    """Options every command shares, set by the callback before the command runs."""

    db: str | None = None
    # the words after the command's `--` (None: it had none), as the command was given them: sys.argv is not
    # the command line under CliRunner or `app([...])`
    after_double_dash: list[str] | None = None


def fail(error: XoverError) -> None:
    """Print a one-line error and leave with its exit code (2 for bad input), never a traceback."""
    print_error(str(error))
    raise typer.Exit(error.exit_code)


RUNS_INTERRUPTED = "every process was stopped; unfinished runs are marked interrupted"


@contextlib.contextmanager
def user_errors(interrupted: str = RUNS_INTERRUPTED):
    """Expected failures become one line and exit 2; Ctrl-C (after clean-up) exits 130, saying what it left
    (`interrupted`, or the words of the Interrupted raised: a command that starts no process has none to
    stop); --timeout 124."""
    try:
        yield
    except XoverError as error:
        fail(error)
    except DBAPIError as error:  # the store refused a read or a write part-way: a read-only file, a full disk
        fail(store_failed(database_url(State.db, create_folder=False), error.orig))
    except (Interrupted, KeyboardInterrupt) as stop:
        left = (str(stop) if isinstance(stop, Interrupted) else "") or interrupted
        print_notice(f"interrupted{': ' if left else ''}{left}")
        raise typer.Exit(130) from None
    except TimedOut as stop:
        left = str(stop) or "every process was stopped and unfinished runs are marked timeout"
        print_notice(f"timeout: the run went past --timeout; {left}")
        raise typer.Exit(124) from None
