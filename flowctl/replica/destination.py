"""Where a replica lives: a `file://` folder (or a plain folder path) or an S3-compatible
URL, checked and spelled as Litestream takes it."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from flowctl.errors import UsageError

SCHEMES = ("file", "s3")


def replica_url(dest: str) -> str:
    """DEST as a Litestream replica URL: `file:///abs/folder` for a folder, an `s3://`
    URL as given (an S3-compatible server with `?endpoint=`, path-style by Litestream's
    default for one; credentials from the environment only, AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY, never in the URL)."""
    text = dest.strip()
    if not text:
        raise UsageError(
            "DEST is empty: give a folder (file:///srv/replica) or s3://bucket/path", field="dest"
        )
    parts = urlsplit(text)
    if "://" not in text:  # a plain folder path
        return Path(os.path.abspath(os.path.expanduser(text))).as_uri()
    if "@" in parts.netloc:  # not echoed: it may hold a secret
        raise UsageError(
            "DEST holds credentials (user:secret@); give them as AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY in the environment",
            field="dest",
        )
    if parts.scheme not in SCHEMES:
        raise UsageError(
            f"DEST {text!r}: unsupported scheme {parts.scheme!r}; give file:///folder or"
            " s3://bucket/path",
            field="dest",
        )
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise UsageError(
                f"DEST {text!r}: a file URL names an absolute folder, e.g. file:///srv/replica",
                field="dest",
            )
        return Path(parts.path).as_uri()
    if not parts.netloc:
        raise UsageError(f"DEST {text!r}: an s3 URL names a bucket: s3://bucket/path", field="dest")
    return text


def local_folder(url: str) -> Path | None:
    """The folder of a file:// replica URL; None for a remote one."""
    parts = urlsplit(url)
    return Path(parts.path) if parts.scheme == "file" else None
