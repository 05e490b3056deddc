"""Does a tiny Qwen3 learn to copy names from LM on passages? Copy accuracy vs steps."""
import sys, time, random, torch
from agents.tokenizer import train_tokenizer
from agents.tiny_model import TinyModelConfig, build_tiny_model
from envs.synthwiki.schema import template_texts
from envs.synthwiki.teams import NO_FACTS
from envs.synthwiki.world import build_world, load_default_world
torch.manual_seed(0); random.seed(0)
layers, hidden, lr, steps, seqlen, bs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), 256, 16
tok = train_tokenizer([*template_texts(), NO_FACTS, "system", "user", "assistant"], vocab_size=8192)
texts = []
for seed in range(1, 9):
    w = build_world(seed, "small")
    texts += [f"{d.title}: {d.text}" for d in w.corpus.documents] if hasattr(w.corpus, "documents") else [f"{w.corpus[i].title}: {w.corpus[i].text}" for i in w.corpus.ids]
random.shuffle(texts)
stream = []
for t in texts: stream += tok.encode(t) + [tok.eos_token_id]
data = torch.tensor(stream[: len(stream) // seqlen * seqlen]).view(-1, seqlen)
print("tokens", len(stream), "seqs", data.shape, flush=True)
w0 = load_default_world(0, "small")
evals = []
for q in w0.splits["test"][:60]:
    d = w0.corpus[q.metadata["supporting_passages"][0]]
    ids = tok.encode(f"{d.title}: {d.text}"); name = tok.encode(" " + d.title)
    # positions of the 2nd+ occurrences of the name's pieces (excluding the first piece)
    mask = [0] * len(ids)
    for i in range(1, len(ids) - len(name) + 1):
        if ids[i:i + len(name)] == name:
            for j in range(i, i + len(name)): mask[j] = 1
    evals.append((torch.tensor([ids]), torch.tensor(mask, dtype=torch.bool)))
model = build_tiny_model(tok, TinyModelConfig(hidden_size=hidden, num_layers=layers, num_heads=4, head_dim=hidden // 4, intermediate_size=3 * hidden, initializer_range=0.02))
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
def copy_acc():
    model.eval(); hit = tot = 0
    with torch.no_grad():
        for ids, mask in evals:
            pred = model(ids).logits[0, :-1].argmax(-1); tgt = ids[0, 1:]; m = mask[1:]
            hit += (pred[m] == tgt[m]).sum().item(); tot += m.sum().item()
    model.train(); return hit / tot
t0 = time.time()
for step in range(steps):
    idx = torch.randint(0, data.shape[0], (bs,))
    x = data[idx]
    out = model(x, labels=x)
    opt.zero_grad(); out.loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
    if step % 200 == 0 or step == steps - 1:
        print(step, round(out.loss.item(), 3), "copy acc", round(copy_acc(), 3), round(time.time() - t0), "s", flush=True)
