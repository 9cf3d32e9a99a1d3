"""Built-in chat templates, for model files that carry none (kept apart from
:mod:`.chat_template`, whose Jinja import costs several MB of memory a process that never
renders a template should not pay)."""

# Gemma 3's official turn format (the chat template of google/gemma-3-*-it, text content only),
# for Gemma files that carry no tokenizer.chat_template (the base models). It leaves out the
# template's leading bos_token: luminal's encode adds BOS where the file asks for it.
GEMMA3_CHAT_TEMPLATE = """\
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set first_user_prefix = '' -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
  {%- endif -%}
  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
  {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}
  {{- message['content'] | trim }}
  {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{ '<start_of_turn>model\n' }}
{%- endif -%}
"""
