"""A small stateful MCP server for the tests: a bank with accounts and transfers.

    python tests/support/mcp_server.py                  # stdio
    python tests/support/mcp_server.py --http PORT      # streamable HTTP on 127.0.0.1:PORT/mcp

``make_server()`` is the same server as an in-process object. Its state lives in one
:class:`Bank` whose methods are the tools, so a deep copy of the server copies the accounts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field


class Amount(BaseModel):
    value: float = Field(gt=0)
    currency: str = Field(pattern="^[A-Z]{3}$")


class Transfer(BaseModel):
    source: str
    target: str
    amount: Amount  # a nested model: the input schema carries $defs and $ref


class Balance(BaseModel):
    account_id: str
    balance: float


class Bank:
    """Accounts and transfers. Tools answer structured content, plain text, JSON text or errors."""

    def __init__(self):
        self.accounts = {"A-1": {"owner": "ana", "balance": 100.0}, "B-2": {"owner": "bo", "balance": 20.0}}
        self.transfers: list[dict] = []

    def list_accounts(self) -> dict:
        """Every account and its owner."""
        return {"accounts": [{"account_id": k, "owner": v["owner"]} for k, v in self.accounts.items()]}

    def get_balance(self, account_id: str) -> Balance:
        """The balance of one account (structured content)."""
        if account_id not in self.accounts:
            raise ToolError(f"no account {account_id}")
        return Balance(account_id=account_id, balance=self.accounts[account_id]["balance"])

    def transfer(self, request: Transfer) -> dict:
        """Move money between two accounts."""
        source, target = self.accounts.get(request.source), self.accounts.get(request.target)
        if source is None or target is None:
            raise ToolError("unknown account")
        if source["balance"] < request.amount.value:
            raise ToolError(f"insufficient funds in {request.source}")
        source["balance"] -= request.amount.value
        target["balance"] += request.amount.value
        self.transfers.append(
            {
                "id": len(self.transfers) + 1,
                "source": request.source,
                "target": request.target,
                "value": request.amount.value,
            }
        )
        return {"transfer_id": len(self.transfers), "status": "done"}

    def statement(self, account_id: str) -> str:
        """A plain-text statement (not JSON)."""
        lines = [
            f"{t['id']}: {t['source']} -> {t['target']} {t['value']}"
            for t in self.transfers
            if account_id in (t["source"], t["target"])
        ]
        return f"Statement of {account_id}: " + ("; ".join(lines) or "no transfers")

    def summary(self) -> str:
        """Totals as JSON text."""
        return json.dumps({"accounts": len(self.accounts), "transfers": len(self.transfers)})

    def reference(self) -> str:
        """A fresh random reference: the one tool that is not deterministic."""
        return uuid.uuid4().hex

    def server_pid(self) -> dict:
        """The server's process id (the tests check no server outlives its env)."""
        return {"pid": os.getpid()}

    def spawn_orphan(self) -> dict:
        """Start a sleeping grandchild in a session of its own (out of the guard's process group); its pid,
        for the test to kill should the guard miss it."""
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return {"pid": child.pid}

    async def wait(self, seconds: float) -> dict:
        """Sleep, then answer (the tests' slow tool). A coroutine, so that a call timeout cancels it in process
        too: a synchronous tool runs in a worker thread that nothing can cancel (docs/project/known-gaps.md)."""
        await anyio.sleep(seconds)
        return {"slept": seconds}

    def freeze(self) -> dict:
        """Answer with a JSON-RPC protocol error instead of a result."""
        raise MCPError(-32603, "the ledger is frozen")

    def boom(self) -> dict:
        """Raise a plain exception (the SDK logs its traceback on the server's stderr)."""
        raise ValueError("the vault door is stuck")

    def crash(self) -> dict:
        """End the server process at once."""
        os._exit(3)


TEXT_TOOLS = ("statement", "summary", "reference")  # answered as text only, no structured content


def make_server(bank: Bank | None = None) -> MCPServer:
    """The server, its tools acting on ``bank`` (a new one by default)."""
    bank = Bank() if bank is None else bank
    server = MCPServer("bank")
    for name in (
        "list_accounts",
        "get_balance",
        "transfer",
        "statement",
        "summary",
        "reference",
        "server_pid",
        "spawn_orphan",
        "wait",
        "freeze",
        "boom",
        "crash",
    ):
        server.tool(structured_output=False if name in TEXT_TOOLS else None)(getattr(bank, name))
    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port instead of stdio")
    args = parser.parse_args()
    if args.http:
        make_server().run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        make_server().run()
