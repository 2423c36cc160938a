"""An MCP server (stdio) whose first tools/list hangs, for the tools/list timeout test.

python tests/support/mcp_slow_list_server.py MARKER    # the first server to list its tools makes MARKER and hangs
"""

import sys
from pathlib import Path

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def list_tools(ctx, params):
    marker = Path(sys.argv[1])
    if not marker.exists():  # the first tools/list of any server started with this MARKER
        marker.touch()
        await anyio.sleep(600)
    return types.ListToolsResult(tools=[types.Tool(name="ping", input_schema={"type": "object"})])


async def main():
    server = Server("slow-list", on_list_tools=list_tools)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
