"""Role prompts, the action grammar, and policies (scripted and LLM)."""
