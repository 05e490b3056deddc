"""Can a model copy an unseen entity name? The greedy Searcher's first action on dev sub-questions.

Gives the Searcher role prompt and one gold sub-question of the SynthWiki dev split as its task
(the dev split's entities never occur in training) and counts how often the greedy first output
repeats the task exactly inside ``<search>``. π_0 needs this skill in every role; see
docs/base_model.md.

    python benchmarks/searcher_copy_probe.py MODEL_DIR [--questions 100]
"""

from __future__ import annotations

import argparse
import json

import torch

from maopd.base.arguments import positive_int


def copy_rate(model_dir: str, count: int) -> dict:
    from maopd.agents.chat_tokens import prompt_ids
    from maopd.agents.tiny_model import load_model
    from maopd.envs.prompts import system_message, task_message
    from maopd.envs.synthwiki.world import load_default_world

    model, tokenizer = load_model(model_dir)
    world = load_default_world()
    tasks = [step["subquestion"] for q in world.splits["dev"] for wave in q.metadata["decomposition"] for step in wave]
    tasks = tasks[:count]
    copied, examples = 0, []
    for task in tasks:
        ids = torch.tensor([prompt_ids(tokenizer, [system_message("searcher"), task_message(task)])])
        with torch.no_grad():
            out = model.generate(
                ids, max_new_tokens=48, do_sample=False, eos_token_id=tokenizer.convert_tokens_to_ids("</search>")
            )
        text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        copied += text.startswith(f"<search>{task}</search>")
        examples.append({"task": task, "output": text})
    return {"model": model_dir, "tasks": len(tasks), "copy_rate": copied / len(tasks), "examples": examples[:5]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--questions", type=positive_int, default=100, help="dev sub-questions to probe")
    args = parser.parse_args()
    print(json.dumps(copy_rate(args.model_dir, args.questions), indent=1))


if __name__ == "__main__":
    main()
