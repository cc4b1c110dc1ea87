"""A chat template for a tokenizer whose prompts are plain text: the bundled tiny model's.

It renders what vigor writes without a chat template, so that libraries which need one
(TRL's ``GRPOTrainer(environment_factory=...)``, ``apply_chat_template(tools=...)``) get the
same text: the tool list (vigor_cli/episodes/tools.py's ``PLAIN_TOOLS``, a line per tool),
system and user contents joined by blank lines, an assistant turn's text with each tool call
as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and the end-of-sequence
token, a tool result as ``<tool_response>...</tool_response>``; the generation prompt adds
nothing. It opens with :data:`PLAIN_MARK`: vigor's tasks then render their prompts as plain
text exactly as before (vigor_cli/tasks/prompts.has_chat_template). :data:`RESPONSE_TEMPLATE`
is its parser for ``tokenizer.parse_response`` (transformers' response templates).
"""

PLAIN_MARK = "{#- vigor: plain-text prompts #}"
"""The first line of a chat template vigor's tasks do not render prompts with."""

PLAIN_CHAT_TEMPLATE = PLAIN_MARK + (
    "{%- if tools %}"
    "{{- 'Tools (call one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>):\\n' }}"
    "{%- for tool in tools %}"
    "{%- set f = tool.function if tool.function is defined else tool %}"
    "{%- set props = f.parameters.properties if f.parameters is defined and f.parameters.properties is defined else {} %}"
    "{{- f.name ~ '(' }}"
    "{%- for name, p in props.items() %}{{- name ~ ': ' ~ (p.type if p.type is defined else 'any') }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}"
    "{{- ')' }}{%- if f.description %}{{- ': ' ~ f.description }}{%- endif %}{{- '\\n' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{{- m.content if m.content is string else '' }}"
    "{%- for call in (m.tool_calls or []) %}"
    "{%- set f = call.function if call.function is defined else call %}"
    "{{- '<tool_call>' ~ ({'name': f.name, 'arguments': f.arguments} | tojson) ~ '</tool_call>' }}"
    "{%- endfor %}"
    "{{- eos_token }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<tool_response>\\n' ~ m.content ~ '\\n</tool_response>\\n' }}"
    "{%- else %}"
    "{%- if not loop.first and messages[loop.index0 - 1].role in ('system', 'user') %}{{- '\\n\\n' }}{%- endif %}"
    "{{- m.content }}"
    "{%- endif %}"
    "{%- endfor %}"
)
"""The template (module docstring)."""

RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor_pattern": r"\Z",  # nothing opens a turn: the model's text starts where the prompt ends
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}
"""How a model turn written in this format parses (``tokenizer.parse_response``)."""


def is_plain(template: object) -> bool:
    """A chat template that marks its tokenizer's prompts as plain text."""
    return isinstance(template, str) and template.startswith(PLAIN_MARK)
