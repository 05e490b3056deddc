"""PettingZoo environments for multi-agent search, retrieval, and datasets."""
