"""The roles of the built-in workflows: the paper's Leader, Searcher and Answerer, and the single
agent's Solver of the Search-R1-style baseline. Registered in this order, which gives their ids.

The prompts name each action tag by its opening tag only and never write a complete tag or an
``<information>`` block: a parser reading the whole chat (a regex over every message, a user's own
tag matcher) would otherwise take an example in the system prompt for an action or a passage.
"""

from __future__ import annotations

from maopd.envs.team import Role, register_role

LEADER_ROLE = register_role(
    Role(
        name="leader",
        prompt="You are the Leader of a search team. Break the question into simple subtasks and delegate "
        "them to Searchers in waves: write the subtasks, one per line, inside a <delegate> tag and close "
        "the tag. Use facts from earlier reports to write later subtasks. When the reports suffice, hand "
        "them to the Answerer: write the report numbers, or the word all, inside a <select> tag and close "
        "the tag.",
        actions=("delegate", "select"),
        last_turn_notice="This is your last turn: <select> the reports for the Answerer now.",
        menu="maopd.envs.option.menus:leader_menu",
    )
)
SEARCHER_ROLE = register_role(
    Role(
        name="searcher",
        prompt="You are a Searcher. Find the facts your task asks for. To search, write your query inside a "
        "<search> tag and close the tag; the results appear in an information block. When you know the "
        "facts, write a short report of them inside a <report> tag and close the tag.",
        actions=("search", "report"),
        last_turn_notice="This is your last turn: write your <report> now.",
        menu="maopd.envs.option.menus:searcher_menu",
    )
)
ANSWERER_ROLE = register_role(
    Role(
        name="answerer",
        prompt="You are the Answerer. Answer the question using the reports. Write only the answer, as a short "
        "phrase, inside an <answer> tag and close the tag.",
        actions=("answer",),
        candidates=True,
        menu="maopd.envs.option.menus:answerer_menu",
    )
)
# Search-R1's instruction, in our tags.
SOLVER_ROLE = register_role(
    Role(
        name="solver",
        prompt="Answer the question. To search, write your query inside a <search> tag and close the tag; the "
        "results appear in an information block. When you know the answer, write only the answer, as a "
        "short phrase, inside an <answer> tag and close the tag.",
        actions=("search", "answer"),
        last_turn_notice="This is your last turn: write your <answer> now.",
    )
)
# The roles of the paper's teams (cascade and hierarchy). The option mode's observation names these
# three (another role's one-hot is all zeros) and the credit-assignment benchmark is about them only.
TEAM_ROLES = (LEADER_ROLE.name, SEARCHER_ROLE.name, ANSWERER_ROLE.name)
# Every built-in role, in registration order; roles a user registers come after them.
ROLES = (*TEAM_ROLES, SOLVER_ROLE.name)
