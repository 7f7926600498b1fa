"""mapo on verl, on CPU: the registered estimators against `compute_group`, the per-turn
reward layout round trip, and the agent loop driving full dialogues of the offline
environment with a real (tiny) model generating the policy's token ids.

Everything that needs verl is skipped with the reason when verl is not installed
(`pip install -e '.[verl]'`); the import guard and the version check run everywhere.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import types

import numpy as np
import pytest

from fixture_paths import REPO

from mapo.core.advantages import compute_batch, compute_group, returns
from mapo.engines.hf import HfEngine

HAS_VERL = importlib.util.find_spec("verl") is not None
needs_verl = pytest.mark.skipif(
    not HAS_VERL, reason="verl is not installed; these tests run in the verl venv (pip install -e '.[verl]')"
)


# ---------------------------------------------------------------- import guard and version check


def test_import_mapo_never_imports_verl() -> None:
    code = (
        "import sys, mapo, mapo.core.advantages, mapo.core.rewards, mapo.envs.base, mapo.cli; "
        "assert 'verl' not in sys.modules, sorted(m for m in sys.modules if m.startswith('verl'))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def _fresh_import(monkeypatch: pytest.MonkeyPatch, verl_module: object) -> None:
    for name in [m for m in sys.modules if m == "mapo.integrations.verl" or m.startswith("mapo.integrations.verl.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "verl", verl_module)
    import mapo.integrations.verl  # noqa: F401


def test_missing_verl_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # sys.modules[name] = None makes `import name` fail exactly as when it is not installed.
    with pytest.raises(ImportError, match=r"pip install 'verl\[verl-core\]==0\.9\.1' \(or, in a mapo checkout, pip install -e '\.\[verl\]'\)"):
        _fresh_import(monkeypatch, None)


def test_unsupported_verl_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    old = types.ModuleType("verl")
    old.__version__ = "0.4.0"  # type: ignore[attr-defined]
    monkeypatch.delenv("MAPO_VERL_SKIP_VERSION_CHECK", raising=False)
    with pytest.raises(ImportError, match=r"supports verl 0\.9\.1, but verl 0\.4\.0 is installed.*pip install 'verl\[verl-core\]==0\.9\.1'"):
        _fresh_import(monkeypatch, old)


# ---------------------------------------------------------------- synthetic verl batches


def _layout(rng: np.random.Generator, turns: int) -> list[int]:
    """A response mask: `turns` assistant runs (1s) with user messages (0s) between them."""
    mask: list[int] = []
    for t in range(turns):
        if t:
            mask += [0] * int(rng.integers(1, 4))
        mask += [1] * int(rng.integers(1, 5))
    return mask


def _batch(seed: int, group_sizes: dict[str, int], max_turns: int = 5):
    """Rows of several groups, interleaved, unequal turn counts, right-padded: (rewards, mask, uids, per-turn)."""
    import torch

    from mapo.integrations.verl import place_turn_rewards

    rng = np.random.default_rng(seed)
    rows = [(uid, int(rng.integers(1, max_turns + 1))) for uid, n in group_sizes.items() for _ in range(n)]
    rows = [rows[i] for i in rng.permutation(len(rows))]
    masks = [_layout(rng, turns) for _, turns in rows]
    # eighths: exact in the float32 tensors verl uses, so the two sides see the same rewards
    per_turn = [[float(x) / 8 for x in rng.integers(-24, 25, turns)] for _, turns in rows]
    width = max(len(m) for m in masks) + 3  # padding after every row
    mask = torch.zeros(len(rows), width, dtype=torch.int64)
    rewards = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, (m, r) in enumerate(zip(masks, per_turn)):
        mask[i, : len(m)] = torch.tensor(m)
        rewards[i, : len(m)] = torch.tensor(place_turn_rewards(r, m))
    uids = np.array([uid for uid, _ in rows], dtype=object)
    return rewards, mask, uids, per_turn


def _expected(per_turn, uids, mask, advantages_by_row):
    """Token tensors built from per-turn values: each assistant token of turn t gets the value, others 0."""
    import torch

    from mapo.integrations.verl import turn_spans

    out = torch.zeros(mask.shape, dtype=torch.float32)
    for row, values in advantages_by_row.items():
        for (start, end), value in zip(turn_spans(mask[row]), values):
            if value is not None:
                out[row, start:end] = float(value)
    return out


def _by_row(uids, per_turn, name: str, **params):
    """compute_group on each group (rows in order of appearance): row -> per-turn advantages, and returns."""
    advantages, rets = {}, {}
    for uid in dict.fromkeys(uids):
        rows = [i for i, u in enumerate(uids) if u == uid]
        group = compute_group(name, [per_turn[i] for i in rows], **params)
        for row, adv in zip(rows, group):
            advantages[row] = adv
            row_returns = returns(per_turn[row], params.get("gamma", 1.0))
            rets[row] = [g if a is not None else None for a, g in zip(adv, row_returns)]
    return advantages, rets


@needs_verl
@pytest.mark.parametrize(
    ("verl_name", "mapo_name", "section"),
    [
        ("mapo", "mapo", {"alpha": 0.3}),
        ("mapo", "mapo", {}),
        ("mapo_turn", "turn", {}),
        ("mapo_batch", "batch", {"eps": 1e-4}),
        ("mapo_ragged", "mapo_ragged", {}),
    ],
)
def test_registered_estimator_equals_compute_group_token_by_token(verl_name, mapo_name, section) -> None:
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    import mapo.integrations.verl  # noqa: F401  (registers the estimators)

    groups = {"a": 4, "b": 3, "c": 5, "d": 1}  # "d": a group of one trajectory
    rewards, mask, uids, per_turn = _batch(seed=len(verl_name) + len(section), group_sizes=groups)
    gamma = 0.9
    algo = OmegaConf.create({"gamma": gamma, "lam": 1.0, "adv_estimator": verl_name, "mapo": section})
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids}
    )
    # verl's own dispatch (the v1 trainer delegates every non-GRPO estimator to it)
    out = compute_advantage(data, adv_estimator=verl_name, gamma=gamma, config=algo)

    advantages, rets = _by_row(uids, per_turn, mapo_name, gamma=gamma, **section)
    untrained = any(v is None for row in advantages.values() for v in row)
    # mapo_ragged trains every turn; the others cut at T_min, which this batch must exercise
    assert untrained == (mapo_name != "mapo_ragged"), "the batch should have turns beyond T_min"
    assert torch.equal(out.batch["advantages"], _expected(per_turn, uids, mask, advantages))
    assert torch.equal(out.batch["returns"], _expected(per_turn, uids, mask, rets))
    # user tokens and padding never get an advantage; the single-trajectory group gets exactly 0
    assert not out.batch["advantages"][mask == 0].any()
    assert not out.batch["advantages"][np.flatnonzero(uids == "d")].any()


@needs_verl
def test_batch_scope_pools_the_whole_verl_batch() -> None:
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    import mapo.integrations.verl  # noqa: F401

    rewards, mask, uids, per_turn = _batch(seed=7, group_sizes={"x": 3, "y": 2, "z": 4})
    config = OmegaConf.create({"gamma": 1.0, "mapo": {"scope": "batch", "alpha": 0.5}})
    adv, _ = get_adv_estimator_fn("mapo")(token_level_rewards=rewards, response_mask=mask, index=uids, config=config)
    order = list(dict.fromkeys(uids))
    groups = [[per_turn[i] for i, u in enumerate(uids) if u == uid] for uid in order]
    nested = compute_batch("mapo", groups, scope="batch", alpha=0.5)
    by_row = {}
    for uid, group_adv in zip(order, nested):
        for row, a in zip([i for i, u in enumerate(uids) if u == uid], group_adv):
            by_row[row] = a
    assert torch.equal(adv, _expected(per_turn, uids, mask, by_row))
    group_scoped, _ = _by_row(uids, per_turn, "mapo")
    assert not torch.equal(adv, _expected(per_turn, uids, mask, group_scoped))


@needs_verl
def test_turn_layout_errors_name_row_and_token() -> None:
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from mapo.integrations.verl import TurnLayoutError, place_turn_rewards, turn_rewards

    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 0, 0, 0]])
    stray = torch.tensor([[0.0, 1.0, 0.5, 2.0, 0.0], [3.0, 0.0, 0.0, 0.0, 0.0]])
    with pytest.raises(TurnLayoutError, match=r"row 0, token 2: reward 0\.5 sits outside every assistant turn"):
        turn_rewards(stray, mask)
    with pytest.raises(TurnLayoutError, match="row 1: response_mask has no assistant tokens"):
        turn_rewards(torch.zeros(2, 5), torch.tensor([[1, 0, 0, 0, 0], [0, 0, 0, 0, 0]]))
    with pytest.raises(TurnLayoutError, match="3 turn scores for 2 assistant turns"):
        place_turn_rewards([1.0, 2.0, 3.0], [1, 1, 0, 1])
    estimator = get_adv_estimator_fn("mapo")
    with pytest.raises(ValueError, match="needs verl's group ids"):
        estimator(token_level_rewards=torch.zeros(2, 5), response_mask=mask, config=OmegaConf.create({"gamma": 1.0}))
    with pytest.raises(ValueError, match=r"algorithm\.mapo\.alfa: unknown parameter"):
        estimator(
            token_level_rewards=torch.zeros(2, 5), response_mask=mask, index=np.array(["a", "a"], dtype=object),
            config=OmegaConf.create({"gamma": 1.0, "mapo": {"alfa": 0.5}}),
        )


@needs_verl
def test_kl_penalty_in_reward_lands_on_its_own_turn() -> None:
    """With algorithm.use_kl_in_reward, verl adds a penalty on every assistant token: it counts toward that turn."""
    import torch

    from mapo.integrations.verl import place_turn_rewards, turn_rewards

    mask = [1, 1, 1, 0, 0, 1, 1]
    scores = torch.tensor([place_turn_rewards([2.0, -1.0], mask)])
    kl = -0.01 * torch.tensor([mask], dtype=torch.float32)
    recovered = turn_rewards(scores + kl, torch.tensor([mask]))
    assert recovered[0] == pytest.approx([2.0 - 0.03, -1.0 - 0.02], abs=1e-6)


# ---------------------------------------------------------------- the agent loop, end to end

EXAMPLES = REPO / "examples" / "verl"
RESPONSE_LENGTH = 200  # tokens for the whole dialogue after the opening
SESSIONS = 2  # dialogues per scenario: the group


class TinyModelServer:
    """Stands in for verl's server manager (`LLMServerClient.generate`: prompt ids in, TokenOutput out).

    Only the serving plumbing is replaced: a real tiny Llama samples every token id,
    with its log-probs, through mapo's own `Policy.sample`.
    """

    def __init__(self, policy) -> None:
        self.policy = policy
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        sample = HfEngine(self.policy).sample(
            [list(prompt_ids)], max_new_tokens=int(sampling_params["max_tokens"]),
            temperature=float(sampling_params["temperature"]), top_p=float(sampling_params["top_p"]),
        )[0]
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "token_ids": list(sample.ids),
                           "max_tokens": int(sampling_params["max_tokens"])})
        return TokenOutput(
            token_ids=list(sample.ids),
            log_probs=list(sample.logprobs) if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0},
        )


@pytest.fixture(scope="module")
def tiny_policy():
    import torch
    from tiny_policy import tiny_policy as load_tiny_policy

    torch.manual_seed(0)
    return load_tiny_policy()


def _example_config(*overrides: str):
    """The example's verl config (examples/verl/mapo_empathy_qwen7b.yaml) composed on verl's own schema."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        return compose(
            config_name="mapo_empathy_qwen7b",
            overrides=[
                f"data.max_response_length={RESPONSE_LENGTH}",
                "data.max_prompt_length=512",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={EXAMPLES / 'agent_loops.yaml'}",
                *overrides,
            ],
        )


def _make_loops(config, policy, server, count: int, **options):
    """Instantiate mapo_dialogue exactly as verl's AgentLoopWorker does, from the example's agent-loop YAML."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from mapo.integrations.verl import AGENT_NAME

    entries = {e.name: e for e in OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)}
    entry = entries[AGENT_NAME]
    for key, value in options.items():
        entry[key] = value
    return [
        hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(config=config),
            server_manager=server,
            tokenizer=policy.tokenizer,
            processor=None,
            hf_model_type="llama",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )
        for _ in range(count)
    ]


def _dataset_rows(tmp_path, config, tokenizer, count: int):
    """Rows of our parquet as verl's RLHFDataset hands them to an agent loop."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from mapo.integrations.verl.data import scenario_rows, write_parquet

    path = write_parquet(scenario_rows("train")[:count], tmp_path / "train.parquet")
    dataset = RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=config.data)
    return [dataset[i] for i in range(count)]


def _in_event_loop(coroutine):
    """Run a coroutine in a fresh event loop (as verl's worker runs its agent loops), then close it."""
    event_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(event_loop)
    try:
        return event_loop.run_until_complete(coroutine)
    finally:
        asyncio.set_event_loop(None)
        event_loop.close()


def _run_dialogues(config, policy, server, jobs, environment: str):
    """One mapo_dialogue per job (3 turns of at most 16 tokens), all in flight together."""
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def run_all():
        # as verl's worker does: the loops are built inside its event loop, one per dialogue
        loops = _make_loops(
            config, policy, server, len(jobs),
            environment=environment, environment_kwargs={}, max_turns=3, max_tokens_per_turn=16,
        )
        return await asyncio.gather(*(loop.run(dict(sampling), **job) for loop, job in zip(loops, jobs)))

    return _in_event_loop(run_all())


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    from mapo.integrations.verl import turn_spans

    return turn_spans(mask)


@needs_verl
@pytest.mark.parametrize("environment", ["empathy", "emotion"])
def test_agent_loop_drives_dialogues_and_rewards_reach_the_estimator(tmp_path, tiny_policy, environment) -> None:
    import torch
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    from mapo.integrations.verl import MapoAgentLoopOutput, turn_rewards

    config = _example_config()
    server = TinyModelServer(tiny_policy)
    rows = _dataset_rows(tmp_path, config, tiny_policy.tokenizer, count=2)
    jobs = [
        {**row, "uid": f"uid-{r}", "session_id": s, "global_steps": 1}
        for r, row in enumerate(rows) for s in range(SESSIONS)
    ]

    outputs = _run_dialogues(config, tiny_policy, server, jobs, environment=environment)

    calls_by_request: dict[str, list[dict]] = {}
    for call in server.calls:
        calls_by_request.setdefault(call["request_id"], []).append(call)
    assert len(calls_by_request) == len(jobs)  # one sticky request id per dialogue
    tokenizer = tiny_policy.tokenizer
    for out in outputs:
        assert isinstance(out, MapoAgentLoopOutput)
        mapo_info = out.extra_fields["mapo"]
        scores = out.extra_fields["turn_scores"]
        turns = len(scores)
        assert 1 <= turns <= 3 and out.num_turns == 2 * turns
        assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) <= RESPONSE_LENGTH
        runs = _runs(out.response_mask)
        assert len(runs) == turns

        # the ids trained on are the ids sampled, each reply generated from exactly the dialogue so far
        first_reply = out.response_ids[runs[0][0] : runs[0][1]]
        calls = next(c for c in calls_by_request.values() if c[0]["token_ids"] == first_reply)
        assert len(calls) == turns
        full = out.prompt_ids + out.response_ids
        for (start, end), call in zip(runs, calls):
            assert out.response_ids[start:end] == call["token_ids"]
            assert call["prompt_ids"] == full[: len(out.prompt_ids) + start]
            assert call["max_tokens"] == min(16, RESPONSE_LENGTH - start)
        # user messages are context: mask 0, log-prob 0, and they are the simulated user's words
        for (_, prev_end), (next_start, _) in zip(runs, runs[1:]):
            user_ids = out.response_ids[prev_end:next_start]
            assert "user" in tokenizer.decode(user_ids)  # the template's user header
            assert len(tokenizer.decode(user_ids, skip_special_tokens=True).strip()) > 3
            assert out.response_logprobs[prev_end:next_start] == [0.0] * (next_start - prev_end)

        # rewards: IDR from the environment's distances, one per turn, summing to D_0 - D_T
        d = mapo_info["distances"]
        assert len(d) == turns + 1 and d[0] > 0
        assert scores == pytest.approx([a - b for a, b in zip(d[:-1], d[1:])])
        assert out.reward_score == pytest.approx(d[0] - d[-1])

        extra = out.extra_fields["reward_extra_info"]
        assert extra["mapo_turns"] == turns and extra["mapo_distance_gain"] == pytest.approx(d[0] - d[-1])
        assert ("mapo_epmq" in extra) == (environment == "empathy")  # EPM-Q where the dynamics are EMPA's

        # placed -> rm_scores (verl's token_level_scores) -> recovered per-turn rewards
        rm_scores = out.as_dict()["rm_scores"]
        assert rm_scores.shape == (len(out.response_ids),)
        assert {int(i) for i in torch.nonzero(rm_scores).flatten()} <= {end - 1 for _, end in runs}
        recovered = turn_rewards(rm_scores[None, :], torch.tensor([out.response_mask]))[0]
        assert recovered == [float(np.float32(x)) for x in scores]

    # the rows as verl's v1 trainer pads them, then verl's own advantage dispatch with mapo
    width = max(len(o.response_ids) for o in outputs)
    rm = torch.zeros(len(outputs), width)
    mask = torch.zeros(len(outputs), width, dtype=torch.int64)
    for i, o in enumerate(outputs):
        rm[i, : len(o.response_ids)] = o.as_dict()["rm_scores"]
        mask[i, : len(o.response_mask)] = torch.tensor(o.response_mask)
    uids = np.array([job["uid"] for job in jobs], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": rm, "response_mask": mask}, non_tensors={"uid": uids})
    # what verl's v1 trainer calls in _compute_advantage, with its TransferQueue keys {uid}_{session}_{index}
    result = compute_advantage_for_multi_trajectories(
        data,
        batch_keys=[f"{job['uid']}_{job['session_id']}_0" for job in jobs],
        adv_estimator=config.algorithm.adv_estimator,
        gamma=config.algorithm.gamma,
        lam=config.algorithm.lam,
        num_repeat=SESSIONS,
        config=config.algorithm,
    )
    per_turn = [[float(np.float32(x)) for x in o.extra_fields["turn_scores"]] for o in outputs]
    expected, _ = _by_row(uids, per_turn, "mapo", gamma=float(config.algorithm.gamma), **dict(config.algorithm.mapo))
    assert torch.equal(result.batch["advantages"], _expected(per_turn, uids, mask, expected))
    assert result.batch["advantages"].abs().sum() > 0


@needs_verl
def test_v1_path_through_a_real_transfer_queue_normalises_across_the_dialogues_of_a_prompt(tmp_path, tiny_policy) -> None:
    """verl's own v1 steps around mapo: each dialogue goes through `AgentLoopWorkerTQ._agent_loop_postprocess`
    into a real TransferQueue (Ray actors), then `PPOTrainer._compute_advantage` reads the rows back and writes
    the advantages; per-turn rewards differ between the dialogues of one prompt."""
    import ray
    import torch
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from tensordict import TensorDict
    from tiny_policy import ToyEnvironment  # noqa: F401  (registers "toy-test": v_t depends on the reply)
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    sessions = 3
    config = _example_config(f"actor_rollout_ref.rollout.n={sessions}")
    rows = _dataset_rows(tmp_path, config, tiny_policy.tokenizer, count=2)
    jobs = [
        {**row, "uid": f"uid-{r}", "session_id": s, "global_steps": 1}
        for r, row in enumerate(rows) for s in range(sessions)
    ]
    torch.manual_seed(3)
    outputs = _run_dialogues(config, tiny_policy, TinyModelServer(tiny_policy), jobs, environment="toy-test")
    per_turn = [[float(np.float32(x)) for x in o.extra_fields["turn_scores"]] for o in outputs]
    for r in range(len(rows)):  # the point of the test: one prompt's dialogues earn different rewards
        assert len({tuple(per_turn[r * sessions + s]) for s in range(sessions)}) > 1

    keys = [f"{job['uid']}_{job['session_id']}_0" for job in jobs]  # the worker's {uid}_{session}_{index}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        # the Ray actor's own class, without the actor around it: no rollout servers or reward workers
        worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)
        worker.reward_loop_worker_handles, worker.processor, worker.distillation_enabled = None, None, False

        async def put_all():
            await asyncio.gather(*(worker._agent_loop_postprocess(o, False, **job) for o, job in zip(outputs, jobs)))

        _in_event_loop(put_all())
        # the actor's old log-probs (verl's _compute_old_log_prob step): here the sampler's own, as no update ran
        sampled = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["rollout_log_probs"])
        tq.kv_batch_put(keys=keys, partition_id="train",
                        fields=TensorDict({"old_log_probs": sampled["rollout_log_probs"]}, batch_size=len(keys)))
        batch = tq.KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train")
        metrics: dict = {}
        PPOTrainer._compute_advantage(types.SimpleNamespace(config=config), batch, metrics)
        stored = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages", "response_mask"])
        advantages = [stored["advantages"][i] for i in range(len(keys))]
        masks = [stored["response_mask"][i] for i in range(len(keys))]
    finally:
        tq.close()
        ray.shutdown()

    width = max(len(m) for m in masks)
    mask = torch.zeros(len(keys), width, dtype=torch.int64)
    got = torch.zeros(len(keys), width)
    for i, (m, a) in enumerate(zip(masks, advantages)):
        assert m.tolist() == outputs[i].response_mask
        mask[i, : len(m)], got[i, : len(a)] = m, a
    uids = np.array([job["uid"] for job in jobs], dtype=object)
    expected, _ = _by_row(uids, per_turn, "mapo", gamma=float(config.algorithm.gamma), **dict(config.algorithm.mapo))
    assert torch.equal(got, _expected(per_turn, uids, mask, expected))
    # the pooled statistics of a prompt reach every dialogue: one turn's advantages differ across its group
    assert len({float(got[i][_runs(mask[i].tolist())[0][0]]) for i in range(sessions)}) > 1


@needs_verl
def test_verl_alone_loads_mapo_through_its_plugin_entry_point(tmp_path) -> None:
    """A process that runs only `import verl` sees mapo's estimators and agent loop: verl loaded the
    `verl.plugins` entry point mapo declares; with verl's plugin loading off, they are absent."""
    import os

    code = (
        "import sys, verl\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "print(sorted(k for k in ADV_ESTIMATOR_REGISTRY if k.startswith('mapo')),"
        " 'mapo_dialogue' in _agent_loop_registry, 'mapo' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    seen = {}
    for policy in ("auto", "none"):
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env={**env, "VERL_USE_EXTERNAL_PLUGINS": policy}, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[policy] = proc.stdout.strip().splitlines()[-1]
    assert seen["auto"] == "['mapo', 'mapo_batch', 'mapo_ragged', 'mapo_turn'] True True"
    assert seen["none"] == "[] False False"


@needs_verl
def test_example_options_build_the_llm_environment(monkeypatch, tiny_policy) -> None:
    """The example's agent-loop file, unmodified: its environment options build the LLM-backed
    empathy environment pointed at MAPO_JUDGE_URL (construction only, no request is sent)."""
    import json

    from mapo.integrations.verl.agent_loop import _environment_factory

    monkeypatch.setenv("MAPO_JUDGE_URL", "http://judge-host:8001/v1")
    monkeypatch.setenv("MAPO_JUDGE_MODEL", "judge-7b")
    (loop,) = _make_loops(_example_config(), tiny_policy, TinyModelServer(tiny_policy), 1)
    env = _environment_factory(loop.environment, json.dumps(loop.environment_kwargs, sort_keys=True))()
    for role in (env.judge, env.director, env.actor):
        assert type(role).__name__.startswith("LLM")
        assert (role.backend.config.base_url, role.backend.config.model) == ("http://judge-host:8001/v1", "judge-7b")
    assert env.config.max_turns == 16 and loop.max_turns is None and loop.reward == "idr"


@needs_verl
def test_agent_loop_refuses_the_legacy_trainer(tiny_policy) -> None:
    from hydra.errors import InstantiationException

    config = _example_config("trainer.use_v1=false")
    with pytest.raises(InstantiationException, match=r"trainer\.use_v1=true"):  # hydra wraps our ValueError
        _make_loops(config, tiny_policy, TinyModelServer(tiny_policy), 1, environment_kwargs={})


@needs_verl
def test_data_rows_name_the_agent_loop_and_scenario(tmp_path, tiny_policy) -> None:
    from mapo.envs.empathy.cards import bundled_scenarios
    from mapo.envs.empathy.env import LISTENER_PROMPT

    config = _example_config()
    rows = _dataset_rows(tmp_path, config, tiny_policy.tokenizer, count=3)
    ids = sorted(s.id for s in bundled_scenarios("train"))[:3]
    assert [r["extra_info"]["scenario_id"] for r in rows] == ids
    assert all(r["agent_name"] == "mapo_dialogue" and r["extra_info"]["scenarios"] == "train" for r in rows)
    assert [list(r["raw_prompt"]) for r in rows] == [[{"role": "system", "content": LISTENER_PROMPT}]] * 3
