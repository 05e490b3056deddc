"""SynthWiki: a procedurally generated multi-hop QA world, the embedded default (see docs/synthwiki.md)."""

from maopd.envs.synthwiki.world import SIZES, World, build_world, load_default_world, write_world

__all__ = ["SIZES", "World", "build_world", "load_default_world", "write_world"]
