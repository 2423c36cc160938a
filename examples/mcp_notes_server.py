"""A complete MCP server, written against the `mcp` SDK 2.x, to copy when you wrap your own tools.

    python examples/mcp_notes_server.py          # speaks MCP over stdin and stdout
    make_mcp_env("examples/mcp_notes_server.py", tasks=[...])   # envace-gym starts it on its own interpreter

A notebook: each session of the server holds its own notes, so every episode starts empty. In
SDK 2.x the server class is ``mcp.server.mcpserver.MCPServer`` (1.x's ``FastMCP``); a tool is a
typed function, its docstring the description the agent sees, and ``ToolError`` sends the agent
your message (a plain exception reaches it as a generic error).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
notes: dict[int, dict] = {}


@server.tool()
def add_note(title: str, text: str) -> dict:
    """Write a note; returns its id."""
    note_id = len(notes) + 1
    notes[note_id] = {"id": note_id, "title": title, "text": text}
    return {"id": note_id}


@server.tool()
def list_notes() -> dict:
    """Every note's id and title."""
    return {"notes": [{"id": n["id"], "title": n["title"]} for n in notes.values()]}


@server.tool()
def read_note(note_id: int) -> dict:
    """One note, whole."""
    if note_id not in notes:
        raise ToolError(f"no note {note_id}")
    return notes[note_id]


@server.tool()
def delete_note(note_id: int) -> dict:
    """Delete a note."""
    if notes.pop(note_id, None) is None:
        raise ToolError(f"no note {note_id}")
    return {"deleted": note_id}


if __name__ == "__main__":
    server.run()  # stdio; server.run("streamable-http", host="127.0.0.1", port=8000) serves HTTP instead
