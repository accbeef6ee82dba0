"""A click group whose subcommands are imported only when one of them is invoked."""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    """Subcommands given as name -> "module:attribute".

    `mbds backend` and `mbds controller` start the services; importing every other
    command (the benchmarks, plotting, rich's progress bars) would slow their start and
    make the service images need the benchmarks' extras.
    """

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attr = self.lazy[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
        return command
