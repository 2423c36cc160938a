"""An MCP server as a registered id, so that the command line can play it.

    envace-gym run examples/mcp_register.py:Bank/bank-v0 --agent oracle
    envace-gym compare examples/mcp_register.py:Bank/bank-v0 --agent knn

The CLI imports this file (``PATH.py:ID``), which registers ``Bank/bank-v0``: the bank server of
the tests over stdio, with two tasks. Put your own command and task file (JSONL, see
``envace_gym/suites/mcp/tasks.py``) in their place.
"""

import sys
from functools import partial
from pathlib import Path

import gymnasium as gym

from envace_gym import make_mcp_env

SERVER = [sys.executable, str(Path(__file__).parents[1] / "tests" / "support" / "mcp_server.py")]
TASKS = [
    {
        "id": "balance",
        "user": "What is the balance of account A-1?",
        "gold": [{"name": "get_balance", "arguments": {"account_id": "A-1"}}],
    },
    {"id": "accounts", "user": "Which accounts do I have?", "gold": [{"name": "list_accounts", "arguments": {}}]},
]

if "Bank/bank-v0" not in gym.registry:
    gym.register(
        "Bank/bank-v0", entry_point=partial(make_mcp_env, SERVER, TASKS, reward="tool_f1"), disable_env_checker=True
    )
