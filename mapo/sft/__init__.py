"""Supervised fine-tuning on dialogues (`mapo sft`), the warm start before RL.

    outputs  what an SFT run folder holds (its model, adapter, marker); the `sft` config section is mapo.config.SftSpec
    data     reading and validating the JSONL dialogues, the held-out split
    tokens   a dialogue's token ids and trained positions, built by the RL path
    loss     token-mean cross-entropy over assistant tokens
    trainer  the loop, checkpoints, and the merged model it writes
    chain    `mapo train` with an `sft` section: SFT first, then RL from its output
    demos    a questioning game's reference-player games as dialogues to train on (`mapo env demos`)
"""
