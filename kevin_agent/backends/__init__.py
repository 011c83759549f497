"""Model backends: where responses come from.

``vllm`` runs the model in this process (the default, needs a GPU), ``openai`` talks to any
OpenAI-compatible server, ``scripted`` replays a JSONL of hand-written responses. They are
registered, like a plugin's backends, through the ``register_backends`` hook
(``kevin_agent.registry.builtin``); each module is imported only when its backend is built.
"""
