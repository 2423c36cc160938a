"""An MCP server (stdio) that misbehaves on purpose, for the error-message tests.

python tests/support/mcp_odd_server.py [DEPTH]    # DEPTH: nest the `deep` tool's schema that many objects deep
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("odd")


@server.tool()
def garble(x: str) -> dict:
    """Writes a line that is not UTF-8 (nor JSON-RPC) to stdout, then answers."""
    sys.stdout.buffer.write(b"\xff\xfe not utf-8\n")
    sys.stdout.buffer.flush()
    return {"x": x}


@server.tool()
def deep(x: str) -> dict:
    """A tool whose schema can nest deep."""
    return {"x": x}


if __name__ == "__main__" and len(sys.argv) > 1:
    schema = {"type": "string"}
    for _ in range(int(sys.argv[1])):
        schema = {"type": "object", "properties": {"a": schema}}
    server._tool_manager.get_tool("deep").parameters = {"type": "object", "properties": {"x": schema}}
if __name__ == "__main__":
    server.run()
