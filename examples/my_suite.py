"""A complete minimal suite: a help desk whose agent looks tickets up and closes them.

A suite lists its tasks and implements two methods, ``tools`` and ``new_world``. Everything
else has a default: a system prompt, the scripted user (it says the task's ``user``
messages), and a grader of the tasks' ``gold`` calls, which gives the oracle, the ``actions``
and ``actions_share`` rewards and the ``world`` reward (the gold-call match, unless the
grader checks the world, as this one's does).

    envace-gym run --env examples/my_suite.py:MyOrg/helpdesk-v0 --agent oracle --dynamics rehearsed
    envace-gym run --env examples/my_suite.py:MyOrg/helpdesk-v0 --dynamics simulated --simulator knn

or in Python, after ``import my_suite``: ``gym.make("MyOrg/helpdesk-v0", dynamics="shadow")``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property

import envace_gym
from envace_gym import Grader, Suite, Task, ToolSet, World

# closed: the tools are Python methods, so an argument their schema does not name is refused
TOOLS = ToolSet(
    [
        {
            "type": "function",
            "function": {
                "name": "find_tickets",
                "description": "The open tickets of a customer.",
                "parameters": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "close_ticket",
                "description": "Close a ticket.",
                "parameters": {
                    "type": "object",
                    "properties": {"ticket_id": {"type": "integer"}},
                    "required": ["ticket_id"],
                },
            },
        },
    ],
    closed=True,
)
TICKETS = {
    1: {"email": "ana@example.com", "subject": "Printer jam", "status": "open"},
    2: {"email": "ana@example.com", "subject": "VPN down", "status": "open"},
    3: {"email": "bo@example.com", "subject": "New laptop", "status": "open"},
}


@dataclass
class HelpDesk(World):
    """A call runs the method of the tool's name; what it returns is the response, and an
    exception it raises answers the ``execution_error`` code. It forks by deep copy."""

    tickets: dict

    def find_tickets(self, email: str) -> list:
        return [
            {"ticket_id": i, "subject": t["subject"]}
            for i, t in self.tickets.items()
            if t["email"] == email and t["status"] == "open"
        ]

    def close_ticket(self, ticket_id: int) -> dict:
        if self.tickets[ticket_id]["status"] == "closed":  # an unknown id raises KeyError
            raise ValueError(f"ticket {ticket_id} is already closed")
        self.tickets[ticket_id]["status"] = "closed"
        return {"ticket_id": ticket_id, "status": "closed"}


class HelpDeskGrader(Grader):
    """Optional: the default grader, with a real evaluator that checks the world the episode changed."""

    def evaluate(self, task: Task, world: HelpDesk, episode) -> tuple[float, dict]:
        closed = sorted(i for i, t in world.tickets.items() if t["status"] == "closed")
        wanted = sorted(c["arguments"]["ticket_id"] for c in self.gold_calls(task) if c["name"] == "close_ticket")
        return float(closed == wanted), {"closed": closed, "wanted": wanted}


class HelpDeskSuite(Suite):
    name = "helpdesk"
    tasks = [
        Task(
            "vpn",
            user="I'm ana@example.com. My VPN works again: please close that ticket.",
            gold=[
                {"name": "find_tickets", "arguments": {"email": "ana@example.com"}},
                {"name": "close_ticket", "arguments": {"ticket_id": 2}},
            ],
        ),
        Task(
            "laptop",
            user=[
                "Please close the laptop ticket of bo@example.com.",  # then one follow-up
                "Thanks. Does ana@example.com still have open tickets?",
            ],
            gold=[
                {"name": "find_tickets", "arguments": {"email": "bo@example.com"}},
                {"name": "close_ticket", "arguments": {"ticket_id": 3}},
                {"name": "find_tickets", "arguments": {"email": "ana@example.com"}},
            ],
        ),
    ]
    grader = cached_property(HelpDeskGrader)  # optional: HelpDeskGrader(suite), made once

    def tools(self, task: Task) -> ToolSet:
        return TOOLS

    def new_world(self, task: Task) -> HelpDesk:
        return HelpDesk(copy.deepcopy(TICKETS))


envace_gym.register_suite("MyOrg/helpdesk-v0", HelpDeskSuite(), max_turns=10)
