"""What an SFT run folder holds besides a training run's files (mapo.run_folder)."""

SFT_MARKER = "sft.json"  # marks an SFT run folder: its final/ is a plain model, not adapters for a base
FINAL = "final"  # the SFT run's model folder
ADAPTER_DIR = "adapter"  # its LoRA adapter alone (a few MB, loadable as policy.model): a warm start to commit
