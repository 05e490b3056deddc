"""PettingZoo's own conformance tests on every environment (AEC, parallel, seeding)."""

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, render_test, seed_test

from maopd.envs.workflows import WORKFLOW_MODULES, env_module

# every registered workflow's module: a workflow added to the table is tested here with no edit
MODULES = [env_module(workflow) for workflow in WORKFLOW_MODULES]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_api(module):
    api_test(module.env(), num_cycles=200)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_api_with_answer_candidates(module):
    api_test(module.env(num_candidates=5), num_cycles=100)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_seed(module):
    seed_test(module.env, num_cycles=100)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_render(module, capsys):
    render_test(module.env)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_parallel_api(module):
    parallel_api_test(module.parallel_env(), num_cycles=100)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_parallel_seed(module):
    parallel_seed_test(module.parallel_env, num_cycles=100)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_generic_aec_to_parallel_is_refused_and_the_native_parallel_env_is_used(module):
    """Only the scheduled agents act in a step, which PettingZoo's converter cannot express."""
    from pettingzoo.utils.conversions import aec_to_parallel

    from maopd.envs.parallel import SearchParallelEnv

    assert module.raw_env.metadata["is_parallelizable"] is False
    with pytest.raises(AssertionError):
        aec_to_parallel(module.raw_env())
    assert isinstance(module.parallel_env(), SearchParallelEnv)
