"""`flowctl keys`: make a key file, rotate a database to a new key (issue 42)."""

from __future__ import annotations

from typing import Annotated

import typer

from flowctl.cli.common import _emit_json, _Group, _state

keys_app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Encryption keys: values are sealed with FLOWCTL_KEY_FILE (or key_file in"
    " flowctl.toml).  Example: flowctl keys new ~/.config/flowctl/key"
    "  Example: flowctl keys rotate ~/.config/flowctl/key2",
)


@keys_app.command("new")
def new(
    path: Annotated[str, typer.Argument(metavar="PATH", help="The key file to write (mode 0600).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print {path, key_id} as JSON.")] = False,
) -> None:
    """Write a new random 256-bit key to PATH (mode 0600), never over an existing file.

    Example: flowctl keys new ~/.config/flowctl/key
    """
    from flowctl.crypto.keyfile import new_key_file

    key = new_key_file(path)
    if as_json:
        _emit_json({"path": key.path, "key_id": key.kid})
        return
    typer.echo(f"wrote key {key.kid} to {key.path} (mode 0600)")
    typer.echo(f"use it: export FLOWCTL_KEY_FILE={key.path}  (or key_file in flowctl.toml)")


@keys_app.command("rotate")
def rotate(
    ctx: typer.Context,
    new_path: Annotated[str, typer.Argument(metavar="NEW_PATH", help="The new key file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print what was done as JSON.")] = False,
) -> None:
    """Re-seal every value with the key in NEW_PATH, in batches, while daemons run; run
    again to resume. Without a key configured, encrypts a database written in clear.

    Example: FLOWCTL_KEY_FILE=old.key flowctl keys rotate new.key
    """
    from flowctl.crypto.cipher import Keyring
    from flowctl.crypto.keyfile import read_key
    from flowctl.ops.keys import rotate as rotate_keys

    st = _state(ctx)
    key = read_key(new_path)
    if st.keys is None:  # a database in clear: sealed with the new key from the start
        st.use_keys(Keyring([key]))
    store = st.open_store(create=False)
    done = rotate_keys(store, key, st.clock)
    if as_json:
        _emit_json({"key_id": done.kid, "resealed": done.resealed, "passes": done.passes})
        return
    typer.echo(f"re-sealed {done.resealed} values with key {done.kid} ({done.passes} passes)")
    typer.echo(f"now set FLOWCTL_KEY_FILE={key.path}; the old key is no longer needed")
