"""The core every layer above builds on: a suite's tasks, tools, worlds and grader (``suite``, ``tools``,
``grader``), an episode's record (``episode``), the messages of a conversation (``messages``), bounded
execution of a call (``response``, ``limits``), structured errors (``errors``) and world state (``state``).
It imports nothing of the package above it."""
