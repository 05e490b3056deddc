"""``maopd sft``: build the base model π_0 (see ``maopd.training.base_model``) from a seed and config."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    sft = subparsers.add_parser(
        "sft",
        help="build the base model π_0: fine-tune a tiny Qwen3 on noisy scripted-team demonstrations",
        description=(
            "Build π_0 reproducibly from an SFTConfig: defaults, then --smoke, then --config FILE, "
            "then key=value overrides (e.g. seed=1 epochs=2). Without --out the model is cached "
            "under a hash of the config and its directory is printed."
        ),
    )
    sft.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="SFTConfig field overrides")
    sft.add_argument("--config", help="SFTConfig YAML file")
    sft.add_argument("--smoke", action="store_true", help="start from the tiny smoke config (builds in seconds)")
    sft.add_argument("--out", help="write the model here (a new or empty directory) instead of the cache")
    sft.add_argument("--cache-dir", help="cache root (default: $MAOPD_CACHE/base_models)")
    sft.add_argument(
        "--from-scratch",
        action="store_true",
        help="pretrain even when a shipped or cached π_0 ran the same pretraining (which is otherwise reused)",
    )
    sft.set_defaults(func=_sft)


def resolve_config(path: str | None, overrides: list[str], smoke: bool):
    """The ``SFTConfig`` of defaults (or the smoke config), then the YAML file, then overrides."""
    from maopd.base.config import ConfigError, apply_overrides, from_dict, parse_yaml_file, to_dict
    from maopd.training.base_model import SMOKE_CONFIG, SFTConfig

    data = to_dict(SMOKE_CONFIG if smoke else SFTConfig())
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist")
        loaded = parse_yaml_file(file) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file} must hold a mapping at the top level")
        from_dict(SFTConfig, loaded)  # names the bad field of the file itself
        data.update(loaded)
    return from_dict(SFTConfig, apply_overrides(data, overrides))


def _sft(args) -> int:
    from maopd.base.errors import UserError
    from maopd.training.base_model import SHIPPED_DIR, build_base_model, default_cache_dir, load_or_build_base_model

    try:
        config = resolve_config(args.config, args.overrides, args.smoke)
    except ValueError as exc:  # ConfigError included
        raise UserError(str(exc)) from None
    if args.out is not None:
        out = Path(args.out)
        if out.exists() and any(out.iterdir()):
            raise UserError(f"--out {out} exists and is not empty; give a new or empty directory")
        cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
        reuse, keep = ((), None) if args.from_scratch else ((SHIPPED_DIR, cache), cache)
        directory = build_base_model(config, out, reuse_from=reuse, keep_pretraining_in=keep)
    else:
        directory = load_or_build_base_model(config, args.cache_dir, reuse=not args.from_scratch)
    print(f"π_0 (config {config.key()}) is in {directory}")
    return 0
