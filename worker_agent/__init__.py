"""The worker agent: agent spec, knowledge graphs, tools, LLM providers, strategies."""
