"""asyncai_agent: the reference agent (``python -m asyncai_agent``, docs/agent.md).

Where things are:

- ``orchestrator``: the reactor; input and notices in, reply routing, idle/shutdown.
- ``runtime``: one thread, one active run, coalescing by the library's :class:`asyncai_watch.Turns`.
- ``messages``: how a Notice becomes the model's ``<watch-event>`` message; escaping; NO_REPLY.
- ``agent``: one run (model rounds and ``run_code`` calls); ``codemode``: the ``run_code`` scope.
- ``backends``: ``openai:``, ``anthropic:``, ``scripted:``; ``prompt``: the system prompt.
- ``session``: the wiring (servers, WatchManager, code mode, orchestrator); ``cli``, ``demo``.
- ``transcript``: the ``--session`` JSONL; ``events``: what the others observe.
- ``channels``: switchboard doorbells (``claude/channel``) as channel notices.
"""
