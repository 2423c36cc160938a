"""An MCP server whose one tool takes 50 ms: a suite whose calls cost real time.

python benchmarks/slow_mcp_server.py PORT      # streamable HTTP on 127.0.0.1:PORT/mcp
"""

import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("slow")


@server.tool()
def lookup(key: str) -> dict:
    """The record stored under a key (after 50 ms, as a remote service would answer)."""
    time.sleep(0.05)
    return {"key": key, "value": len(key)}


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
