"""mapo.policy: loading, chat rendering, sampling and log-probs (tiny model; the embedded one is slow)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_policy import tiny_policy

from mapo.engines.hf import HfEngine, reply_text
from mapo.engines.stops import sentence_stop
from mapo.gguf_cache import gguf_model_folder
from mapo.model_source import ModelSourceError, PolicySpec, embedded_gguf_path, resolve_source
from mapo.policy import entropy_from_logits, load_policy
from mapo.text import count_sentences


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(lora=True)


def test_entropy_from_logits_matches_the_categorical_entropy():
    logits = torch.randn(3, 50) * 4
    want = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.allclose(entropy_from_logits(logits), want, atol=1e-5)


def test_token_logprobs_equal_a_full_log_softmax(policy):
    ids = torch.tensor([[5, 9, 3, 7, 2, 8], [4, 4, 6, 1, 9, 3]], device=policy.device)
    targets = torch.zeros_like(ids, dtype=torch.bool)
    targets[:, 2:] = True
    logp, entropy = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=0.7, with_entropy=True)
    with torch.no_grad():
        logits = policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, 1:-1].float() / 0.7
    full = torch.log_softmax(logits, dim=-1)
    assert torch.allclose(logp, full.gather(-1, ids[:, 2:].unsqueeze(-1)).squeeze(-1), atol=1e-5)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-4)


def test_incremental_rendering_equals_the_chat_template(policy):
    tok = policy.tokenizer
    system, users, replies = (
        "Be kind.",
        ["I lost my job.", "It was my dream job."],
        ["That sounds hard.", "Tell me more."],
    )
    ids = policy.first_prompt_ids(system, users[0])
    ids += policy.encode(replies[0]) + [policy.end_of_turn_id]
    ids += policy.next_prompt_ids(users[1])
    ids += policy.encode(replies[1]) + [policy.end_of_turn_id]
    messages = [{"role": "system", "content": system}]
    for u, r in zip(users, replies):
        messages += [{"role": "user", "content": u}, {"role": "assistant", "content": r}]
    full = tok.apply_chat_template(messages, tokenize=False)
    assert full.endswith("<|im_end|>\n")
    assert ids == policy.encode(full[: -len("\n")])  # the template's trailing newline comes with the next prompt


def test_sampled_logprobs_match_the_training_forward_under_left_padding(policy):
    short = policy.first_prompt_ids("S", "hi")
    long = policy.first_prompt_ids("A much longer system prompt with many more words in it.", "hello there, friend")
    torch.manual_seed(0)
    samples = HfEngine(policy).sample([short, long], max_new_tokens=6, temperature=0.9)
    for context, sample in zip([short, long], samples):
        assert len(sample.ids) == len(sample.logprobs) <= 6
        assert sample.truncated == (policy.end_of_turn_id not in sample.ids)
        ids = torch.tensor([context + sample.ids], device=policy.device)
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, len(context) :] = True
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=0.9)
        assert torch.allclose(logp[0].cpu(), torch.tensor(sample.logprobs), atol=1e-4)


def test_a_kept_cache_spares_the_prefix_and_changes_nothing(policy):
    contexts = [policy.first_prompt_ids("S", "hi"), policy.first_prompt_ids("A longer system prompt here.", "hello")]
    torch.manual_seed(1)
    first = HfEngine(policy).sample(contexts, max_new_tokens=5, keep_cache=True)
    nexts = []
    for context, sample in zip(contexts, first):
        assert sample.cache.length == len(context) + len(sample.ids) - 1
        tail = [policy.end_of_turn_id] if sample.truncated else []
        nexts.append(context + sample.ids + tail + policy.next_prompt_ids("and then?"))
    # the second row starts without a cache: mixed rows must work too
    second = HfEngine(policy).sample(nexts, max_new_tokens=5, caches=[first[0].cache, None])
    for context, sample in zip(nexts, second):
        ids = torch.tensor([context + sample.ids], device=policy.device)
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, len(context) :] = True
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
        assert torch.allclose(logp[0].cpu(), torch.tensor(sample.logprobs), atol=1e-4)
    with pytest.raises(ValueError, match="leaves nothing new"):
        HfEngine(policy).sample(contexts[:1], 2, caches=[first[0].cache])


def test_sampling_is_seeded(policy):
    context = policy.first_prompt_ids("S", "hi")
    torch.manual_seed(3)
    a = HfEngine(policy).sample([context, context], 5)
    torch.manual_seed(3)
    b = HfEngine(policy).sample([context, context], 5)
    assert [s.ids for s in a] == [s.ids for s in b]


def test_lora_reference_is_the_base_model(policy):
    ids = torch.tensor([policy.first_prompt_ids("S", "hi there")])
    targets = torch.ones_like(ids, dtype=torch.bool)
    targets[0, 0] = False
    before, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
    lora_b = [p for n, p in policy.model.named_parameters() if "lora_B" in n]
    with torch.no_grad():
        for p in lora_b:
            p.add_(0.05)
    try:
        moved, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
        with policy.reference():
            ref, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
        assert not torch.allclose(moved, before, atol=1e-4)
        assert torch.allclose(ref, before, atol=1e-6)
    finally:
        with torch.no_grad():
            for p in lora_b:
                p.sub_(0.05)


def test_full_finetune_reference_is_a_frozen_copy():
    policy = tiny_policy(lora=False)
    assert all(p.requires_grad for p in policy.model.parameters())
    ids = torch.tensor([policy.first_prompt_ids("S", "hi")])
    targets = torch.ones_like(ids, dtype=torch.bool)
    targets[0, 0] = False
    with pytest.raises(RuntimeError, match="keep_reference"):
        with policy.reference():
            pass
    policy.keep_reference()
    with policy.reference():
        before, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
    with torch.no_grad():
        policy.model.get_input_embeddings().weight.mul_(1.5)
    with policy.reference():
        ref, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
    assert torch.equal(ref, before)
    assert policy.model.get_input_embeddings().weight.requires_grad


@pytest.mark.parametrize("lora", [True, False])
def test_save_and_load_trained_round_trip(tmp_path, lora):
    policy = tiny_policy(lora=lora, seed=1)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(torch.randn_like(p) * 0.01)
    policy.save_pretrained(tmp_path / "p")
    fresh = tiny_policy(lora=lora, seed=1)
    fresh.load_trained(tmp_path / "p")
    for (n, a), b in zip(policy.model.state_dict().items(), fresh.model.state_dict().values()):
        assert torch.equal(a, b), n


def test_missing_model_sources_fail_clearly(tmp_path):
    with pytest.raises(ModelSourceError, match="does not exist.*'embedded', 'tiny'"):
        load_policy(PolicySpec(model=str(tmp_path / "nope")))
    (tmp_path / "m.gguf").write_bytes(b"")
    with pytest.raises(ModelSourceError, match="set policy.gguf_file"):
        resolve_source(PolicySpec(model=str(tmp_path)))
    with pytest.raises(ModelSourceError, match="no GGUF file"):
        resolve_source(PolicySpec(model=str(tmp_path), gguf_file="other.gguf"))
    with pytest.raises(ValueError, match="policy.dtype"):
        load_policy(PolicySpec(model="tiny", dtype="float16"))


def test_embedded_source_is_the_packaged_gguf():
    kind, path = resolve_source(PolicySpec())
    assert kind == "gguf" and path == embedded_gguf_path() and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
def test_embedded_gguf_converts_to_a_plain_folder_and_samples():
    folder = gguf_model_folder(embedded_gguf_path())
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    policy = load_policy(PolicySpec())
    torch.manual_seed(0)
    (sample,) = HfEngine(policy).sample([policy.first_prompt_ids("Be brief.", "Say hello.")], 12)
    assert sample.ids and policy.decode(sample.ids)


def test_lora_top_layers_adapts_only_the_last_layers():
    from mapo.model_source import LoraSpec

    policy = load_policy(PolicySpec(model="tiny", lora=LoraSpec(r=2, alpha=4, top_layers=1)))
    adapted = {n.split(".layers.")[1].split(".")[0] for n, _ in policy.model.named_parameters() if "lora_" in n}
    assert adapted == {"1"}  # the tiny model has layers 0 and 1
    everything = load_policy(PolicySpec(model="tiny", lora=LoraSpec(r=2, alpha=4, top_layers=12)))
    assert {n.split(".layers.")[1].split(".")[0] for n, _ in everything.model.named_parameters() if "lora_" in n} == {
        "0",
        "1",
    }
    with pytest.raises(ValueError, match="top_layers must be at least 1"):
        load_policy(PolicySpec(model="tiny", lora=LoraSpec(top_layers=0)))


def sentences(policy, ids) -> int:
    return count_sentences(reply_text(policy)(ids))


def test_sentence_limit_ends_replies_after_whole_sentences():
    policy = tiny_policy(seed=3)
    text = "That sounds heavy. Was it sudden?! I wonder... what then"
    ids = policy.encode(text)
    assert sentences(policy, ids) == 3  # the ellipsis counts once; "what then" is not a sentence
    stop = sentence_stop(reply_text(policy), ids, 2)
    assert policy.decode(ids[:stop]) == "That sounds heavy. Was it sudden?!"
    assert sentence_stop(reply_text(policy), ids, 4) is None

    # The real generate path: a logit bias makes " ok" and "." the only likely tokens, so
    # replies hold many sentences; the limit must end each one right after its second.
    ok, dot = policy.encode(" ok"), policy.encode(".")
    bias = torch.full((policy.model.config.vocab_size,), -30.0, device=policy.device)
    bias[ok + dot] = 0.0
    hook = policy.model.lm_head.register_forward_hook(lambda module, args, out: out + bias)
    try:
        contexts = [policy.first_prompt_ids("Be brief.", f"Hello {k}") for k in range(4)]
        limited = HfEngine(policy).sample(contexts, 40, temperature=1.0, max_sentences=2)
        unlimited = HfEngine(policy).sample(contexts, 40, temperature=1.0)
    finally:
        hook.remove()
    for sample in limited:
        assert not sample.truncated and sample.ids[-1] != policy.end_of_turn_id
        assert sentences(policy, sample.ids) == 2 and policy.decode(sample.ids).endswith(".")
        assert len(sample.logprobs) == len(sample.ids)
    assert all(s.truncated and sentences(policy, s.ids) > 2 for s in unlimited)
