"""`aiayn <command>`: a thin command line; every command calls a library function.

Each command is a pair of functions: `_add_<name>(subparsers)` declares its arguments and
`_run_<name>(args)` calls the library. `_build_parser` lists the commands in one place.
"""

from __future__ import annotations

import argparse
import json
import sys

from aiayn.errors import AiaynError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need'."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # One line per command, in the order `aiayn --help` shows them.
    _add_info(sub)
    return parser


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print a model's hyperparameters and parameter count")
    p.add_argument("config", metavar="PRESET_OR_CONFIG", help="a preset name or a YAML file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--vocab-size", type=int, help="vocabulary size (default: the config's)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(run=_run_info)


def _run_info(args: argparse.Namespace) -> int:
    from aiayn.info import model_info

    overrides = list(args.overrides)
    if args.vocab_size is not None:
        overrides.append(f"model.vocab_size={args.vocab_size}")
    info = model_info(args.config, overrides)
    if args.json:
        print(json.dumps(info))
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(f"{key:<{width}}  {value:,}" if key == "params" else f"{key:<{width}}  {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args, extra = parser.parse_known_args(argv)
    # `key=value` overrides may follow options (`aiayn info big --json d_ff=1024`), which
    # argparse leaves over; anything else left over is an error as usual.
    unknown = [a for a in extra if "=" not in a or a.startswith("-")]
    if unknown or (extra and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unknown or extra)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    try:
        return int(args.run(args) or 0)
    except AiaynError as err:
        print(f"aiayn {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
