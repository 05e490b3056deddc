"""raw_env's render, observe and last before reset: one RuntimeError saying to reset first."""

import pytest

from maopd.envs.hierarchical_search_v1 import raw_env


@pytest.mark.parametrize("method, args", [("render", ()), ("observe", ("leader",)), ("last", ())])
def test_a_call_before_reset_says_to_reset_first(method, args):
    env = raw_env(render_mode="ansi")
    with pytest.raises(RuntimeError, match=rf"raw_env\.{method}\(\) before reset\(\): call reset\(\) first"):
        getattr(env, method)(*args)
    env.reset(seed=0)
    getattr(env, method)(*args)
