"""Your own MCP server as a Gymnasium env: a command (stdio) or a URL (streamable HTTP).

    python examples/mcp_env.py                               # the notes server beside it
    python examples/mcp_env.py "python my_server.py"         # yours (then write your own tasks)
    python examples/mcp_env.py http://127.0.0.1:8000/mcp

Tasks are a list or a JSONL file (envace_gym/suites/mcp/tasks.py has the format); with gold
calls they are scored by ``tool_f1``, ``call_match`` or ``actions``, and the oracle can play them.
"""

import sys
from pathlib import Path

from envace_gym import agents, make_mcp_env

server = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("mcp_notes_server.py"))
tasks = [
    {
        "id": "write",
        "user": "Please note that the review moved to Friday.",
        "gold": [{"name": "add_note", "arguments": {"title": "review", "text": "moved to Friday"}}],
    }
]
env = make_mcp_env(server, tasks, dynamics="real", reward="tool_f1")  # or dynamics="rehearsed", "shadow", ...
oracle = agents.load("oracle", env=env)
obs, info = env.reset(seed=0)
print("tools:", [t["function"]["name"] for t in obs["tools"]])
done = False
while not done:
    obs, reward, terminated, truncated, info = env.step(oracle.act(obs))
    done = terminated or truncated
print("last response:", obs["messages"][-2]["content"], "| reward:", reward, info["reward_source"])
env.close()  # the server process ends with the env
