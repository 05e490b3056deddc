"""Start or join a Ray cluster without touching the home folder.

Locally, Ray's session files go under ``<run_dir>/ray`` and the cluster binds to 127.0.0.1.
Authentication (``RAY_AUTH_MODE``): Ray reads it when ``ray`` is first imported, so it cannot be
switched on here. A local cluster runs with it ``disabled`` unless the caller exported
``RAY_AUTH_MODE=token`` before starting Python; then the token must come from ``RAY_AUTH_TOKEN``
or ``RAY_AUTH_TOKEN_PATH`` (a file in the run directory, say), never from the default
``~/.ray/auth_token``, and a clear error says so. Joining an existing cluster (``address=...``)
uses the caller's Ray environment unchanged.

Ray's socket paths must fit in 107 bytes (AF_UNIX), and a session adds about 62 characters, so a
long run directory keeps Ray's session in a short ``/tmp/maopd-ray-*`` folder instead, which
``<run_dir>/ray_dir`` names (a run directory holds no links). Both folders are made by the one
writer (``maopd.base.atomic.output_directory``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from maopd.base.atomic import output_directory, write_text_atomically

MAX_RAY_DIR_CHARS = 40


def init_ray(run_dir: str | Path, address: str | None = None, num_cpus: int | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False)
        return
    ray_dir = _ray_dir(Path(run_dir).resolve())
    mode = os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if mode == "token" and not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        raise RuntimeError(
            "RAY_AUTH_MODE=token but neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set; Ray would "
            "write its token to ~/.ray. Export RAY_AUTH_TOKEN_PATH=<run_dir>/ray_token (with a token in it) "
            "before starting Python."
        )
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        _temp_dir=str(output_directory(ray_dir, library_links=True)),
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )


def _ray_dir(run_dir: Path) -> Path:
    """``run_dir/ray``, or a short folder named in ``run_dir/ray_dir`` when that is too long for sockets."""
    wanted = run_dir / "ray"
    if len(str(wanted)) <= MAX_RAY_DIR_CHARS:
        return wanted
    output_directory(run_dir)
    short = Path(tempfile.mkdtemp(prefix="maopd-ray-"))
    write_text_atomically(run_dir / "ray_dir", f"{short}\n")
    return short
