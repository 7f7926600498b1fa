"""Tiny random chat models of each family mapo supports, built offline for the chat-template tests.

Each family gets its chat template (written here, reproducing the behaviour that matters
for prefix stability: default system prompts, dates, where the system prompt goes,
reasoning stripped from history, roles refused), a config of its architecture at toy
size, and a byte-level BPE tokenizer trained in the test session with the Llama 3 / Qwen2
split pattern plus the family's special tokens. Mistral's and Gemma's SentencePiece
tokenizers are approximated by it: what is under test is the template. SmolLM2 uses its
real tokenizer and template (the embedded GGUF's).
"""

from __future__ import annotations

from pathlib import Path

import torch

SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

QWEN25 = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}{%- set rest = messages[1:] -%}"
    "{%- else -%}"
    "{{- '<|im_start|>system\\nYou are Qwen, a helpful assistant.<|im_end|>\\n' -}}{%- set rest = messages -%}"
    "{%- endif -%}"
    "{%- for m in rest -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Reasoning is dropped from replies before the last user message; the last reply shows an (empty) think block.
QWEN3 = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}{{- '<|im_start|>user\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- set content = m['content'].split('</think>')[-1].lstrip('\\n') -%}"
    "{%- if loop.index0 > ns.last_user -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + content + '<|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Llama 3.1-3.3: a system block (with knowledge and today's dates) always comes first.
LLAMA3 = (
    "{{- bos_token -}}"
    "{%- if messages[0]['role'] == 'system' -%}{%- set system = messages[0]['content'] -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- set rest = messages -%}{%- endif -%}"
    "{%- if date_string is not defined -%}{%- set date_string = strftime_now('%d %b %Y') -%}{%- endif -%}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: December 2023\\nToday Date: '"
    " + date_string + '\\n\\n' + system + '<|eot_id|>' -}}"
    "{%- for m in rest -%}"
    "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)

# Mistral v0.3: the system prompt is put in front of the *last* user message.
MISTRAL = (
    "{%- if messages[0]['role'] == 'system' -%}{%- set system = messages[0]['content'] -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}{%- set rest = messages -%}{%- endif -%}"
    "{{- bos_token -}}"
    "{%- for m in rest -%}"
    "{%- if m['role'] == 'user' -%}"
    "{%- if loop.last and system is defined -%}{{- '[INST] ' + system + '\\n\\n' + m['content'] + '[/INST]' -}}"
    "{%- else -%}{{- '[INST] ' + m['content'] + '[/INST]' -}}{%- endif -%}"
    "{%- else -%}{{- ' ' + m['content'] | trim + eos_token -}}{%- endif -%}"
    "{%- endfor -%}"
)

# Gemma 2: no system role; the assistant is 'model'; turns end with <end_of_turn>, not eos.
GEMMA = (
    "{{- bos_token -}}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{{- raise_exception('System role not supported') -}}{%- endif -%}"
    "{%- set role = 'model' if m['role'] == 'assistant' else m['role'] -%}"
    "{{- '<start_of_turn>' + role + '\\n' + m['content'] | trim + '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

# family -> (template, special tokens, bos, eos, pad, config class name, extra config)
FAMILIES = {
    "qwen2.5": (QWEN25, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", "<|endoftext|>",
                "Qwen2Config", {}),
    "qwen3": (QWEN3, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"], None, "<|im_end|>",
              "<|endoftext|>", "Qwen3Config", {"head_dim": 8}),
    "llama3": (LLAMA3, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>", "LlamaConfig", {}),
    "mistral": (MISTRAL, ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>", "<unk>", "MistralConfig", {}),
    "gemma": (GEMMA, ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", "<pad>",
              "Gemma2Config", {"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 512}),
}

CORPUS = [
    "Hello, I had a rough week. My manager keeps ignoring my ideas. Thanks, I will try that.",
    "I am sorry to hear that. What happened? That sounds frustrating. How did it feel? Good luck.",
    "You are a kind listener. Be kind. Hello, I am toy 0. Turn 1 heard. Say more?",
    "system user assistant model Cutting Knowledge Date: December 2023 Today Date: 23 Nov 2026",
]


def family_tokenizer(family: str):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer trained on CORPUS, with the family's special tokens and template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    template, specials, bos, eos, pad, _, _ = FAMILIES[family]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=bos, eos_token=eos, pad_token=pad)
    fast.chat_template = template
    return fast


def family_model_folder(family: str, folder: Path, seed: int = 0) -> Path:
    """A saved two-layer random model of the family's architecture with its tokenizer: a policy.model folder."""
    import transformers

    tokenizer = family_tokenizer(family)
    *_, config_name, extra = FAMILIES[family]
    config = getattr(transformers, config_name)(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        **extra,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
