"""What a person reads of a run: `mapo report` and the pages and figures behind it.

    run     report.html of a training (or SFT) run: its curves, outputs and config, written at
            the end of every run
    curves  the learning curve of several runs against a game's reference players (`--png`)
    plots   the one curve plotter every figure of training steps uses (the ablation's too)
    html    self-contained pages and the transcript viewer (`mapo eval`, `mapo compare`)
"""
