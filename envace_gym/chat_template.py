"""A tool-aware ChatML template (``<tool_call>`` and ``<tool_response>`` blocks).

Given to models whose own template has no tools (SmolLM2) and to the tiny test
model. Tool responses are user turns wrapped in ``<tool_response>``, so an inline
rehearsal is the text between ``<tool_response>\\n`` and ``\\n</tool_response>``.
"""

#: The chat template with tool calls and tool messages, for tokenizers without one.
TOOL_CHAT_TEMPLATE = """\
{%- set system = messages[0].content if messages and messages[0].role == 'system' else '' -%}
{%- if tools -%}
<|im_start|>system
{{ system }}

# Tools
You may call one or more functions. Their signatures:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Call a function by writing
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif system -%}
<|im_start|>system
{{ system }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ message.role }}
{% if message.content %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
{% if not loop.first or message.content %}
{% endif %}<tool_call>
{{ {"name": call.function.name, "arguments": call.function.arguments} | tojson }}
</tool_call>
{%- endfor %}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""
