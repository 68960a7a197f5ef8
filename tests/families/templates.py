"""Chat templates written for the tests that behave like each family's real one.

Each reproduces the behaviour that defeats re-rendering the whole conversation:
a date stamp (Llama 3.x), the system prompt moved into the newest user turn
(Mistral), reasoning stripped from history but a think block always on a final
reply (Qwen3), a generation prompt that opens reasoning (DeepSeek-R1 distills),
the system folded into the first user turn
(Gemma 3), and channels (gpt-oss, whose final reply ends with <|return|> but
with <|end|> once a message follows it).
"""

LLAMA3 = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- if strftime_now is defined %}"
    "{%- set date_string = strftime_now('%d %b %Y') %}{%- else %}"
    "{%- set date_string = '26 Jul 2024' %}{%- endif %}{%- endif %}"
    "{%- if messages[0].role == 'system' %}{%- set system_message = messages[0].content %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message + '<|eot_id|>' }}"
    "{%- for m in messages %}"
    "{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)

MISTRAL = (
    "{{- bos_token }}"
    "{%- if messages[0].role == 'system' %}{%- set system_message = messages[0].content %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{%- for m in loop_messages %}"
    "{%- if m.role == 'user' %}"
    "{%- if loop.last and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + m.content + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + m.content + '[/INST]' }}{%- endif %}"
    "{%- else %}{{- ' ' + m.content + eos_token }}{%- endif %}"
    "{%- endfor %}"
)

_QWEN_BODY = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- set content = m.content %}{%- set reasoning = '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_user and (loop.last or reasoning) %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content"
    " + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
)

# Qwen3: reasoning is stripped from earlier replies, a final reply always shows
# a think block; with thinking off the generation prompt carries an empty one
# that history never shows.
QWEN3 = _QWEN_BODY + (
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)

# DeepSeek-R1 distills: the reply starts inside reasoning, opened by the prompt.
R1_DISTILL = _QWEN_BODY + (
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)

GEMMA3 = (
    "{{- bos_token }}"
    "{%- if messages[0].role == 'system' %}"
    "{%- set first_user_prefix = messages[0].content + '\\n\\n' %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set first_user_prefix = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for m in loop_messages %}"
    "{%- set role = 'model' if m.role == 'assistant' else m.role %}"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '')"
    " + m.content | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)

GPT_OSS = (
    "{%- if reasoning_effort is not defined %}{%- set reasoning_effort = 'medium' %}{%- endif %}"
    "{{- '<|start|>system<|message|>You are a helpful assistant.\\nReasoning: '"
    " + reasoning_effort + '<|end|>' }}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}"
    "{{- '<|start|>developer<|message|># Instructions\\n\\n' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'user' %}{{- '<|start|>user<|message|>' + m.content + '<|end|>' }}"
    "{%- else %}"
    "{%- if '<|channel|>' in m.content %}"
    "{{- raise_exception('You have passed a message containing <|channel|> tags in the "
    "content field.') }}{%- endif %}"
    "{%- if loop.last and not add_generation_prompt %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|return|>' }}"
    "{%- else %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)

# Gemma 2: no system role at all; the template refuses one.
GEMMA2 = (
    "{{- bos_token }}"
    "{%- if messages[0].role == 'system' %}"
    "{{- raise_exception('System role not supported') }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- set role = 'model' if m.role == 'assistant' else m.role %}"
    "{{- '<start_of_turn>' + role + '\\n' + m.content | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)
