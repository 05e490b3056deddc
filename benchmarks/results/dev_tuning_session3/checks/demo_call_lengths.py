"""Token lengths of the noisy team's demonstrations (world 0, 500 train questions, successful only), ad hoc.

    python benchmarks/results/dev_tuning_session3/checks/demo_call_lengths.py

Per (role, number of searches in the call): calls, median and max tokens, and how many exceed
768 and 1536 tokens (``max_seq_len`` before and after session 3). Per (role, action): the tokens
of one assistant output, and how many exceed 47 (the old ``max_new_tokens`` 48).
"""

import collections

import numpy as np

from agents.tokenizer import train_tokenizer
from envs.synthwiki.schema import template_texts
from envs.synthwiki.teams import NO_FACTS
from training.base_model import CHAT_ROLES, SFTConfig, demonstration_chats
from training.sft import encode_call

config = SFTConfig(demo_worlds=1, demo_questions=500, successful_only=True, vocab_size=8192)
rows = demonstration_chats(config, progress=False)
tokenizer = train_tokenizer([*template_texts(), NO_FACTS, *CHAT_ROLES], vocab_size=8192)
calls, outputs = collections.defaultdict(list), collections.defaultdict(list)
for row in rows:
    searches = sum(m["role"] == "assistant" and "<search>" in m["content"] for m in row["messages"])
    calls[(row["role"], searches)].append(len(encode_call(tokenizer, row["messages"], row["role"])))
    for message in row["messages"]:
        if message["role"] == "assistant":
            outputs[(row["role"], message["content"][:8])].append(len(tokenizer.encode(message["content"])))
print("calls: (role, searches) count median max over768 over1536")
for key, values in sorted(calls.items()):
    v = np.array(values)
    print(key, len(v), int(np.median(v)), int(v.max()), int((v > 768).sum()), int((v > 1536).sum()))
print("outputs: (role, action) count median p95 max over47")
for key, values in sorted(outputs.items()):
    v = np.array(values)
    print(key, len(v), int(np.median(v)), int(np.percentile(v, 95)), int(v.max()), int((v > 47).sum()))
