"""The search environments in the frameworks LLM-RL researchers train with.

============================================  ===========================================  =========
module                                        what                                         extra
============================================  ===========================================  =========
``maopd.agents.integrations.role_session``    one model call of one role, driven action    (core)
                                              by action, the other roles played by a
                                              ``Policy``: the core of the two below
``maopd.agents.integrations.trl_env``         TRL ``GRPOTrainer(environment_factory=…)``   ``trl``
                                              classes: Searcher, Answerer, Leader, solver
``maopd.agents.integrations.openenv_server``  an OpenEnv server (reset/step/state over      ``openenv``
                                              HTTP and WebSocket, the action kinds as MCP
                                              tools) of the team and single-role
                                              environments
``maopd.agents.integrations.gem_env``         GEM ``MultiAgentEnv`` of the team            ``gem``
                                              environments
============================================  ===========================================  =========

Nothing here is imported by the rest of the library, and this package imports none of the
optional packages: ``openenv_server`` and ``gem_env`` import theirs when they are imported, and say
which extra to install when it is missing (``pip install -e '.[openenv]'``). docs/environments.md
shows each in use.
"""
