"""Chat models of every supported family: the load-time template check, rollouts and packed training.

Tiny random models of each family's architecture with offline tokenizers (tests/chat_families.py):
Qwen2.5, Qwen3, Llama 3.x, Mistral, Gemma, plus SmolLM2 (the embedded tokenizer). Also:
a model folder's generation_config must not change how rollouts sample (mapo.generation).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from chat_families import FAMILIES, family_model_folder
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios

from mapo.chat_template import ChatTemplateError, load_template
from mapo.config import OptimSpec
from mapo.core.losses import LossSpec, check_reply_ids, packed_sequence
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.update import update
from mapo.engines.hf import HfEngine
from mapo.model_source import LoraSpec, PolicySpec
from mapo.policy import load_policy

# family -> (policy.chat_template, expected end-of-turn token, system prompt folded into the first user turn)
EXPECTED = {
    "qwen2.5": (None, "<|im_end|>", False),
    "qwen3": ("chatml", "<|im_end|>", False),  # its own template strips earlier reasoning: see below
    "llama3": (None, "<|eot_id|>", False),
    "mistral": (None, "</s>", True),  # puts the system prompt in the last user turn
    "gemma": (None, "<end_of_turn>", True),  # refuses a system role
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {family: family_model_folder(family, tmp_path_factory.mktemp(family)) for family in FAMILIES}


def family_policy(folders, family: str, **options):  # type: ignore[no-untyped-def]
    spec = PolicySpec(model=str(folders[family]), lora=LoraSpec(r=4, alpha=8), **options)
    return load_policy(spec, seed=0)


def train_one_step(policy) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Roll out 2 scenarios x 2 dialogues x 2 turns with the toy env, check ids, take one update."""
    torch.manual_seed(0)
    spec = RolloutSpec(samples_per_scenario=2, scenarios_per_step=2, max_turns=2, max_new_tokens=6,
                       system_prompt="Be kind.")
    groups = rollout(policy, toy_scenarios(2), lambda: ToyEnvironment(end_early=False), spec, seed=1)
    sequences = []
    for group in groups:
        for k, trajectory in enumerate(group.trajectories):
            check_reply_ids(trajectory)
            sequences.append(packed_sequence(trajectory, [1.0 if k % 2 else -1.0] * len(trajectory.turns)))
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    return update(policy, optimizer, sequences, OptimSpec(), LossSpec(), spec.temperature, np.random.default_rng(0))


@pytest.mark.parametrize("family", list(EXPECTED))
def test_every_family_passes_the_check_rolls_out_and_trains(folders, family):
    template, end_token, folded = EXPECTED[family]
    policy = family_policy(folders, family, chat_template=template)
    assert policy.tokenizer.convert_ids_to_tokens(policy.end_of_turn_id) == end_token
    assert policy.fold_system is folded
    metrics = train_one_step(policy)
    assert metrics["optimizer_steps"] == 1.0 and metrics["skipped_updates"] == 0.0
    assert np.isfinite(metrics["loss"]) and metrics["trained_tokens"] > 0
    # on-policy: the recorded log-probs are the training forward's (ratio 1 before the step)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4)


def test_smollm2_passes_with_its_own_template():
    policy = tiny_policy(lora=True)
    assert policy.tokenizer.convert_ids_to_tokens(policy.end_of_turn_id) == "<|im_end|>"
    assert not policy.fold_system
    assert train_one_step(policy)["optimizer_steps"] == 1.0


def test_a_template_that_rewrites_history_stops_the_load_naming_the_model_and_the_way_out(folders):
    with pytest.raises(ChatTemplateError) as info:
        family_policy(folders, "qwen3")
    message = str(info.value)
    assert str(folders["qwen3"]) in message
    assert "rewrites history" in message and "policy.chat_template" in message


def test_a_folded_system_prompt_opens_the_first_user_turn(folders):
    policy = family_policy(folders, "mistral")
    text = policy.tokenizer.decode(policy.first_prompt_ids("Be kind.", "Hello there."))
    assert text == "<s>[INST] Be kind.\n\nHello there.[/INST]"


def test_an_unknown_chat_template_is_named():
    with pytest.raises(ChatTemplateError, match="no-such-template"):
        load_template("no-such-template")


def test_a_shipped_generation_config_does_not_change_rollout_sampling(folders, tmp_path, caplog):
    import transformers

    folder = folders["qwen2.5"]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    vocab = model.config.vocab_size
    suppressed = set(range(0, vocab, 2))  # every even id
    model.generation_config = transformers.GenerationConfig(
        do_sample=True, repetition_penalty=1.3, no_repeat_ngram_size=3, min_new_tokens=5, top_k=20, top_p=0.8,
        suppress_tokens=sorted(suppressed), bos_token_id=model.config.bos_token_id,
        eos_token_id=model.config.eos_token_id, pad_token_id=model.config.pad_token_id,
    )
    model.save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="mapo.generation"):
        policy = load_policy(PolicySpec(model=str(tmp_path), lora=LoraSpec(enabled=False)))
    assert "repetition_penalty=1.3" in caplog.text and "suppress_tokens" in caplog.text
    torch.manual_seed(0)
    contexts = [policy.first_prompt_ids("Be kind.", f"Hello {k}.") for k in range(3)]
    samples = HfEngine(policy).sample(contexts, 12)
    # applied, the suppression would leave only odd ids; plain sampling draws even ones too
    assert any(i in suppressed for s in samples for i in s.ids)
    for context, sample in zip(contexts, samples):
        ids = torch.tensor([context + sample.ids])
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, len(context):] = True
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
        # cached generation against one full forward: float32 order differs by CPU (1.6e-4 on a Xeon
        # with AMX); applied, the processors above (half the vocabulary suppressed) move them by far more
        assert logp[0].tolist() == pytest.approx(sample.logprobs, abs=5e-4)
